/*
 * nd_ep_tagged.cpp: a framed endpoint's data path (nd_framing.h): its
 * receive buffers, and the message and tagged operations (fi_send ...
 * fi_recvmsg, fi_tsend ... fi_trecvmsg) of an endpoint opened with
 * FI_TAGGED. Sends go through the endpoint's send queue (post_tx) with the
 * header first; receives wait in the framing until a message matches.
 */
#include "nd_cq.h"
#include "nd_domain.h"
#include "nd_memlock.h"
#include "nd_ep.h"
#include "nd_framing.h"

#include <rdma/fi_tagged.h>

#include <cstdio>
#include <cstring>
#include <type_traits>

namespace nd {

namespace {

/* At most this many buffers per endpoint: a sender that finds them all
 * taken waits for the receiver-not-ready retry, as any RC sender does. */
constexpr uint32_t kMaxBounceBuffers = 64;

} // namespace

int Endpoint::setup_framing(uint32_t rx)
{
	const size_t ring = data.tx.queue->ring_size();
	data.tx_headers = std::make_unique<FrameHeaders>();
	FrameHeaders &headers = *data.tx_headers;
	headers.bytes = std::make_unique<uint8_t[]>(ring * kFrameHeaderSize);
	headers.mr.reset(ibv_reg_mr(domain->pd.get(), headers.bytes.get(), ring * kFrameHeaderSize, 0));
	if (!headers.mr) {
		const int err = errno ? errno : ENOMEM;
		warn_registration_failed(FI_LOG_EP_CTRL, "fi_enable: registering the message headers",
					 ring * kFrameHeaderSize, err);
		return fi_error_of_errno(err);
	}
	const uint32_t count = std::min(data.rx.queue->depth(), kMaxBounceBuffers);
	int err = 0;
	std::unique_ptr<Framing> framing = Framing::make(domain->pd.get(), count, data.max_msg, &err);
	if (!framing) {
		char what[96];
		std::snprintf(what, sizeof(what), "fi_enable: registering %u receive buffers of %zu bytes", count,
			      data.max_msg);
		warn_registration_failed(FI_LOG_EP_CTRL, what, count * (kFrameHeaderSize + data.max_msg), err);
		return fi_error_of_errno(err);
	}
	framing->queue = data.rx.queue.get();
	framing->owner = this;
	if (data.credits)
		framing->reposted = [](void *owner) noexcept {
			static_cast<Endpoint *>(owner)->advertise_credits(true);
		};
	framing->unframed = ep_peer_broke_framing;
	framing->posted_limit = rx;
	framing->recv_counter = data.rx.queue->counter(CounterKind::recv);
	/* Every buffer waits for the queue pair's INIT, with the receives
	 * made before the connection (post_pending_receives). */
	for (uint32_t i = 0; i < count; i++) {
		ibv_recv_wr wr;
		ibv_sge sge;
		framing->claim_bounce(*data.rx.queue, framing->slot(i), wr, sge);
		try {
			setup->pending_recvs.push_back(PendingRecv{wr, std::vector<ibv_sge>(1, sge)});
		} catch (...) {
			data.rx.queue->unclaim_recv(1);
			throw;
		}
	}
	data.rx.queue->set_framing(std::move(framing));
	return 0;
}

ssize_t Endpoint::post_framed_rx(const iovec *iov, size_t count, void *context, uint64_t flags, bool tagged,
				 uint64_t tag, uint64_t ignore, const char *call)
{
	if (!data.rx.queue) {
		ND_WARN(FI_LOG_EP_DATA, "%s: call fi_enable first\n", call);
		return -FI_EOPBADSTATE;
	}
	if (data.link.ended())
		return link_error(call);
	if (flags & FI_MULTI_RECV) {
		ND_WARN(FI_LOG_EP_DATA, "%s: FI_MULTI_RECV on an endpoint with FI_TAGGED is not supported\n", call);
		return -FI_EOPNOTSUPP;
	}
	if (flags & (FI_PEEK | FI_CLAIM | FI_DISCARD)) {
		ND_WARN(FI_LOG_EP_DATA, "%s: FI_PEEK, FI_CLAIM and FI_DISCARD are not implemented\n", call);
		return -FI_ENOSYS;
	}
	if (count > data.rx.iov_limit) {
		ND_WARN(FI_LOG_EP_DATA, "%s: %zu iovs; the limit is %u\n", call, count, data.rx.iov_limit);
		return -FI_EINVAL;
	}
	if (count && !iov) {
		ND_WARN(FI_LOG_EP_DATA, "%s: iov is NULL\n", call);
		return -FI_EINVAL;
	}
	const bool report = !bindings.rx_selective || (flags & FI_COMPLETION);
	if (report && !bindings.user_rx_cq) {
		ND_WARN(FI_LOG_EP_DATA, "%s: no CQ is bound with FI_RECV\n", call);
		return -FI_ENOCQ;
	}
	FramedRecv recv;
	recv.context = context;
	recv.count = count;
	recv.capacity = 0;
	for (size_t i = 0; i < count; i++) {
		if (!iov[i].iov_base && iov[i].iov_len)
			ND_INFO(FI_LOG_EP_DATA, "%s: buffer %zu is NULL: it takes no bytes\n", call, i);
		recv.iov[i] = iov[i];
		recv.capacity += iov[i].iov_base ? iov[i].iov_len : 0;
	}
	recv.tagged = tagged;
	recv.tag = tag;
	recv.ignore = ignore;
	recv.report = report;
	return framing_of(*data.rx.queue)->post(recv, *bindings.rx_cq);
}

namespace {


bool wants_completion(const Endpoint *ep, uint64_t flags)
{
	return !ep->bindings.tx_selective || (flags & FI_COMPLETION);
}

ssize_t send_framed(Endpoint *ep, frame::Kind kind, const iovec *iov, void **desc, size_t count, void *context,
		    uint64_t flags, uint64_t tag, bool with_data, uint64_t data, const char *call)
{
	const frame::Header header = frame::make_header(kind, tag, with_data, data);
	TxRequest r;
	r.opcode = IBV_WR_SEND;
	r.iov = iov;
	r.desc = desc;
	r.count = count;
	r.remote_addr = 0;
	r.remote_key = 0;
	r.imm_data = 0;
	r.context = context;
	r.flags = flags;
	r.cq_flags = FI_SEND | (kind == frame::Kind::tagged ? FI_TAGGED : FI_MSG);
	/* fi_inject and its kin report nothing (fi_msg(3)). */
	r.report = !(flags & FI_INJECT) && wants_completion(ep, flags);
	r.call = call;
	r.header = &header;
	return ep->post_tx(r);
}

/* fi_inject: no context, no completion. */
ssize_t inject_framed(Endpoint *ep, frame::Kind kind, const void *buf, size_t len, uint64_t tag, bool with_data,
		      uint64_t data, const char *call)
{
	iovec iov{const_cast<void *>(buf), len};
	return send_framed(ep, kind, &iov, nullptr, 1, nullptr, (ep->data.tx.op_flags & ~FI_COMPLETION) | FI_INJECT,
			   tag, with_data, data, call);
}

/* The calls without a flags argument send with the endpoint's op_flags. */
ssize_t send_with_op_flags(fid_ep *fep, frame::Kind kind, const iovec *iov, void **desc, size_t count,
			   void *context, uint64_t tag, bool with_data, uint64_t data, const char *call)
{
	Endpoint *ep = ep_of(fep);
	return send_framed(ep, kind, iov, desc, count, context, ep->data.tx.op_flags, tag, with_data, data, call);
}

ssize_t recv_with_op_flags(fid_ep *fep, const iovec *iov, size_t count, void *context, bool tagged, uint64_t tag,
			   uint64_t ignore, const char *call)
{
	Endpoint *ep = ep_of(fep);
	return ep->post_framed_rx(iov, count, context, ep->data.rx.op_flags, tagged, tag, ignore, call);
}

/* fi_sendmsg and fi_tsendmsg, fi_recvmsg and fi_trecvmsg: the message's
 * own flags; a tagged message's tag (and what a receive ignores of it). */
template <typename Msg>
ssize_t send_message(fid_ep *fep, frame::Kind kind, const Msg *msg, uint64_t flags, const char *call)
{
	if (!msg) {
		ND_WARN(FI_LOG_EP_DATA, "%s: msg is NULL\n", call);
		return -FI_EINVAL;
	}
	uint64_t tag = 0;
	if constexpr (std::is_same_v<Msg, fi_msg_tagged>)
		tag = msg->tag;
	return send_framed(ep_of(fep), kind, msg->msg_iov, msg->desc, msg->iov_count, msg->context, flags, tag,
			   flags & FI_REMOTE_CQ_DATA, msg->data, call);
}

template <typename Msg>
ssize_t recv_message(fid_ep *fep, const Msg *msg, uint64_t flags, const char *call)
{
	if (!msg) {
		ND_WARN(FI_LOG_EP_DATA, "%s: msg is NULL\n", call);
		return -FI_EINVAL;
	}
	constexpr bool tagged = std::is_same_v<Msg, fi_msg_tagged>;
	uint64_t tag = 0, ignore = 0;
	if constexpr (tagged) {
		tag = msg->tag;
		ignore = msg->ignore;
	}
	return ep_of(fep)->post_framed_rx(msg->msg_iov, msg->iov_count, msg->context, flags, tagged, tag, ignore,
					  call);
}

/* ---- fi_ops_msg ---- */

ssize_t framed_recv(fid_ep *fep, void *buf, size_t len, void *, fi_addr_t, void *context) noexcept
{
	iovec iov{buf, len};
	return recv_with_op_flags(fep, &iov, 1, context, false, 0, 0, "fi_recv");
}

ssize_t framed_recvv(fid_ep *fep, const iovec *iov, void **, size_t count, fi_addr_t, void *context) noexcept
{
	return recv_with_op_flags(fep, iov, count, context, false, 0, 0, "fi_recvv");
}

ssize_t framed_recvmsg(fid_ep *fep, const fi_msg *msg, uint64_t flags) noexcept
{
	return recv_message(fep, msg, flags, "fi_recvmsg");
}

ssize_t framed_send(fid_ep *fep, const void *buf, size_t len, void *desc, fi_addr_t, void *context) noexcept
{
	iovec iov{const_cast<void *>(buf), len};
	return send_with_op_flags(fep, frame::Kind::message, &iov, &desc, 1, context, 0, false, 0, "fi_send");
}

ssize_t framed_sendv(fid_ep *fep, const iovec *iov, void **desc, size_t count, fi_addr_t, void *context) noexcept
{
	return send_with_op_flags(fep, frame::Kind::message, iov, desc, count, context, 0, false, 0, "fi_sendv");
}

ssize_t framed_sendmsg(fid_ep *fep, const fi_msg *msg, uint64_t flags) noexcept
{
	return send_message(fep, frame::Kind::message, msg, flags, "fi_sendmsg");
}

ssize_t framed_inject(fid_ep *fep, const void *buf, size_t len, fi_addr_t) noexcept
{
	return inject_framed(ep_of(fep), frame::Kind::message, buf, len, 0, false, 0, "fi_inject");
}

ssize_t framed_senddata(fid_ep *fep, const void *buf, size_t len, void *desc, uint64_t data, fi_addr_t,
			void *context) noexcept
{
	iovec iov{const_cast<void *>(buf), len};
	return send_with_op_flags(fep, frame::Kind::message, &iov, &desc, 1, context, 0, true, data, "fi_senddata");
}

ssize_t framed_injectdata(fid_ep *fep, const void *buf, size_t len, uint64_t data, fi_addr_t) noexcept
{
	return inject_framed(ep_of(fep), frame::Kind::message, buf, len, 0, true, data, "fi_injectdata");
}

/* ---- fi_ops_tagged ---- */

ssize_t tagged_recv(fid_ep *fep, void *buf, size_t len, void *, fi_addr_t, uint64_t tag, uint64_t ignore,
		    void *context) noexcept
{
	iovec iov{buf, len};
	return recv_with_op_flags(fep, &iov, 1, context, true, tag, ignore, "fi_trecv");
}

ssize_t tagged_recvv(fid_ep *fep, const iovec *iov, void **, size_t count, fi_addr_t, uint64_t tag,
		     uint64_t ignore, void *context) noexcept
{
	return recv_with_op_flags(fep, iov, count, context, true, tag, ignore, "fi_trecvv");
}

ssize_t tagged_recvmsg(fid_ep *fep, const fi_msg_tagged *msg, uint64_t flags) noexcept
{
	return recv_message(fep, msg, flags, "fi_trecvmsg");
}

ssize_t tagged_send(fid_ep *fep, const void *buf, size_t len, void *desc, fi_addr_t, uint64_t tag,
		    void *context) noexcept
{
	iovec iov{const_cast<void *>(buf), len};
	return send_with_op_flags(fep, frame::Kind::tagged, &iov, &desc, 1, context, tag, false, 0, "fi_tsend");
}

ssize_t tagged_sendv(fid_ep *fep, const iovec *iov, void **desc, size_t count, fi_addr_t, uint64_t tag,
		     void *context) noexcept
{
	return send_with_op_flags(fep, frame::Kind::tagged, iov, desc, count, context, tag, false, 0, "fi_tsendv");
}

ssize_t tagged_sendmsg(fid_ep *fep, const fi_msg_tagged *msg, uint64_t flags) noexcept
{
	return send_message(fep, frame::Kind::tagged, msg, flags, "fi_tsendmsg");
}

ssize_t tagged_inject(fid_ep *fep, const void *buf, size_t len, fi_addr_t, uint64_t tag) noexcept
{
	return inject_framed(ep_of(fep), frame::Kind::tagged, buf, len, tag, false, 0, "fi_tinject");
}

ssize_t tagged_senddata(fid_ep *fep, const void *buf, size_t len, void *desc, uint64_t data, fi_addr_t,
			uint64_t tag, void *context) noexcept
{
	iovec iov{const_cast<void *>(buf), len};
	return send_with_op_flags(fep, frame::Kind::tagged, &iov, &desc, 1, context, tag, true, data, "fi_tsenddata");
}

ssize_t tagged_injectdata(fid_ep *fep, const void *buf, size_t len, uint64_t data, fi_addr_t,
			  uint64_t tag) noexcept
{
	return inject_framed(ep_of(fep), frame::Kind::tagged, buf, len, tag, true, data, "fi_tinjectdata");
}

} // namespace

fi_ops_msg ep_framed_msg_ops = {
	.size = sizeof(fi_ops_msg),
	.recv = framed_recv,
	.recvv = framed_recvv,
	.recvmsg = framed_recvmsg,
	.send = framed_send,
	.sendv = framed_sendv,
	.sendmsg = framed_sendmsg,
	.inject = framed_inject,
	.senddata = framed_senddata,
	.injectdata = framed_injectdata,
};

fi_ops_tagged ep_tagged_ops = {
	.size = sizeof(fi_ops_tagged),
	.recv = tagged_recv,
	.recvv = tagged_recvv,
	.recvmsg = tagged_recvmsg,
	.send = tagged_send,
	.sendv = tagged_sendv,
	.sendmsg = tagged_sendmsg,
	.inject = tagged_inject,
	.senddata = tagged_senddata,
	.injectdata = tagged_injectdata,
};

} // namespace nd
