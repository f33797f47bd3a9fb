/*
 * nd_credits.h: receive credits, which keep FI_RM_ENABLED true on iWARP.
 *
 * InfiniBand and RoCE make a message that finds no receive posted wait at
 * the sender (receiver-not-ready retries); iWARP has no such retry, and the
 * connection ends instead. So on iWARP an endpoint counts: the sender may
 * have as many messages in flight as the peer has posted receives, and the
 * receiver tells the sender how many it has posted, in all, by an RDMA
 * write of that count into a word the sender registered for it. A write
 * consumes no receive and raises no completion at the target, so the count
 * can be sent whenever it rises, however full the peer's queues are. The
 * word's address and key, and the count of receives already posted, travel
 * after the application's private data on connect and accept
 * (cm::CreditOffer). A message that has no credit fails with -FI_EAGAIN,
 * as one that finds the send queue full does; the peer's count arrives
 * without any call here.
 *
 * The receiver's count is its receive ring's posted count (WorkQueue::head):
 * every record of a receive ring is one posted work request, the framed
 * endpoint's own buffers included. Not kept where that does not hold: a
 * shared receive context, FI_MULTI_RECV buffers (fi_getinfo reports
 * FI_RM_DISABLED on iWARP for those).
 *
 * The count is written whenever it rises (a receive call with FI_MORE
 * leaves it to the next call): the sender may be waiting on it, and this
 * side may never call again, so a rise kept back for a bigger batch could
 * be a receive the sender never learns of. A burst of receives costs one
 * write each only while the ring has room; past that the rise is kept
 * (`pending`) and the receive call itself reads the send CQ until earlier
 * requests retire, as a send does when the ring is full. A rise seen while
 * another thread holds the send lock is written by that thread as it
 * unlocks (Endpoint::flush_pending_credits). Each write takes
 * a send-ring slot; kWriteSlots more than the application's tx_size keep
 * room for them when the application's requests fill the ring.
 *
 * Remote CQ data rides on the same machinery, since iWARP carries no
 * immediate data. The receiver keeps one 16-byte slot per slot of its
 * receive ring (RemoteDataSlots), registered after its credit word, so
 * that receive number k (its ring's posting order) owns slot k mod N. A
 * sender whose message k carries data first writes the data into that
 * slot, on the same connection: iWARP places an RDMA write before a later
 * send completes at the target (RDMAP's ordering), so when receive k
 * completes its slot holds the data, and the completion is reported as
 * one that carried immediate data (WorkQueue::take_remote_data, before the
 * ring slot is retired). fi_writedata
 * is the write, the slot write, then a zero-byte send, whose receive the
 * target reports as a remote write with data, as RDMA_WRITE_WITH_IMM's
 * is. No slot is written twice before it is read: the sender writes slot
 * k only for a message that has a credit, and receive k is posted only
 * once receive k - N has retired (the receive ring holds fewer than N),
 * whose slot was read and cleared first. Each slot names the message it
 * belongs to, so a slot not written for this receive is never taken.
 *
 * Who sends first. MPA (RFC 5044, 7.1.2) lets the responder send only
 * after it has received the initiator's first FPDU: the initiator's
 * adapter turns to RDMA mode only when it has read the MPA reply, and
 * soft-iWARP, reading the reply's private data with room for four bytes
 * more, fails the connection (a CONNECT_ERROR at the initiator, EPROTO in
 * siw_recv_mpa_rr) when a message from the responder is already behind
 * it, while the responder has its ESTABLISHED and carries on: messages it
 * sends then are lost. siw offers no RTR frame (MPA's peer-to-peer mode)
 * to do it for us. So the accepter waits, and the connector speaks first:
 * once its connection is complete, its first request writes 1 into the
 * accepter's ready word (CreditWords::ready, registered with the credit
 * word); until the accepter sees it there, its sends and its credit writes
 * wait (SlowTx::peer_first: -FI_EAGAIN, or held). Both offers say they
 * take part (CreditOffer::ready_handshake), so neither waits for a peer
 * that does not write. soft-iWARP's accept sends the reply before it hands
 * the socket to the queue pair, and what arrives in between stays unread
 * until more arrives: so the connector repeats the write at its CQ's
 * looks, kReadyRepeats times (a repeat also wakes whatever of its own was
 * left there).
 */
#ifndef ND_CREDITS_H
#define ND_CREDITS_H

#include "nd_cm_data.h"
#include "nd_verbs.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace nd {

/* Registered: the peer writes `granted`; `outgoing` is the source of this
 * side's writes to the peer. The remote CQ data slots follow in the same
 * registration (kDataSlotsOffset). */
struct CreditWords {
	alignas(64) volatile uint64_t granted;
	alignas(64) volatile uint64_t outgoing;
	volatile uint64_t ready_source;	/* 1: the source of the ready write */
	/* Accepter: written 1 by the connector's first request ("Who sends
	 * first", above). */
	alignas(64) volatile uint64_t ready;
};
/* Where the peer's ready word is, from its credit word. */
inline constexpr uint64_t kReadyOffset = offsetof(CreditWords, ready) - offsetof(CreditWords, granted);
/* Where the peer's data slots start, from its credit word, and each
 * slot's size: its DataSlot word, then the length of an fi_writedata's
 * write (which the target reports, as RDMA_WRITE_WITH_IMM's byte_len). */
inline constexpr uint64_t kDataSlotsOffset = sizeof(CreditWords);
inline constexpr size_t kDataSlotWords = 2;
inline constexpr size_t kDataSlotBytes = kDataSlotWords * sizeof(uint64_t);

/*
 * One receive's remote CQ data, as the sender writes it: the low 24 bits
 * of the receive's number (OpRecord::seq) and what the message is, in the
 * high word, the data in the low. 0 is an empty slot. Pure, tested on the
 * host.
 */
enum class DataSlotKind : uint8_t { none = 0, message = 1, write = 2 };
struct DataSlot {
	DataSlotKind kind = DataSlotKind::none;
	uint32_t seq = 0;	/* low 24 bits */
	uint32_t data = 0;

	static uint64_t encode(DataSlotKind kind, uint64_t seq, uint32_t data) noexcept
	{
		const uint64_t high = (static_cast<uint64_t>(seq) & 0xffffff) << 8 | static_cast<uint8_t>(kind);
		return high << 32 | data;
	}
	static DataSlot decode(uint64_t word) noexcept
	{
		const uint32_t high = static_cast<uint32_t>(word >> 32);
		DataSlot slot;
		slot.kind = static_cast<DataSlotKind>(high & 0xff);
		slot.seq = high >> 8;
		slot.data = static_cast<uint32_t>(word);
		return slot;
	}
	/* Written for receive `seq` (low 24 bits), as a kind nd writes. */
	bool belongs_to(uint32_t seq_low) const noexcept
	{
		return (kind == DataSlotKind::message || kind == DataSlotKind::write) && seq == (seq_low & 0xffffff);
	}
};

/* How long a receive call reads the send CQ for room to write its count
 * before leaving it to the next post or completion: writes and messages
 * already posted complete in transport time, so this is met only when the
 * link is dying. */
inline constexpr std::chrono::milliseconds kCreditWriteWait{1000};
/* How long an accepter's posts, together, wait for the connector's ready
 * write before -FI_EAGAIN: a write already posted lands in transport
 * time; the rest is the connector's application reading its EQ. */
inline constexpr std::chrono::milliseconds kReadyWait{100};
/* How many times a connector repeats its ready write, once a CQ look
 * (about a second apart), in case the first is left unread (ReceiveCredits::
 * ready_written). */
inline constexpr uint8_t kReadyRepeats = 5;

class ReceiveCredits {
public:
	/* Send-ring slots kept for the credit writes. */
	static constexpr uint32_t kWriteSlots = 4;

	/* Registers the words, `data_slots` receive slots (a power of two,
	 * or 0) and `send_slots` slot-write sources; nullptr (logged) when it
	 * cannot (nd_ep_credits.cpp). */
	static std::unique_ptr<ReceiveCredits> open(ibv_pd *pd, uint32_t data_slots, uint32_t send_slots) noexcept;
	/* Unregistered, over words the caller keeps: the host's unit tests. */
	ReceiveCredits(CreditWords *words, uint32_t data_slot_count) noexcept
		: words_(words), data_slot_count_(data_slot_count)
	{
	}

	/* This side's offer (the count posted now, where the peer writes and
	 * how many data slots follow), which counts as advertised. */
	void offer(uint64_t posted, cm::CreditOffer *out) noexcept
	{
		advertised_.store(posted, std::memory_order_relaxed);
		out->addr = reinterpret_cast<uintptr_t>(&words_->granted);
		out->rkey = mr_ ? mr_->rkey : 0; /* unregistered: the host's unit tests */
		out->posted = static_cast<uint32_t>(posted);
		out->data_slots_log2 =
			data_slot_count_ ? static_cast<uint8_t>(__builtin_ctz(data_slot_count_)) : 0;
	}

	/* The first-write handshake ("Who sends first"). Connector: the
	 * accepter waits for the write (its offer said so), the source and
	 * target of which these give. */
	void peer_waits_for_ready() noexcept { peer_waits_ = true; }
	bool peer_waits() const noexcept { return peer_waits_; }
	/* The write is repeated kReadyRepeats times, once a look: soft-iWARP
	 * switches the accepter's socket to its queue pair only after sending
	 * the reply, and bytes that arrive between the two wait unread in the
	 * socket until more arrive (siw_accept). A repeat is those bytes. */
	void ready_written() noexcept { ready_repeats_ = kReadyRepeats; }
	bool take_ready_repeat() noexcept
	{
		if (ready_repeats_ == 0)
			return false;
		ready_repeats_--;
		return true;
	}
	uintptr_t ready_source() noexcept
	{
		words_->ready_source = 1;
		return reinterpret_cast<uintptr_t>(&words_->ready_source);
	}
	uint64_t peer_ready_addr() const noexcept { return peer_addr_ + kReadyOffset; }
	/* Accepter: the connector's ready write has landed. */
	bool peer_ready() const noexcept { return words_->ready != 0; }
	/* Accepter: until when posts wait for it, kReadyWait from the first
	 * that asked (`now`). */
	std::chrono::steady_clock::time_point ready_wait_until(std::chrono::steady_clock::time_point now) noexcept
	{
		if (ready_wait_until_ == std::chrono::steady_clock::time_point{})
			ready_wait_until_ = now + kReadyWait;
		return ready_wait_until_;
	}
	/* The peer's offer. Written by the thread that makes the connection,
	 * before the link goes up; read after the link is seen up (acquire),
	 * or under the send lock. */
	void take_offer(const cm::CreditOffer &peer) noexcept
	{
		peer_addr_ = peer.addr;
		peer_rkey_ = peer.rkey;
		base_ = peer.posted;
		peer_slot_mask_ =
			peer.data_slots_log2 && peer.data_slots_log2 < 32 ? (1u << peer.data_slots_log2) - 1 : 0;
		peer_known_.store(true, std::memory_order_release);
	}
	/* The peer offered none (not an nd peer): sends are not held (a base
	 * no count reaches, so that can_send tests one bound), and it takes no
	 * remote CQ data (no slots). */
	void take_no_offer() noexcept
	{
		base_ = UINT64_MAX;
		peer_slot_mask_ = 0;
	}
	bool peer_known() const noexcept { return peer_known_.load(std::memory_order_acquire); }

	/* Sender: what the peer granted, and whether a message may go. */
	uint64_t granted() const noexcept
	{
		const uint64_t written = words_->granted; /* by the peer's adapter */
		return std::max(written, base_);
	}
	bool can_send() const noexcept { return sent_ < granted(); }
	uint64_t sent() const noexcept { return sent_; }
	/* Messages that took a peer's receive, posted (under the send lock). */
	void count_sent(uint64_t messages) noexcept { sent_ += messages; }
	/* The peer takes remote CQ data (it offered slots, and counts). */
	bool carries_data() const noexcept { return peer_slot_mask_ != 0; }
	/* The address of the peer's slot for the next message sent. */
	uint64_t next_slot_address() const noexcept
	{
		return peer_addr_ + kDataSlotsOffset + (sent_ & peer_slot_mask_) * kDataSlotBytes;
	}
	/* The source of the slot write of send-ring slot `slot`, stable until
	 * that request retires (kDataSlotWords). */
	uint64_t *slot_source(uint32_t slot) const noexcept
	{
		return slot_sources_ + static_cast<size_t>(slot) * kDataSlotWords;
	}
	/* Where this side's writes go: the peer's credit word, or (at
	 * kDataSlotsOffset past it) its data slots. */
	uint64_t peer_addr() const noexcept { return peer_addr_; }
	uint32_t peer_rkey() const noexcept { return peer_rkey_; }
	/* The registration's, for the sources of this side's writes. */
	uint32_t lkey() const noexcept { return mr_->lkey; }

	/* Receiver: remote CQ data, one slot (kDataSlotWords) per receive-
	 * ring slot (none where the endpoint has no receive ring of its own
	 * to index them: framed). Written by the peer's adapter; read and
	 * cleared by the receive queue (WorkQueue::take_remote_data) with
	 * atomic loads and stores. */
	uint64_t *data_slots() const noexcept { return data_slots_; }
	/* Whether the receiver has receives the peer was not told of. */
	bool worth_writing(uint64_t posted) const noexcept
	{
		return posted > advertised_.load(std::memory_order_relaxed);
	}
	/* The count `posted` goes into the source word of the write that
	 * tells the peer (under the send lock); its address. */
	uintptr_t stage_count(uint64_t posted) noexcept
	{
		words_->outgoing = posted;
		return reinterpret_cast<uintptr_t>(&words_->outgoing);
	}
	/* The write of `posted` was posted. */
	void advertised(uint64_t posted) noexcept { advertised_.store(posted, std::memory_order_relaxed); }
	/* A write that could not go out when the count rose (the send ring's
	 * lock was held, or its internal slots busy): the next post on a
	 * general path sends it, or the next send-queue completion (the room
	 * hook); the fast paths leave it to the second. */
	bool write_pending() const noexcept { return pending_.load(std::memory_order_acquire); }
	void hold_write() noexcept { pending_.store(true, std::memory_order_release); }
	void write_done() noexcept { pending_.store(false, std::memory_order_relaxed); }

private:
	ReceiveCredits() = default; /* open's */

	/* The credit words, this side's data slots after them, then the
	 * sources of its slot writes: one block, registered once. */
	std::unique_ptr<uint8_t[]> block_;
	CreditWords *words_ = nullptr;
	uint64_t *data_slots_ = nullptr;
	uint32_t data_slot_count_ = 0;		/* a power of two, or 0 */
	uint64_t *slot_sources_ = nullptr;
	VerbsHandle<ibv_mr, ibv_dereg_mr> mr_;
	/* The peer's word, from its offer. */
	uint64_t peer_addr_ = 0;
	uint32_t peer_rkey_ = 0;
	/* The peer's data slots: their count - 1, or 0 where it offered none. */
	uint32_t peer_slot_mask_ = 0;
	/* What the peer's offer said it had posted (its word may not have
	 * been written yet). */
	uint64_t base_ = 0;
	std::atomic<bool> peer_known_{false};
	/* Sender: messages that take a peer's receive, posted. */
	uint64_t sent_ = 0;
	/* Receiver: the count last written to the peer (or offered), under
	 * the send lock; a poster of receives reads it without (a hint that
	 * write_credits decides again under the lock). */
	std::atomic<uint64_t> advertised_{0};
	std::atomic<bool> pending_{false};
	/* Connector: the accepter waits for the ready write; repeats left. */
	bool peer_waits_ = false;
	uint8_t ready_repeats_ = 0;
	/* Accepter: see ready_wait_until. */
	std::chrono::steady_clock::time_point ready_wait_until_{};
};

} // namespace nd

#endif /* ND_CREDITS_H */
