/*
 * nd_ep_inject.h: fi_inject, fi_injectdata, fi_inject_write and
 * fi_inject_writedata: one buffer, copied inline, never a completion.
 *
 * A path of its own, because it is the hottest call of small-message
 * traffic and needs none of post_tx's iov and descriptor handling. It is a
 * template on the opcode, defined here so that each entry point compiles
 * into one function with the opcode's choices made at compile time; every
 * refusal and the full queue take one predicted-not-taken branch each to
 * out-of-line code (inject_refused, free_send_slots, submit_failed).
 */
#ifndef ND_EP_INJECT_H
#define ND_EP_INJECT_H

#include "nd_credits.h"
#include "nd_ep.h"

#include <bit>
#include <cstddef>
#include <cstring>
#include <mutex>

namespace nd {

constexpr const char *inject_call_name(ibv_wr_opcode op) noexcept
{
	switch (op) {
	case IBV_WR_SEND: return "fi_inject";
	case IBV_WR_SEND_WITH_IMM: return "fi_injectdata";
	case IBV_WR_RDMA_WRITE: return "fi_inject_write";
	default: return "fi_inject_writedata";
	}
}

/* Always inlined: each entry point is then this function, with nothing
 * to pass on (the compiler left the RDMA ones as calls otherwise). The
 * common case (no lock, room in the ring) makes no call before
 * ibv_post_send, so nothing has to live across one and the entry point
 * saves almost no registers; a lock or a full ring go through
 * post_inline_slow. */
template <ibv_wr_opcode Op, Keeps K>
[[gnu::always_inline]] inline ssize_t Endpoint::post_inline(const void *buf, size_t len, uint32_t imm_data, uint64_t remote_addr,
			      uint64_t remote_key)
{
	static_assert(Op == IBV_WR_SEND || Op == IBV_WR_SEND_WITH_IMM || Op == IBV_WR_RDMA_WRITE ||
		      Op == IBV_WR_RDMA_WRITE_WITH_IMM);
	/* One compare for the link and everything the fast path defers (a
	 * lock, credits, a shared context, requests held back, a counter, a
	 * fence), but what this path keeps (K: receive or flow credits,
	 * as nd_ep_post_one.h's do). */
	const bool open = data.link.open_with(slow_tx_kept(K));
	/* len - 1 wraps for a zero-byte inject, which takes the slow path:
	 * the fast path's request always has one inline entry. */
	if (__builtin_expect(!open || len - 1 >= data.max_inline || !buf || remote_key > UINT32_MAX, 0)) {
		/* Only a null buffer with bytes is refused for being null: a
		 * zero-byte inject may pass none. (Testing `!buf && len` up
		 * front kept both results live through the whole call.) */
		if (data.link.state(std::memory_order_relaxed) != LinkState::up || len > data.max_inline ||
		    (!buf && len) || remote_key > UINT32_MAX)
			return inject_refused(buf, len, remote_key, inject_call_name(Op));
		if (!open || len == 0) {
			if constexpr (Op == IBV_WR_SEND_WITH_IMM || Op == IBV_WR_RDMA_WRITE_WITH_IMM)
				if (domain->iwarp)
					return inject_with_data_slot(Op, buf, len, imm_data, remote_addr, remote_key);
			return post_inline_slow<Op>(buf, len, imm_data, remote_addr, remote_key);
		}
	}
	if constexpr (Op == IBV_WR_SEND_WITH_IMM || Op == IBV_WR_RDMA_WRITE_WITH_IMM)
		if (__builtin_expect(domain->iwarp, 0))
			return inject_with_data_slot(Op, buf, len, imm_data, remote_addr, remote_key);
	SendQueue &queue = *data.tx.queue;
	const uint64_t head = queue.posted();
	if (__builtin_expect(queue.full_at(head), 0))
		return post_inline_slow<Op>(buf, len, imm_data, remote_addr, remote_key);
	/* As post_one's (nd_ep_post_one.h). */
	if constexpr (K == Keeps::receive_credits && (Op == IBV_WR_SEND || Op == IBV_WR_SEND_WITH_IMM)) {
		if (__builtin_expect(!data.credits->can_send(), 0))
			return post_inline_slow<Op>(buf, len, imm_data, remote_addr, remote_key); /* says why */
		const ssize_t ret =
			post_inline_request<Op, false>(queue, head, buf, len, imm_data, remote_addr, remote_key);
		if (ret == 0)
			data.credits->count_sent(1);
		return ret;
	}
	if constexpr (K == Keeps::flow_credits && takes_peer_receive(Op)) {
		if (__builtin_expect(!data.flow.take_kept(), 0))
			return post_inline_slow<Op>(buf, len, imm_data, remote_addr, remote_key); /* says why */
		const ssize_t ret =
			post_inline_request<Op, false>(queue, head, buf, len, imm_data, remote_addr, remote_key);
		if (__builtin_expect(ret != 0, 0))
			data.flow.give_back();
		return ret;
	}
	return post_inline_request<Op, false>(queue, head, buf, len, imm_data, remote_addr, remote_key);
}

/* Under the lock when the threading model asks for one, and after making
 * room in a full ring. */
template <ibv_wr_opcode Op>
[[gnu::noinline, gnu::noipa]] ssize_t Endpoint::post_inline_slow(const void *buf, size_t len, uint32_t imm_data,
						     uint64_t remote_addr, uint64_t remote_key)
{
	constexpr bool takes_receive = Op == IBV_WR_SEND || Op == IBV_WR_SEND_WITH_IMM;
	CreditsAfterUnlock credits_after_unlock{this};
	std::lock_guard<OptionalLock> guard(data.tx.lock);
	/* Again under the lock (see post_tx). */
	if (data.link.state(std::memory_order_relaxed) != LinkState::up)
		return link_error(inject_call_name(Op));
	if (!peer_spoke(true))
		return peer_not_ready(inject_call_name(Op));
	if (takes_receive && data.credits && !data.credits->can_send())
		return no_credit(inject_call_name(Op));
	if (data.tx.queue->no_room())
		if (ssize_t ret = free_send_slots(inject_call_name(Op)))
			return ret;
	/* ofi_rxm's flow control (nd_flow_ctrl.h), as post_tx keeps it. */
	const bool flow_taken = takes_peer_receive(Op) && data.flow.enabled();
	if (flow_taken && !data.flow.take(false))
		return no_flow_credit(inject_call_name(Op));
	data.tx.queue->count_budget(); /* given back if posting fails (unclaim) */
	const ssize_t ret = post_inline_request<Op, true>(*data.tx.queue, data.tx.queue->posted(), buf,
							   len, imm_data, remote_addr, remote_key);
	sync_fence();
	if (data.credits)
		credits_after_post(ret == 0 && takes_receive);
	if (flow_taken && ret != 0)
		data.flow.give_back();
	return ret;
}

/* The request itself: its ring record, its work request, and the post (or
 * a place behind requests held back by FI_MORE). The ring has room; queue
 * is *tx.queue, loaded once by the caller (the stores below may alias it), and
 * head its head as the caller loaded it. MaybeHeld: the slow path's, which
 * also takes the zero-byte injects (no entry, nothing inline); the fast
 * path's requests carry one inline entry, whatever their length, which
 * spares it computing both from the length. */
template <ibv_wr_opcode Op, bool MaybeHeld>
[[gnu::always_inline]] inline ssize_t Endpoint::post_inline_request(SendQueue &queue, uint64_t head,
								    const void *buf, size_t len,
								    uint32_t imm_data, uint64_t remote_addr,
								    uint64_t remote_key)
{
	constexpr bool is_send = Op == IBV_WR_SEND || Op == IBV_WR_SEND_WITH_IMM;
	constexpr const char *call = inject_call_name(Op);
	/* A counter of this kind counts completions: each request is signaled.
	 * The slow path's alone (SlowTx::counted). */
	const bool counted = MaybeHeld && bindings.counter(is_send ? CounterKind::send : CounterKind::write);
	const SendClaim request{nullptr, is_send ? FI_SEND | FI_MSG : FI_RMA | FI_WRITE, static_cast<uint32_t>(len),
				false, counted};
	/* The work request first, from the arguments, so that none of them
	 * has to live across the claim (the RMA ones cost two saved
	 * registers when they did). */
	ibv_sge sge;
	sge.addr = reinterpret_cast<uintptr_t>(buf);
	/* The length and a zero lkey (inline data needs none) in one store:
	 * len fits 32 bits (at most max_inline), so its upper half is the
	 * zero lkey that follows length in ibv_sge. */
	static_assert(offsetof(ibv_sge, lkey) == offsetof(ibv_sge, length) + sizeof(uint32_t));
	if constexpr (std::endian::native == std::endian::little) {
		const uint64_t length_and_lkey = len;
		std::memcpy(&sge.length, &length_and_lkey, sizeof(length_and_lkey));
	} else {
		sge.length = static_cast<uint32_t>(len);
		sge.lkey = 0;
	}
	ibv_send_wr wr;
	wr.next = nullptr;
	wr.sg_list = &sge;
	const bool has_bytes = !MaybeHeld || len != 0;
	wr.num_sge = has_bytes ? 1 : 0;
	wr.opcode = Op;
	if constexpr (Op == IBV_WR_SEND_WITH_IMM || Op == IBV_WR_RDMA_WRITE_WITH_IMM)
		wr.imm_data = imm_data;
	if constexpr (!is_send) {
		wr.wr.rdma.remote_addr = remote_addr;
		wr.wr.rdma.rkey = static_cast<uint32_t>(remote_key);
	}
	/* A shared budget's count is the slow path's (post_inline_slow). */
	/* The fast path's request needs no fence (SlowTx::fence). */
	const Claimed claimed =
		queue.claim_at<SendKind::send_or_write, false>(head, request, 1, MaybeHeld ? data.read_fence : 0);
	wr.wr_id = reinterpret_cast<uintptr_t>(claimed.record);
	wr.send_flags = claimed.send_flags | (has_bytes ? IBV_SEND_INLINE : 0);
	/* Requests FI_MORE held back have earlier slots: they go first. The
	 * fast path never finds any (a held batch makes it slow). */
	return submit<!MaybeHeld>(wr, call);
}

} // namespace nd

#endif /* ND_EP_INJECT_H */
