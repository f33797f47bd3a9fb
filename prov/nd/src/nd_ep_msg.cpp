/*
 * nd_ep_msg.cpp: the message operations of an unframed endpoint (fi_send
 * ... fi_recvmsg, fi_inject, fi_injectdata: ep_msg_ops), on the send and
 * receive paths (nd_ep_send.cpp, nd_ep_recv.cpp, nd_ep_inject.h). RMA is in
 * nd_ep_rma.cpp, a framed endpoint's messages in nd_ep_tagged.cpp.
 */
#include "nd_domain.h"
#include "nd_ep.h"
#include "nd_ep_inject.h"
#include "nd_ep_post_one.h"

#include <arpa/inet.h>

namespace nd {

namespace {


uint32_t imm_of(uint64_t data) { return htonl(static_cast<uint32_t>(data)); }

bool wants_completion(const Endpoint *ep, uint64_t flags)
{
	return !ep->bindings.tx_selective || (flags & FI_COMPLETION);
}

ssize_t send_common(Endpoint *ep, const iovec *iov, void **desc, size_t count, void *context,
		    uint64_t flags, bool with_data, uint64_t data, bool report, const char *call)
{
	TxRequest r;
	r.opcode = with_data ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
	r.iov = iov;
	r.desc = desc;
	r.count = count;
	r.remote_addr = 0;
	r.remote_key = 0;
	r.imm_data = with_data ? imm_of(data) : 0;
	r.context = context;
	r.flags = flags;
	r.cq_flags = FI_SEND | FI_MSG;
	r.report = report;
	r.call = call;
	return ep->post_tx(r);
}

template <Keeps K>
ssize_t ep_recv(fid_ep *fep, void *buf, size_t len, void *desc, fi_addr_t, void *context) noexcept
{
	Endpoint *ep = ep_of(fep);
	return ep->post_recv_one<K>(buf, len, desc, context);
}

ssize_t ep_recvv(fid_ep *fep, const iovec *iov, void **desc, size_t count, fi_addr_t,
		 void *context) noexcept
{
	Endpoint *ep = ep_of(fep);
	return ep->post_rx(iov, desc, count, context, ep->data.rx.op_flags);
}

ssize_t ep_recvmsg(fid_ep *fep, const fi_msg *msg, uint64_t flags) noexcept
{
	if (!msg) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recvmsg: msg is NULL\n");
		return -FI_EINVAL;
	}
	return ep_of(fep)->post_rx(msg->msg_iov, msg->desc, msg->iov_count, msg->context, flags);
}

template <Keeps K>
ssize_t ep_send(fid_ep *fep, const void *buf, size_t len, void *desc, fi_addr_t,
		void *context) noexcept
{
	Endpoint *ep = ep_of(fep);
	const uint64_t flags = ep->data.tx.op_flags;
	const bool report = wants_completion(ep, flags);
	return ep->post_one<IBV_WR_SEND, K>(buf, len, desc, 0, 0, context, flags, report, "fi_send", [&] {
		iovec iov{const_cast<void *>(buf), len};
		return send_common(ep, &iov, &desc, 1, context, flags, false, 0, report, "fi_send");
	});
}

ssize_t ep_sendv(fid_ep *fep, const iovec *iov, void **desc, size_t count, fi_addr_t,
		 void *context) noexcept
{
	Endpoint *ep = ep_of(fep);
	return send_common(ep, iov, desc, count, context, ep->data.tx.op_flags, false, 0,
			   wants_completion(ep, ep->data.tx.op_flags), "fi_sendv");
}

ssize_t ep_sendmsg(fid_ep *fep, const fi_msg *msg, uint64_t flags) noexcept
{
	if (!msg) {
		ND_WARN(FI_LOG_EP_DATA, "fi_sendmsg: msg is NULL\n");
		return -FI_EINVAL;
	}
	Endpoint *ep = ep_of(fep);
	return send_common(ep, msg->msg_iov, msg->desc, msg->iov_count, msg->context, flags,
			   flags & FI_REMOTE_CQ_DATA, msg->data, wants_completion(ep, flags),
			   "fi_sendmsg");
}

template <Keeps K>
ssize_t ep_inject(fid_ep *fep, const void *buf, size_t len, fi_addr_t) noexcept
{
	return ep_of(fep)->post_inline<IBV_WR_SEND, K>(buf, len, 0, 0, 0);
}

ssize_t ep_senddata(fid_ep *fep, const void *buf, size_t len, void *desc, uint64_t data,
		    fi_addr_t, void *context) noexcept
{
	Endpoint *ep = ep_of(fep);
	iovec iov{const_cast<void *>(buf), len};
	return send_common(ep, &iov, &desc, 1, context, ep->data.tx.op_flags, true, data,
			   wants_completion(ep, ep->data.tx.op_flags), "fi_senddata");
}

ssize_t ep_injectdata(fid_ep *fep, const void *buf, size_t len, uint64_t data, fi_addr_t) noexcept
{
	return ep_of(fep)->post_inline<IBV_WR_SEND_WITH_IMM>(buf, len, imm_of(data), 0, 0);
}

/* K: what the table's fast paths keep (nd_ep.h). */
template <Keeps K>
constexpr fi_ops_msg msg_ops() noexcept
{
	return {
		.size = sizeof(fi_ops_msg),
		.recv = ep_recv<K>,
		.recvv = ep_recvv,
		.recvmsg = ep_recvmsg,
		.send = ep_send<K>,
		.sendv = ep_sendv,
		.sendmsg = ep_sendmsg,
		.inject = ep_inject<K>,
		.senddata = ep_senddata,
		.injectdata = ep_injectdata,
	};
}

} // namespace

fi_ops_msg ep_msg_ops = msg_ops<Keeps::nothing>();
fi_ops_msg ep_credit_msg_ops = msg_ops<Keeps::receive_credits>();
fi_ops_msg ep_flow_msg_ops = msg_ops<Keeps::flow_credits>();

} // namespace nd
