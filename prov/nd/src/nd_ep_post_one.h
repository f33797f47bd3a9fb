/*
 * nd_ep_post_one.h: fi_send, fi_write, fi_read and fi_recv of one buffer
 * with its descriptor, the calls an MPI library makes for every message it
 * does not inject.
 *
 * A path of their own, as fi_inject has (nd_ep_inject.h): post_tx and
 * post_rx take any number of buffers and every option, and decided per
 * call what fi_enable had fixed, at twice the verbs provider's
 * instructions (docs/data-path.md, CPU cost per call; the budget the check
 * holds them to is fabtests/test_configs/nd/cpu-budget). Here each call tests one byte for what fi_enable
 * fixed (the link's slow-transmit bits, slow_rx: a lock, a shared context, receive credits,
 * FI_MORE held back, iWARP's receive lists, multi-receive buffers), a
 * pointer for what is bound rarely (counters, a fence after reads:
 * bindings.extras), and what
 * the call itself passes; anything else (a refusal, a full ring, a read
 * past the negotiated limit) goes to the call's general path (post_tx
 * through send_common or rma, post_rx), which says why.
 */
#ifndef ND_EP_POST_ONE_H
#define ND_EP_POST_ONE_H

#include "nd_ep.h"
#include "nd_mr.h"

namespace nd {

/* `general` is the call's own general path (send_common, rma), taken for
 * anything this one does not. K (Keeps): receive_credits: the endpoint
 * keeps receive credits (iWARP), its one slow-transmit bit
 * SlowTx::credits: a send needs one of the peer's receives, counted once
 * posted. A count of this side's that found the ring full
 * (ReceiveCredits::write_pending) is not looked at here, as post_tx does:
 * only an endpoint without a send lock comes here, where the ring being
 * full is the one reason for it, and the retirement of the requests that
 * filled it sends it (QueueHooks::room). flow_credits: ofi_rxm's flow
 * control (SlowTx::flow): a send takes one of the credits the peer told,
 * given back if it is not posted; the last is for rxm's own credit
 * messages (sent with flags, so never here). */
template <ibv_wr_opcode Op, Keeps K, typename General>
[[gnu::always_inline]] inline ssize_t Endpoint::post_one(const void *buf, size_t len, void *desc,
							 uint64_t remote_addr, uint64_t remote_key, void *context,
							 uint64_t flags, bool report, const char *call, General &&general)
{
	static_assert(Op == IBV_WR_SEND || Op == IBV_WR_RDMA_WRITE || Op == IBV_WR_RDMA_READ);
	constexpr bool is_read = Op == IBV_WR_RDMA_READ;
	constexpr uint32_t cq_flags = Op == IBV_WR_SEND ? FI_SEND | FI_MSG : is_read ? FI_RMA | FI_READ : FI_RMA | FI_WRITE;
	/* The link first: before fi_enable there is no send queue. */
	const bool open = data.link.open_with(slow_tx_kept(K));
	if (__builtin_expect(!open ||
			     bindings.extras || (flags & FI_INJECT) || !buf || len > data.max_msg ||
			     remote_key > UINT32_MAX || (report && !bindings.user_tx_cq),
			     0))
		return general();
	const bool inline_data = !is_read && len <= data.max_inline;
	SendQueue &queue = *data.tx.queue;
	const uint64_t head = queue.posted();
	if (__builtin_expect((!inline_data && !desc) || queue.full_at(head) ||
			     (is_read && queue.reads_in_flight() >= conn.effective.outbound), 0))
		return general();
	if constexpr (K == Keeps::receive_credits && Op == IBV_WR_SEND)
		if (__builtin_expect(!data.credits->can_send(), 0))
			return general(); /* -FI_EAGAIN, and why */
	if constexpr (K == Keeps::flow_credits && Op == IBV_WR_SEND)
		if (__builtin_expect(!data.flow.take_kept(), 0))
			return general(); /* the same */
	const SendClaim request{context, cq_flags, static_cast<uint32_t>(len), report, report};
	/* A shared budget's count is post_tx's (SlowTx::shared). */
	const Claimed claimed =
		is_read ? queue.claim_at<SendKind::read, false>(head, request, data.read_signal_every)
			: queue.claim_at<SendKind::send_or_write, false>(head, request, 1, 0); /* an endpoint that fences has extras: never here */
	ibv_sge sge;
	sge.addr = reinterpret_cast<uintptr_t>(buf);
	sge.length = static_cast<uint32_t>(len);
	sge.lkey = inline_data ? 0 : lkey_of(desc);
	ibv_send_wr wr;
	wr.wr_id = reinterpret_cast<uintptr_t>(claimed.record);
	wr.next = nullptr;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = Op;
	wr.send_flags = claimed.send_flags | (inline_data && len ? IBV_SEND_INLINE : 0);
	if constexpr (Op != IBV_WR_SEND) {
		wr.wr.rdma.remote_addr = remote_addr;
		wr.wr.rdma.rkey = static_cast<uint32_t>(remote_key);
	}
	if constexpr (K == Keeps::receive_credits && Op == IBV_WR_SEND) {
		const ssize_t ret = submit<true>(wr, call);
		if (ret == 0)
			data.credits->count_sent(1);
		return ret;
	}
	if constexpr (K == Keeps::flow_credits && Op == IBV_WR_SEND) {
		const ssize_t ret = submit<true>(wr, call);
		if (__builtin_expect(ret != 0, 0))
			data.flow.give_back();
		return ret;
	}
	return submit<true>(wr, call);
}

/* fi_recv: its flags are rx.op_flags, whose bearing fi_enable fixed
 * (SlowRx::op_flags, recv_reports). receive_credits: the endpoint keeps
 * receive credits (iWARP: SlowRx::iwarp its one bit), and tells the peer
 * of the receive, as post_rx does; siw's receive of one buffer with bytes
 * needs nothing else. flow_credits: ofi_rxm's flow control (SlowRx::flow
 * its one bit): the receives posted are told to the peer through rxm's
 * handler once the threshold of them is owed, as post_rx does. */
template <Keeps K>
[[gnu::always_inline]] inline ssize_t Endpoint::post_recv_one(void *buf, size_t len, void *desc, void *context)
{
	constexpr uint8_t fast_rx = slow_rx_kept(K);
	if (__builtin_expect(data.slow_rx.load(std::memory_order_relaxed) != fast_rx || !buf || !desc || len > data.max_msg ||
			     data.link.ended(), 0))
		return post_rx_one_general(buf, len, desc, context, data.rx.op_flags);
	const bool report = data.recv_reports;
	ReceiveQueue &queue = *data.rx.queue;
	const uint64_t h = queue.posted();
	if (__builtin_expect(queue.full_at(h), 0))
		return post_rx_one_general(buf, len, desc, context, data.rx.op_flags);
	/* len <= max_msg <= UINT32_MAX (setup_data_path) */
	OpRecord &record = queue.claim_recv_at(h, context, FI_RECV | FI_MSG, static_cast<uint32_t>(len), report);
	ibv_sge sge;
	sge.addr = reinterpret_cast<uintptr_t>(buf);
	sge.length = static_cast<uint32_t>(len);
	sge.lkey = lkey_of(desc);
	ibv_recv_wr wr;
	wr.wr_id = reinterpret_cast<uintptr_t>(&record);
	wr.next = nullptr;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	ibv_recv_wr *bad; /* read by nobody: one receive */
	if (const int rc = post_recv(data.qp.get(), &wr, &bad); __builtin_expect(rc != 0, 0))
		return post_recv_failed(rc);
	/* FI_MORE: the next receive call tells the peer of both. */
	if constexpr (K == Keeps::receive_credits)
		if (!(data.rx.op_flags & FI_MORE))
			tell_peer_posted(h + 1);
	if constexpr (K == Keeps::flow_credits)
		if (const uint64_t owed = data.flow.due(h + 1); __builtin_expect(owed != 0, 0))
			send_flow_credits(owed);
	return 0;
}

/* The write of the receiver's count `posted` into the peer's word
 * (nd_credits.h), in one of the send ring's internal slots, which the
 * caller saw free. Unsignaled like the application's requests, and
 * signaled as often; its completion reports nothing (no context, no
 * flags, no counter). A post that fails leaves the count for the next
 * post or completion. `Single`: the send side is on its fast path, so
 * nothing is held back to go with it (submit). */
template <bool Single>
[[gnu::always_inline]] inline void Endpoint::post_credit_write(uint64_t posted) noexcept
{
	ReceiveCredits &c = *data.credits;
	const Claimed claimed = data.tx.queue->claim<SendKind::internal>(
		SendClaim{nullptr, 0, static_cast<uint32_t>(sizeof(uint64_t)), false, false});
	ibv_sge sge;
	sge.addr = c.stage_count(posted);
	sge.length = sizeof(uint64_t);
	sge.lkey = c.lkey();
	ibv_send_wr wr;
	wr.wr_id = reinterpret_cast<uintptr_t>(claimed.record);
	wr.next = nullptr;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = claimed.send_flags;
	wr.wr.rdma.remote_addr = c.peer_addr();
	wr.wr.rdma.rkey = c.peer_rkey();
	if (__builtin_expect(submit<Single>(wr, "receive credits", true) != 0, 0)) {
		c.hold_write();
		return;
	}
	c.advertised(posted);
}

/* After fi_recv's fast path posted receive `posted - 1`: the peer learns
 * of it before the call returns (nd_credits.h says why it cannot wait).
 * The write goes from here where the send side is on its fast path too
 * (up, with credits its one slow-transmit bit: no send lock, nothing held
 * back with FI_MORE, no fence), the peer made an offer, no earlier count
 * waits and the ring has an internal slot free; anything else is
 * advertise_credits', which decides again. */
[[gnu::always_inline]] inline void Endpoint::tell_peer_posted(uint64_t posted) noexcept
{
	ReceiveCredits &c = *data.credits;
	/* The link before the queue: there is none before fi_enable. The
	 * peer's offer is read after peer_known (acquire). */
	if (__builtin_expect(!data.link.open_with(SlowTx::credits) || !c.peer_known() || c.write_pending() ||
			     data.tx.queue->internal_full(),
			     0))
		return advertise_credits(false);
	post_credit_write<true>(posted);
}

} // namespace nd

#endif /* ND_EP_POST_ONE_H */
