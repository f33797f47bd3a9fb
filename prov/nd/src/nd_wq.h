/*
 * nd_wq.h: what the provider remembers about each posted work request, so
 * that its completion can be reported with the application's context and
 * flags, exactly once, and so that the send queue can run unsignaled.
 *
 * Every posted work request carries, as its wr_id, the address of an
 * OpRecord. Records of one endpoint's send or receive queue sit in a ring
 * (WorkQueue) whose slots are taken in posting order; an RC queue pair
 * completes each queue in that order, so a completion for slot s also
 * retires every earlier unsignaled slot (they succeeded: a failure would
 * have completed on its own, in order, first). Retiring is O(1), whatever
 * the length of the unsignaled run: an unsignaled request never has a
 * counter to bump (binding a counter makes every request signaled), and
 * the reads among them are counted by marks (read_mark below), not one by
 * one. A shared receive context completes out of order and keeps its
 * records in a pool with a free list instead (nd_srx.h).
 *
 * Threading: one thread posts (under the endpoint's lock if the domain is
 * FI_THREAD_SAFE) and one thread retires (under the CQ's lock), so the ring
 * needs only an acquire/release pair on its two counters.
 */
#ifndef ND_WQ_H
#define ND_WQ_H

#include <infiniband/verbs.h>
#include <rdma/fabric.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

namespace nd {

struct Endpoint;
struct SharedRx;

/* The most scatter/gather entries one request may carry (stack arrays on
 * the data path are this size). */
constexpr size_t kMaxSge = 32;

enum class QueueKind : uint8_t { send, recv, shared_recv };

struct WorkQueue;

struct OpRecord {
	void *context;		/* the application's, for the CQ entry */
	WorkQueue *owner;
	uint32_t flags;		/* the CQ entry's flags (FI_SEND | FI_MSG, ...;
				 * all of them below bit 32) */
	uint32_t len;		/* bytes posted (receives: buffer size) */
	uint32_t read_mark;	/* the queue's reads_posted once this was posted:
				 * its completion retires reads up to here */
	bool report;		/* the application asked for a CQ entry */
};
static_assert(sizeof(OpRecord) == 32, "a ring slot is half a cache line");
static_assert((FI_MSG | FI_RMA | FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_WRITE |
	       FI_REMOTE_CQ_DATA) <= UINT32_MAX, "OpRecord::flags holds every CQ flag used");

/* A mutex that locks only when the threading model needs it; chosen when
 * the object is opened, never per call. */
class OptionalLock {
public:
	void enable(bool on) noexcept { enabled_ = on; }
	bool enabled() const noexcept { return enabled_; }
	void lock() { if (enabled_) mutex_.lock(); }
	void unlock() { if (enabled_) mutex_.unlock(); }

private:
	std::mutex mutex_;
	bool enabled_ = false;
};

struct WorkQueue {
	QueueKind kind;
	Endpoint *ep;			/* send/recv: the endpoint */
	SharedRx *srx;			/* shared_recv: the context */
	std::unique_ptr<OpRecord[]> records;
	uint32_t depth;			/* most requests outstanding at once */
	bool counted = false;		/* a counter is bound to some of its requests */
	uint32_t mask;			/* ring size - 1 (a power of two > depth: one
					 * slot always free for the close marker) */
	std::atomic<uint64_t> head{0};	/* posted: written by the poster */
	std::atomic<uint64_t> tail{0};	/* retired: written by the reaper */
	uint32_t unsignaled_run = 0;	/* poster only: unsignaled since the last signal */
	uint32_t unsignaled_reads = 0;	/* poster only: unsignaled reads since then */
	/* RDMA reads posted and retired, wrapping: in flight is the difference. */
	uint32_t reads_posted = 0;		/* written by the poster */
	std::atomic<uint32_t> reads_retired{0};	/* written by the reaper */

	WorkQueue(QueueKind k, Endpoint *owner_ep, uint32_t wanted_depth);

	uint64_t outstanding() const noexcept
	{
		return head.load(std::memory_order_relaxed) - tail.load(std::memory_order_acquire);
	}
	bool full() const noexcept { return outstanding() >= depth; }

	/* The next free slot, filled by the poster and published by commit. */
	OpRecord &next() noexcept { return records[head.load(std::memory_order_relaxed) & mask]; }
	void commit() noexcept { head.store(head.load(std::memory_order_relaxed) + 1, std::memory_order_release); }
	/* Gives back the last n slots committed, when posting them failed. */
	void uncommit(uint64_t n = 1) noexcept
	{
		head.store(head.load(std::memory_order_relaxed) - n, std::memory_order_release);
	}

	uint32_t reads_in_flight() const noexcept
	{
		return reads_posted - reads_retired.load(std::memory_order_acquire);
	}

	/* Retires every slot up to and including `last` (earlier ones were
	 * unsignaled, see above), and the reads posted up to it. A `last`
	 * that is not outstanding (it cannot be, short of a device bug)
	 * retires all. */
	void retire_through(const OpRecord *last) noexcept
	{
		const uint64_t t = tail.load(std::memory_order_relaxed);
		const uint64_t h = head.load(std::memory_order_acquire);
		const uint64_t slot = static_cast<uint64_t>(last - records.get());
		const uint64_t count = ((slot - t) & mask) + 1;
		tail.store(count <= h - t ? t + count : h, std::memory_order_release);
		reads_retired.store(last->read_mark, std::memory_order_release);
	}
};

/*
 * Send-queue requests posted with FI_MORE: their ring slots are committed at
 * once, their work requests wait here, chained, and go to the device with
 * one ibv_post_send (one doorbell, which on Soft-RoCE is a system call) at
 * the endpoint's next send-queue call without FI_MORE, when the batch is
 * full, or when the queue pair is flushed. Inline data is copied in, since
 * the caller may reuse an FI_INJECT buffer at once. Allocated on the first
 * FI_MORE; used under the endpoint's tx_lock.
 */
struct SendBatch {
	static constexpr uint32_t kMaxRequests = 32;
	static constexpr uint32_t kMaxSges = 4 * kMaxSge;

	ibv_send_wr wr[kMaxRequests];
	ibv_sge sge[kMaxSges];
	std::unique_ptr<uint8_t[]> inline_bytes; /* kMaxRequests * max_inline */
	uint32_t inline_capacity = 0;
	uint32_t count = 0;
	uint32_t sges = 0;
	uint32_t inline_used = 0;

	/* Whether any request still fits (one with kMaxSge entries, or with
	 * max_inline bytes); when not, the batch is posted at once. */
	bool has_room(uint32_t max_inline) const noexcept
	{
		return count < kMaxRequests && sges + kMaxSge <= kMaxSges &&
		       inline_used + max_inline <= inline_capacity;
	}
};

inline OpRecord *record_of(uint64_t wr_id) noexcept
{
	return reinterpret_cast<OpRecord *>(static_cast<uintptr_t>(wr_id));
}

} // namespace nd

#endif /* ND_WQ_H */
