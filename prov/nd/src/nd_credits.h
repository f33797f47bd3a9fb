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
 */
#ifndef ND_CREDITS_H
#define ND_CREDITS_H

#include "nd_cm_data.h"
#include "nd_verbs.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

namespace nd {

/* Registered: the peer writes `granted`; `outgoing` is the source of this
 * side's writes to the peer. */
struct CreditWords {
	alignas(64) volatile uint64_t granted;
	alignas(64) volatile uint64_t outgoing;
};

/* How long a receive call reads the send CQ for room to write its count
 * before leaving it to the next post or completion: writes and messages
 * already posted complete in transport time, so this is met only when the
 * link is dying. */
inline constexpr std::chrono::milliseconds kCreditWriteWait{1000};

struct ReceiveCredits {
	/* Send-ring slots kept for the credit writes. */
	static constexpr uint32_t kWriteSlots = 4;

	std::unique_ptr<CreditWords> words;
	VerbsHandle<ibv_mr, ibv_dereg_mr> mr;
	/* The peer's word, from its offer. */
	uint64_t peer_addr = 0;
	uint32_t peer_rkey = 0;
	/* What the peer's offer said it had posted (its word may not have
	 * been written yet). */
	uint64_t base = 0;
	std::atomic<bool> peer_known{false};
	/* The peer offered none (not an nd peer): sends are not held. */
	bool unlimited = false;
	/* Sender: messages that take a peer's receive, posted. */
	uint64_t sent = 0;
	/* Receiver: the count last written to the peer (or offered). */
	uint64_t advertised = 0;
	/* A write that could not go out when the count rose (the send ring's
	 * lock was held, or its internal slots busy); the next post sends it. */
	std::atomic<bool> pending{false};

	/* Registers the word; nullptr (logged) when it cannot. */
	static std::unique_ptr<ReceiveCredits> open(ibv_pd *pd) noexcept;

	/* Where the peer writes, and the count now. */
	void fill_offer(uint64_t posted, cm::CreditOffer *offer) const noexcept
	{
		offer->addr = reinterpret_cast<uintptr_t>(&words->granted);
		offer->rkey = mr->rkey;
		offer->posted = static_cast<uint32_t>(posted);
	}
	/* Written by the thread that makes the connection, before the link
	 * goes up; read after the link is seen up (acquire), or under the
	 * send lock. */
	void take_offer(const cm::CreditOffer &peer) noexcept
	{
		peer_addr = peer.addr;
		peer_rkey = peer.rkey;
		base = peer.posted;
		peer_known.store(true, std::memory_order_release);
	}
	uint64_t granted() const noexcept
	{
		const uint64_t written = words->granted; /* by the peer's adapter */
		return std::max(written, base);
	}
	bool can_send() const noexcept { return unlimited || sent < granted(); }
	/* Whether the receiver has receives the peer was not told of. */
	bool worth_writing(uint64_t posted) const noexcept { return posted > advertised; }
};

} // namespace nd

#endif /* ND_CREDITS_H */
