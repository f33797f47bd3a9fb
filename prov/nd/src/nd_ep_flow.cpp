/*
 * nd_ep_flow.cpp: an endpoint's half of ofi_rxm's credit-based flow control
 * (nd_flow_ctrl.h): the extension's four calls, and the credit messages
 * the receives owe.
 */
#include "nd_domain.h"
#include "nd_ep.h"
#include "nd_flow_ctrl.h"

#include <atomic>
#include <mutex>

namespace nd {

/* Whether this endpoint can keep rxm's credits: a message endpoint with a
 * receive ring of its own whose every slot is one receive the peer may
 * send into (no shared receive context, no multi-receive buffers, no
 * framing, whose buffers are nd's), on a transport that retries a message
 * that finds no receive. iWARP's endpoints keep credits of their own
 * (nd_credits.h) and are not offered these. */
bool Endpoint::flow_available() const noexcept
{
	return domain->flow_ctrl && !domain->iwarp && data.rx.queue && !bindings.srx() &&
	       !(attr.caps & FI_MULTI_RECV) && !options.framed;
}

/* Under the receive lock: what the receives posted so far owe the peer,
 * from the receive ring's posted count. */
uint64_t Endpoint::flow_credits_due() noexcept
{
	return data.flow.due(data.rx.queue->posted_acquire());
}

/* Through rxm's handler, which sends a credit message of its own on this
 * endpoint (fi_sendmsg with FI_PRIORITY): called with no lock of nd's held.
 * A handler that fails, or none set, leaves the credits owed, for the next
 * receive. */
void Endpoint::send_flow_credits(uint64_t credits) noexcept
{
	ssize_t (*send)(fid_ep *, uint64_t) = domain->send_credits;
	if (const ssize_t ret = send ? send(&ep, credits) : -FI_ENOSYS) {
		ND_INFO(FI_LOG_EP_DATA, "endpoint %p: ofi_rxm could not send %llu credits (%zd); owed again\n",
			static_cast<void *>(this), static_cast<unsigned long long>(credits), ret);
		std::lock_guard<OptionalLock> guard(data.rx.lock);
		data.flow.not_told(credits);
	}
}

namespace {

Endpoint *flow_endpoint(fid_ep *ep_fid, const char *call) noexcept
{
	if (!ep_fid || ep_fid->fid.fclass != FI_CLASS_EP) {
		ND_WARN(FI_LOG_EP_CTRL, "%s: not an endpoint of nd's\n", call);
		return nullptr;
	}
	return ep_of(ep_fid);
}

bool flow_available(fid_ep *ep_fid) noexcept
{
	Endpoint *ep = flow_endpoint(ep_fid, "flow control: available");
	return ep && ep->flow_available();
}

/* Once the connection is up on both sides that can: each side starts with
 * one credit, and the receives posted so far (rxm's, before connecting) go
 * to the peer now. */
int flow_enable(fid_ep *ep_fid, uint64_t threshold) noexcept
{
	return guarded("flow control: enable", [&] {
		Endpoint *ep = flow_endpoint(ep_fid, "flow control: enable");
		if (!ep)
			return -FI_EINVAL;
		if (!ep->flow_available()) {
			ND_INFO(FI_LOG_EP_CTRL, "endpoint %p: flow control not available here\n",
				static_cast<void *>(ep));
			return -FI_ENOSYS;
		}
		{
			std::lock_guard<OptionalLock> guard(ep->data.tx.lock);
			ep->data.flow.start_sending();
			ep->data.link.set_slow_tx(static_cast<uint8_t>(ep->data.link.slow_tx() | SlowTx::flow));
		}
		uint64_t owed;
		{
			std::lock_guard<OptionalLock> guard(ep->data.rx.lock);
			ep->data.flow.set_threshold(threshold ? threshold : 1);
			ep->data.set_slow_rx(SlowRx::flow, true);
			owed = ep->flow_credits_due();
		}
		/* Entry points whose fast paths keep the credits, where they are
		 * the endpoint's one reason for the slow path (nd_ep_post_one.h);
		 * the endpoint's own tables (flow_available: unframed, not
		 * iWARP's) send every call to the general path from here on,
		 * which keeps them too, so a call that read the old table is
		 * right either way. */
		std::atomic_ref<fi_ops_msg *>(ep->ep.msg).store(&ep_flow_msg_ops, std::memory_order_release);
		std::atomic_ref<fi_ops_rma *>(ep->ep.rma).store(&ep_flow_rma_ops, std::memory_order_release);
		ND_INFO(FI_LOG_EP_CTRL, "endpoint %p: ofi_rxm's flow control on, credits told %llu at a time\n",
			static_cast<void *>(ep), static_cast<unsigned long long>(threshold));
		if (owed)
			ep->send_flow_credits(owed);
		return 0;
	});
}

void flow_add_credits(fid_ep *ep_fid, uint64_t credits) noexcept
{
	Endpoint *ep = flow_endpoint(ep_fid, "flow control: add_credits");
	if (!ep)
		return;
	std::lock_guard<OptionalLock> guard(ep->data.tx.lock);
	ep->data.flow.add(credits);
}

void flow_set_send_handler(fid_domain *domain_fid, ssize_t (*send_handler)(fid_ep *ep, uint64_t credits)) noexcept
{
	if (!domain_fid || domain_fid->fid.fclass != FI_CLASS_DOMAIN) {
		ND_WARN(FI_LOG_DOMAIN, "flow control: set_send_handler: not a domain of nd's\n");
		return;
	}
	from_fid<Domain>(domain_fid)->send_credits = send_handler;
}

constexpr OfiFlowCtrlOps kFlowCtrlOps{
	sizeof(OfiFlowCtrlOps), flow_available, flow_enable, flow_add_credits, flow_set_send_handler,
};

} // namespace

const void *flow_ctrl_ops() noexcept
{
	return &kFlowCtrlOps;
}

} // namespace nd
