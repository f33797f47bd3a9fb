/*
 * nd_multi_recv.h: FI_MULTI_RECV buffers on a receive queue (an endpoint's
 * or a shared receive context's SRQ).
 *
 * A multi-receive buffer takes message after message, each placed right
 * after the one before, until less than FI_OPT_MIN_MULTI_RECV bytes are
 * left. An RDMA adapter places a message into the next posted receive in
 * queue order and cannot be told where the previous one ended, so nd keeps
 * exactly one work request of the buffer posted, covering all of its free
 * space, and posts the next (the rest after the message) when the message's
 * completion is retired. Until the buffer is released nothing else may be
 * posted behind it (the next message must land in it, not in a later
 * receive): receives posted meanwhile, and further multi-receive buffers,
 * wait here in order, their ring slots already taken, and are posted when
 * it is released. A message that arrives between a completion and the
 * repost finds no receive; RC's receiver-not-ready protocol makes the
 * sender retry (nd's queue pairs retry without limit), so nothing is lost,
 * and a burst of small messages into one buffer goes at the pace of the
 * receiver's CQ reads (fi_nd(7) says so).
 *
 * The whole buffer keeps one record (one ring slot, one wr_id) for its
 * life: its completions before the last do not retire the slot, the last
 * (FI_MULTI_RECV in the CQ entry) does. A failed or flushed completion
 * releases the buffer too, and what waited behind it is then posted to the
 * queue pair in error, which flushes it, so that every request completes.
 *
 * Locking: the poster (post_rx, under the endpoint's rx lock) and the
 * retirer (a CQ read, under the CQ's lock) both take `lock`, never the
 * other way round while holding it.
 */
#ifndef ND_MULTI_RECV_H
#define ND_MULTI_RECV_H

#include "nd.h"

#include <infiniband/verbs.h>

#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

namespace nd {

struct OpRecord;

/* FI_OPT_MIN_MULTI_RECV's default: a multi-receive buffer is released when
 * less than this is left (fi_nd(7)). */
constexpr size_t kDefaultMinMultiRecv = 64;

struct MultiRecv {
	/* A receive that waits behind the active buffer. */
	struct Held {
		OpRecord *record;
		std::vector<ibv_sge> sge;	/* a multi-receive buffer has one */
		bool multi;
	};

	Mutex lock{LockRank::multi_recv};
	/* Where work requests go: the queue pair or the SRQ (null once
	 * destroyed: what then waits here never reaches the device). */
	ibv_qp *qp = nullptr;
	ibv_srq *srq = nullptr;
	bool ready = false;			/* the queue pair takes receives */
	uint64_t min_free;			/* FI_OPT_MIN_MULTI_RECV */

	/* The buffer being filled, if any. */
	OpRecord *active = nullptr;
	uint8_t *base = nullptr;
	uint64_t size = 0;
	uint64_t used = 0;
	uint32_t lkey = 0;
	std::deque<Held> held;

	/* Posting, replaced by the unit tests; returns an errno. */
	int (*post_wr)(MultiRecv &, ibv_recv_wr &) = post_to_device;

	explicit MultiRecv(uint64_t min) : min_free(min) {}

	/* Whether a receive posted now must wait here. */
	bool busy() const noexcept { return active || !held.empty() || !ready; }

	/* Takes a receive whose ring slot is committed: posts it, or holds it
	 * behind the active buffer. An errno when posting failed. Under lock. */
	int submit(OpRecord *record, const ibv_sge *sge, size_t count, bool multi);

	/* What a completion of the active buffer means (retire). Under lock. */
	struct Placed {
		void *buf;	/* where the message landed */
		bool released;	/* the buffer is done: FI_MULTI_RECV */
	};
	Placed complete(OpRecord &record, const ibv_wc &wc) noexcept;

	/* Posts what waits, in order, up to and including the next buffer.
	 * Under lock. */
	void pump() noexcept;

	static int post_to_device(MultiRecv &m, ibv_recv_wr &wr) noexcept;

private:
	int start(OpRecord *record, const ibv_sge &sge);
	int post_plain(OpRecord *record, const ibv_sge *sge, size_t count);
	int post_rest() noexcept;
};

} // namespace nd

#endif /* ND_MULTI_RECV_H */
