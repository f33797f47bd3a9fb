/*
 * nd_ep_bind.cpp: what fi_ep_bind attaches to an endpoint before fi_enable
 * (CQs, counters, a shared receive or transmit context), and letting go of
 * it at close (EndpointBindings in nd_ep.h). The EQ's binding is in nd_ep.cpp.
 */
#include "nd_cntr.h"
#include "nd_cq.h"
#include "nd_ep.h"
#include "nd_srx.h"
#include "nd_stx.h"

namespace nd {

int Endpoint::bind_cq(CompletionQueue *cq, uint64_t flags)
{
	if (fsm.enabled()) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cq): bind before fi_enable\n");
		return -FI_EOPBADSTATE;
	}
	if (cq->owning_domain() != domain) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cq): the CQ belongs to another domain\n");
		return -FI_EINVAL;
	}
	if (!(flags & (FI_TRANSMIT | FI_RECV)) ||
	    (flags & ~(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION))) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cq): flags 0x%llx; FI_TRANSMIT and/or FI_RECV, "
			"optionally FI_SELECTIVE_COMPLETION\n", static_cast<unsigned long long>(flags));
		return -FI_EBADFLAGS;
	}
	if (((flags & FI_TRANSMIT) && bindings.user_tx_cq) || ((flags & FI_RECV) && bindings.user_rx_cq)) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cq): a CQ is already bound for that direction\n");
		return -FI_EINVAL;
	}
	const bool selective = flags & FI_SELECTIVE_COMPLETION;
	if (flags & FI_TRANSMIT) {
		bindings.user_tx_cq = cq;
		bindings.tx_selective = selective;
		cq->bindings().acquire();
	}
	if (flags & FI_RECV) {
		bindings.user_rx_cq = cq;
		bindings.rx_selective = selective;
		cq->bindings().acquire();
	}
	return 0;
}

int Endpoint::bind_cntr(Counter *cntr, uint64_t flags)
{
	if (fsm.enabled()) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): bind before fi_enable\n");
		return -FI_EOPBADSTATE;
	}
	if (cntr->domain != domain) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): the counter belongs to another domain\n");
		return -FI_EINVAL;
	}
	if (flags & (FI_REMOTE_READ | FI_REMOTE_WRITE)) {
		/* The target's NIC places RDMA data without a completion. */
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): FI_REMOTE_READ/FI_REMOTE_WRITE counters are not "
			"supported: RDMA reads and writes complete at the target without a completion\n");
		return -FI_ENOSYS;
	}
	if (!(flags & (FI_SEND | FI_RECV | FI_READ | FI_WRITE)) ||
	    (flags & ~(FI_SEND | FI_RECV | FI_READ | FI_WRITE))) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): flags 0x%llx; FI_SEND, FI_RECV, FI_READ, FI_WRITE\n",
			static_cast<unsigned long long>(flags));
		return -FI_EBADFLAGS;
	}
	if ((flags & FI_RECV) && bindings.srx()) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): receive counters with a shared receive context are not supported\n");
		return -FI_ENOSYS;
	}
	const std::pair<uint64_t, CounterKind> kinds[] = {{FI_SEND, CounterKind::send},
							   {FI_RECV, CounterKind::recv},
							   {FI_READ, CounterKind::read},
							   {FI_WRITE, CounterKind::write}};
	for (const auto &[bit, kind] : kinds) {
		if ((flags & bit) && bindings.counter(kind)) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): a counter is already bound for those events\n");
			return -FI_EINVAL;
		}
	}
	EndpointExtras &extras = bindings.extras_made();
	for (const auto &[bit, kind] : kinds)
		if (flags & bit)
			extras.counters[static_cast<size_t>(kind)] = cntr;
	cntr->attach(this);
	return 0;
}

namespace {

/* What binding a shared context (srx, stx) first asks of the endpoint:
 * not enabled yet, none of that kind bound, and the same domain. */
int check_context_bind(const char *call, bool enabled, bool has_one, bool same_domain)
{
	if (enabled) {
		ND_WARN(FI_LOG_EP_CTRL, "%s: bind before fi_enable\n", call);
		return -FI_EOPBADSTATE;
	}
	if (has_one || !same_domain) {
		ND_WARN(FI_LOG_EP_CTRL, "%s: %s\n", call,
			has_one ? "the endpoint already has one" : "the context belongs to another domain");
		return -FI_EINVAL;
	}
	return 0;
}

} // namespace

int Endpoint::bind_srx(SharedRx *rx)
{
	if (options.framed) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(srx): an endpoint with FI_TAGGED matches its messages in nd "
			"and takes no shared receive context\n");
		return -FI_EOPNOTSUPP;
	}
	if (int ret = check_context_bind("fi_ep_bind(srx)", fsm.enabled(), bindings.srx(), rx->domain == domain))
		return ret;
	if (bindings.counter(CounterKind::recv)) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(srx): receive counters with a shared receive context are not supported\n");
		return -FI_ENOSYS;
	}
	bindings.extras_made().srx = rx;
	rx->bound.acquire();
	return 0;
}

int Endpoint::bind_stx(SharedTx *tx)
{
	if (int ret = check_context_bind("fi_ep_bind(stx)", fsm.enabled(), bindings.stx(), tx->domain == domain))
		return ret;
	if (!attr.shared_tx) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(stx): the endpoint was opened with its own transmit "
			"context; ask for ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT\n");
		return -FI_EINVAL;
	}
	bindings.extras_made().stx = tx;
	tx->bound.acquire();
	return 0;
}

/* At close: the CQs, counters and shared contexts let go. */
void Endpoint::unbind_all() noexcept
{
	bindings.for_each_counter([this](Counter *c) { c->detach(this); });
	if (bindings.user_tx_cq)
		bindings.user_tx_cq->bindings().release();
	if (bindings.user_rx_cq)
		bindings.user_rx_cq->bindings().release();
	if (SharedRx *srx = bindings.srx())
		srx->bound.release();
	if (SharedTx *stx = bindings.stx())
		stx->bound.release();
	bindings.user_tx_cq = bindings.user_rx_cq = nullptr;
	if (EndpointExtras *extras = bindings.extras.get()) {
		/* A claimed tuple stays until release_claimed_tuple. */
		extras->counters = {};
		extras->srx = nullptr;
		extras->stx = nullptr;
	}
}

} // namespace nd
