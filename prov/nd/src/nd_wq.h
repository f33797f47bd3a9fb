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
 * have completed on its own, in order, first). soft-iWARP keeps that order
 * except for reads: it completes a send or write once transmitted, ahead
 * of a read posted before it that waits for its response. An iWARP send
 * queue therefore signals every read, and a completion with a read before
 * it still out only marks its record done; the read's completion retires
 * through it (WorkQueue::retire_in_read_order). Retiring is O(1), whatever
 * the length of the unsignaled run: an unsignaled request never has a
 * counter to bump (binding a counter makes every request signaled), and
 * the reads among them are counted by marks (read_mark below), not one by
 * one. A shared receive context completes out of order and keeps its
 * records in a pool with a free list instead (nd_srx.h).
 *
 * A completion belongs to a queue, never to an endpoint: what retiring one
 * of its requests touches besides the ring (the counters bound for each kind
 * of request, where a broken link is recorded) is handed to the queue when
 * its endpoint is enabled (RetireTargets), and retire() below is the one
 * place that decides what a work completion means. Both of the CQ's read
 * paths call it; nothing here knows endpoints, counters or CQs, so the
 * rules are unit-tested on the host with recorded work completions.
 *
 * Threading: one thread posts (under the endpoint's lock where the
 * threading model needs it) and one thread retires (under the CQ's lock), so the ring
 * needs only an acquire/release pair on its two counters.
 */
#ifndef ND_WQ_H
#define ND_WQ_H

#include "nd.h"
#include "nd_counter_cells.h"
#include "nd_credits.h"
#include "nd_link.h"
#include "nd_send_budget.h"
#include "nd_verbs.h"

#include <infiniband/verbs.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <iterator>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace nd {

/* The most scatter/gather entries one request may carry (stack arrays on
 * the data path are this size). */
constexpr size_t kMaxSge = 32;

enum class QueueKind : uint8_t { send, recv, shared_recv };

class WorkQueue;
struct MultiRecv;
class CompletionQueue;

/*
 * Where entries go that a completion makes besides its own: a framed
 * endpoint's message delivered to the receive it matched, the receives
 * ended with it. The CQ's, under its lock (CompletionQueue::Sink, nd_cq.h);
 * its rings are sized so that neither call ever allocates or fails while
 * completions are read (nd_cq.h says how).
 */
struct CompletionSink {
	/* Room for one more success entry (always, on an internal CQ, which
	 * queues nothing). */
	virtual bool has_room() const noexcept = 0;
	/* Queue an entry; false when there was no room (logged). */
	virtual bool success(const fi_cq_tagged_entry &entry) noexcept = 0;
	virtual bool error(const fi_cq_err_entry &entry) noexcept = 0;

protected:
	~CompletionSink() = default;
};

/* A receive queue filled with nd's own buffers (a framed endpoint's,
 * nd_framing.h). WorkQueue::retire hands it each of their completions
 * after it has retired the slot: a message to match (on_message, false
 * when it cannot be trusted: the link breaks), or the end of the
 * connection (on_end). What it delivers goes to the sink. */
struct PlacedReceiver {
	virtual ~PlacedReceiver() = default;
	virtual bool on_message(const ibv_wc &wc, uint8_t *buffer, CompletionSink &sink) noexcept = 0;
	virtual void on_end(CompletionSink &sink) noexcept = 0;
};

struct OpRecord {
	void *context;		/* the application's, for the CQ entry */
	WorkQueue *owner;
	uint32_t flags;		/* the CQ entry's flags (FI_SEND | FI_MSG, ...;
				 * all of them below bit 32) */
	uint32_t len;		/* bytes posted (receives: buffer size) */
	uint32_t read_mark;	/* the queue's reads_posted once this was posted:
				 * its completion retires reads up to here */
	/* Bit 0: the application asked for a CQ entry. Bit 1 (send queue):
	 * the request was posted signaled, which is what SendQueue::unclaim
	 * looks back for. Bits 8-31: the low bits of the request's place in
	 * its queue's posting order (WorkQueue::head when posted), from which
	 * retiring counts the slots up to it, whichever of the queue's rings
	 * it lives in; fewer requests than 2^24 are ever outstanding on one
	 * queue. One word, so that the poster writes them with one store. */
	uint32_t seq_and_report;

	static constexpr uint32_t kSignaledBit = IBV_SEND_SIGNALED;
	static_assert(IBV_SEND_SIGNALED == 2, "the signaled bit is bit 1, where the work request has it");
	/* Bit 2 (send queue): claiming it moved the fence mark (WorkQueue::
	 * fence_after_reads), which unclaim gives back. */
	static constexpr uint32_t kMovedFenceBit = 4;
	/* Bit 3 (send queue): an RDMA read or an atomic. */
	static constexpr uint32_t kReadBit = 8;

	bool report() const noexcept { return seq_and_report & 1u; }
	bool signaled() const noexcept { return seq_and_report & kSignaledBit; }
	bool moved_fence() const noexcept { return seq_and_report & kMovedFenceBit; }
	bool is_read() const noexcept { return seq_and_report & kReadBit; }
	inline bool done_early() const noexcept; /* below */
	uint32_t seq() const noexcept { return seq_and_report >> 8; }
	void set_report(bool report) noexcept { seq_and_report = (seq_and_report & ~1u) | (report ? 1u : 0u); }
	void set_seq(uint64_t seq) noexcept { seq_and_report = static_cast<uint32_t>(seq) << 8 | (seq_and_report & 1u); }
	/* A receive's record (ReceiveQueue::claim_recv, a shared pool's slot):
	 * the buffer's context, its CQ flags and size. */
	void fill_recv(void *for_context, uint32_t cq_flags, uint32_t size, bool reported) noexcept
	{
		context = for_context;
		flags = cq_flags;
		len = size;
		read_mark = 0;
		set_report(reported);
	}
};
static_assert(sizeof(OpRecord) == 32, "a ring slot is half a cache line");
constexpr uint32_t kSeqMask = (1u << 24) - 1;
/* The CQ entry flags a record carries. */
constexpr uint64_t kRecordCqFlags = FI_MSG | FI_RMA | FI_SEND | FI_RECV | FI_READ | FI_WRITE |
				    FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA | FI_MULTI_RECV;
static_assert(kRecordCqFlags <= UINT32_MAX, "OpRecord::flags holds every CQ flag used");
/* OpRecord::flags' own bit, never reported: the request is a buffer nd
 * places messages in (a multi-receive buffer, or a framed endpoint's own),
 * so its completions take retire's slow path, which says where the
 * message went. (FI_MULTI_RECV in a completion means only what the man
 * page says: the buffer is released.) */
constexpr uint32_t kPlacedByNd = 1u << 31;
static_assert((kRecordCqFlags & kPlacedByNd) == 0, "kPlacedByNd is no CQ flag");
/* OpRecord::flags' own bit, never reported (set after the CQ entry was
 * taken from the record): a send-queue request that completed while a read
 * before it was still out (soft-iWARP), whose slot waits for that read's
 * completion to retire it (WorkQueue::retire_in_read_order). In flags, not
 * seq_and_report, because flags is the reaper's alone once the request is
 * posted, where the poster still reads seq_and_report (SendQueue::unclaim). */
constexpr uint32_t kDoneEarly = 1u << 30;
static_assert((kRecordCqFlags & kDoneEarly) == 0, "kDoneEarly is no CQ flag");
inline bool OpRecord::done_early() const noexcept { return flags & kDoneEarly; }

/* The send-queue requests that count against the read limit: RDMA reads
 * and the atomics, which read too. */
inline bool is_atomic_opcode(ibv_wr_opcode opcode) noexcept
{
	return opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
}
inline bool reads_remote_memory(ibv_wr_opcode opcode) noexcept
{
	return opcode == IBV_WR_RDMA_READ || is_atomic_opcode(opcode);
}

/* Every work request's wr_id is its record. */
inline OpRecord *record_of(uint64_t wr_id) noexcept
{
	return reinterpret_cast<OpRecord *>(static_cast<uintptr_t>(wr_id));
}

/* What a queue tells its endpoint, from the poller: one table per kind of
 * endpoint, static, so that each queue of thousands keeps one pointer to
 * it rather than a pointer per hook. */
struct QueueHooks {
	/* A request failed because the peer stopped answering (transport or
	 * RNR retries exhausted): the connection is over, though the CM says
	 * nothing until its own timeouts. */
	void (*peer_lost)(void *owner) = nullptr;
	/* A send-queue request retired: room for a receive-credit write that
	 * had to wait (nd_credits.h). */
	void (*room)(void *owner) noexcept = nullptr;
	/* The CQ's StallWatch (nd_cq.h), under the CQ's lock: nothing moved
	 * for too long; the queue pair goes to the error state. */
	void (*stall)(void *owner) noexcept = nullptr;
	/* The CQ's look (about once a second while it is read: StallWatch),
	 * under the CQ's lock: what waits for no completion (nd_credits.h:
	 * held credit writes, the connector's repeated ready write). */
	void (*look)(void *owner) noexcept = nullptr;
};

/* What retiring a queue's requests touches besides the ring, handed to the
 * queue by its endpoint at fi_enable (WorkQueue::set_targets). */
struct RetireTargets {
	CounterCells counters[kCounterKinds];	/* by CounterKind; empty: none bound */
	Link *link = nullptr;			/* broken by a real failure */
	const QueueHooks *hooks = nullptr;	/* static; null: none */
	void *owner = nullptr;			/* the hooks' argument */
	/* iWARP, a receive queue: its remote CQ data slots (nd_credits.h),
	 * kDataSlotWords per ring slot; null: none. A receive queue has no
	 * hooks, so it keeps them where a send queue keeps its hooks' owner. */
	uint64_t *data_slots = nullptr;
	/* iWARP: a refused request ends the stream with a terminate, which
	 * flushes everything with no error of its own; a flush while the link
	 * is up is then the failure (elsewhere the failed request completes
	 * first, with its own status). */
	bool flush_breaks_link = false;
	/* iWARP, a send queue: a read may complete after requests posted
	 * behind it (soft-iWARP), so they retire in read order
	 * (WorkQueue::retire_in_read_order); every read must be signaled. */
	bool reads_complete_late = false;
};

/* What a work completion means to the CQ, decided by WorkQueue::retire. */
struct Retired {
	void *context;		/* the application's */
	uint32_t flags;		/* the CQ entry's flags (a receive's: FI_RECV |
				 * FI_MSG, and FI_MULTI_RECV when the message
				 * releases its multi-receive buffer) */
	bool report;		/* the application wants a CQ entry (on success,
				 * and when flushed; a real failure always has one) */
};

/* What retire's slow path says besides Retired (whose two words come back
 * in registers on the CQ's fast path): where a multi-receive message
 * landed, and where a framed endpoint's deliveries go. */
struct Placement {
	CompletionSink *sink = nullptr;		/* in: null reports nothing */
	void *buf = nullptr;			/* out: the message's address */
	/* out: nd's own buffer, which has no entry of its own whatever its
	 * status (what it delivered went to the sink) */
	bool nd_buffer = false;
};

/* Frees a ring of `slots` records that is not a queue's inline one: rings
 * of the working size come from a pool of their own (nd_wq.cpp). */
struct RingDelete {
	uint32_t slots = 0;
	void operator()(OpRecord *ring) const noexcept; /* nd_wq.cpp */
};
using RingPtr = std::unique_ptr<OpRecord[], RingDelete>;

/* A ring a growing queue left behind (WorkQueue::grow): its records stay
 * where the adapter knows them until the requests in it retire. */
struct OldRing {
	OpRecord *records;
	RingPtr storage;			/* null: the queue's inline ring */
	uint32_t mask;
	uint64_t first, end;		/* the requests it holds: [first, end) */
};

/* What only some queues use, made by the first call that needs it
 * (WorkQueue::extras): what most queues of thousands of endpoints never
 * touch, kept out of every queue (its size is asserted below). */
struct QueueExtras {
	/* A ring that grew: earlier rings still holding requests. */
	std::vector<OldRing> old_rings;
	/* shared_recv: a shared receive context completes out of order, so
	 * its records are a pool of free slots instead of a ring, under the
	 * context's lock (set by the context). */
	std::vector<uint32_t> free_slots;
	OptionalLock *pool_lock = nullptr;
	/* recv, shared_recv: FI_MULTI_RECV buffers and what waits behind
	 * them (nd_multi_recv.h); made at the first such buffer. */
	std::unique_ptr<MultiRecv> multi;
	/* recv: an endpoint with FI_TAGGED (nd_framing.h): nd's own buffers
	 * fill the queue and every completion goes to the framing. */
	std::unique_ptr<PlacedReceiver> framing;
	/* send: the budget of the shared transmit context bound, if any;
	 * shared, since the queue may outlive the context as an orphan. */
	std::shared_ptr<SendBudget> budget;
	/* A queue with a counter bound for some kind of its requests. */
	CounterCells counters[kCounterKinds];
	/* The first request in the queue's ring once it grew with requests
	 * outstanding (those before it are in old_rings); 0 (all of them)
	 * for a queue without extras. */
	uint64_t ring_first = 0;

	QueueExtras();
	~QueueExtras(); /* nd_wq.cpp, where MultiRecv is complete */
};
static_assert(sizeof(QueueExtras) <= 128, "made only by queues that need it, but kept small");

/* What kind of send-queue request SendQueue::claim takes: the
 * application's sends and writes (which a fence may hold behind reads),
 * its reads (counted against the negotiated limit), or the provider's own
 * (receive-credit writes, the drain marker), which neither fence nor
 * count. */
enum class SendKind : uint8_t { send_or_write, read, internal };

/* One send-queue request as its poster describes it to SendQueue::claim. */
struct SendClaim {
	void *context;		/* the application's, or null */
	uint32_t flags;		/* the CQ entry's (OpRecord::flags) */
	uint32_t len;		/* bytes */
	bool report;		/* a CQ entry is wanted */
	bool signal;		/* must complete by itself (a CQ entry, a counter) */
};

/* What SendQueue::claim took: the record (the work request's wr_id) and
 * the flags the work request needs (IBV_SEND_SIGNALED, IBV_SEND_FENCE). */
struct Claimed {
	OpRecord *record;
	uint32_t send_flags;
};

/* Slots a queue's first ring holds in the queue itself: an endpoint's
 * queues start with room for one request (and the close marker's slot), so
 * that thousands of endpoints at rest cost one allocation a queue. */
constexpr uint32_t kInlineRingSlots = 2;
/* Slots a send ring has once it left the inline ones (WorkQueue::
 * grown_size): 4 KiB, where a ping-pong's unsignaled runs retire with a
 * CQ read every 63 posts instead of growing the ring further. */
constexpr uint32_t kWorkingRingSlots = 128;

/*
 * The ring every kind of queue keeps its records in, and their retirement:
 * what the CQ's reaper needs of any queue. Its three kinds are the types
 * below it, each with its own posting protocol: SendQueue (claim, unclaim,
 * the signaling and fencing counters), ReceiveQueue (claim_recv) and
 * SharedReceivePool (a free list instead of a ring's order). A record's
 * owner is this base; retire() tells the kinds apart by `kind_` where a
 * kind's rule differs, so the CQ's fast path stays one inline branch.
 */
class WorkQueue {
public:
	WorkQueue(const WorkQueue &) = delete; /* its records point at it */
	WorkQueue &operator=(const WorkQueue &) = delete;

	QueueKind kind() const noexcept { return kind_; }
	uint32_t depth() const noexcept { return depth_; }
	/* Most requests the ring holds now (<= depth; grow raises it). */
	uint32_t limit() const noexcept { return limit_; }
	/* Ring slots now (a power of two): request s is in slot s & (size-1). */
	uint32_t ring_size() const noexcept { return mask_ + 1; }
	/* Whether the ring is still the queue's first, inline one. */
	bool ring_is_inline() const noexcept { return records_ == inline_ring_; }
	/* A slot's index in the ring (a record of the ring now). */
	uint32_t slot_of(const OpRecord &record) const noexcept { return static_cast<uint32_t>(&record - records_); }
	/* Posted, and retired: the poster writes head, the reaper tail. */
	uint64_t posted() const noexcept { return head_.load(std::memory_order_relaxed); }
	/* head for a reader that is not the poster (the stall watch). */
	uint64_t posted_acquire() const noexcept { return head_.load(std::memory_order_acquire); }
	uint64_t retired() const noexcept { return tail_.load(std::memory_order_acquire); }

	/* The rarely used parts, made on first need; throws std::bad_alloc. */
	QueueExtras &extras(); /* nd_wq.cpp */
	MultiRecv *multi() const noexcept { return extras_ ? extras_->multi.get() : nullptr; }
	PlacedReceiver *framing() const noexcept { return extras_ ? extras_->framing.get() : nullptr; }
	SendBudget *budget() const noexcept { return extras_ ? extras_->budget.get() : nullptr; }
	size_t old_ring_count() const noexcept { return extras_ ? extras_->old_rings.size() : 0; }
	/* The counter bound for a kind of request; empty when none. */
	CounterCells counter(CounterKind which) const noexcept
	{
		return extras_ ? extras_->counters[static_cast<size_t>(which)] : CounterCells{};
	}
	/* The hooks', each a no-op where none is set. */
	void tell_peer_lost() const
	{
		if (hooks_ && hooks_->peer_lost)
			hooks_->peer_lost(owner_);
	}
	void tell_room() const noexcept
	{
		if (hooks_ && hooks_->room)
			hooks_->room(owner_);
	}
	void tell_look() const noexcept
	{
		if (hooks_ && hooks_->look)
			hooks_->look(owner_);
	}
	void tell_stall() const noexcept
	{
		if (hooks_ && hooks_->stall)
			hooks_->stall(owner_);
	}
	/* The hooks' argument (for the log). */
	const void *owner() const noexcept { return kind_ == QueueKind::send ? owner_ : nullptr; }
	/* The CQ's StallWatch found that nothing moved for too long: the link
	 * fails, the queue pair is flushed (the stall hook) and the EQ ends
	 * the connection (peer_lost). Under the CQ's lock. */
	void end_stalled()
	{
		stalled_.store(true, std::memory_order_relaxed);
		if (link_)
			link_->on(Link::Event::failed);
		tell_stall();
		tell_peer_lost();
	}
	/* Once after end_stalled: the first request flushed then reports
	 * FI_ETIMEDOUT, as exhausted transport retries would. */
	bool take_stalled() noexcept { return stalled_.exchange(false, std::memory_order_relaxed); }

	/* Where completions leave their marks (fi_enable), before any post;
	 * throws std::bad_alloc where a counter is bound (extras). */
	void set_targets(const RetireTargets &t)
	{
		counted_ = false;
		for (const CounterCells &cells : t.counters)
			counted_ = counted_ || static_cast<bool>(cells);
		if (counted_ || extras_)
			std::copy(std::begin(t.counters), std::end(t.counters), extras().counters);
		link_ = t.link;
		hooks_ = t.hooks;
		if (kind_ == QueueKind::send)
			owner_ = t.owner;
		else
			data_slots_ = kind_ == QueueKind::recv ? t.data_slots : nullptr;
		flush_breaks_link_ = t.flush_breaks_link;
		reads_complete_late_ = kind_ == QueueKind::send && t.reads_complete_late;
		choose_retire_path();
	}
	/* An orphaned queue's (CompletionQueue::adopt_orphan): its endpoint
	 * and counters go; a late completion only retires its record. */
	void clear_targets() noexcept
	{
		if (extras_)
			std::fill(std::begin(extras_->counters), std::end(extras_->counters), CounterCells{});
		counted_ = false;
		link_ = nullptr;
		hooks_ = nullptr;
		owner_ = nullptr; /* and data_slots_ */
		flush_breaks_link_ = false;
		choose_retire_path();
	}
	/* The first multi-receive buffer's state (a receive queue's or a
	 * shared pool's), made before its record is posted, so that its
	 * completion cannot take the inline path; throws std::bad_alloc. */
	void set_multi(std::unique_ptr<MultiRecv> m); /* nd_wq.cpp */
	/* Which path retire() takes for this queue's successes: inline for a
	 * ring with no counter, no shared budget, no multi-receive buffer, no
	 * framing and no room hook; the same but for iWARP, each a small
	 * function of its own: a receive queue's remote CQ data slots, a send
	 * queue's read order with its room hook (an iWARP send queue without
	 * one retires in read order through retire_other); retire_other for
	 * the rest. */
	enum class RetirePath : uint8_t { plain, with_slot, iwarp_send, other };
	RetirePath retire_path() const noexcept { return retire_path_; }
	bool retires_inline() const noexcept { return retire_path_ == RetirePath::plain; }
	/* A counter is bound to some of its requests. */
	bool counted() const noexcept { return counted_; }
	/* Whether its rarely used parts were made (extras). */
	bool has_extras() const noexcept { return static_cast<bool>(extras_); }

	/*
	 * The one place a work completion is given its meaning: retires the
	 * request's slot (and the unsignaled run before it), counts it on the
	 * counter bound for its kind, records a broken link when it failed for
	 * real (a flush is the expected end of a closed link), and says what
	 * the CQ reports. `wc.wr_id` is a record of this queue. The common
	 * case (success, no counter, a ring) is inline; the rest is not.
	 * Messages nd placed take the rest too (placed_message): a
	 * multi-receive message says where it landed, and a framed
	 * endpoint's is matched, in *placement (kept out of Retired, whose
	 * two words come back in registers on the CQ's fast path). A receive
	 * queue with remote CQ data slots (iWARP) is inline too, behind the
	 * plain case, so RoCE's and InfiniBand's completions pay nothing for
	 * it, and so is a send queue with a room hook.
	 */
	[[gnu::always_inline]] static Retired retire(ibv_wc &wc, Placement *placement = nullptr) noexcept
	{
		OpRecord *record = record_of(wc.wr_id);
		WorkQueue *queue = record->owner;
		const RetirePath path = queue->retire_path_;
		if (__builtin_expect(wc.status == IBV_WC_SUCCESS && path == RetirePath::plain, 1)) {
			const Retired done{record->context, record->flags, record->report()};
			queue->retire_through(record); /* the slot may be reused now */
			return done;
		}
		/* iWARP's receives: as plain but for one load of the slot. Its
		 * data goes into the work completion itself, so that every
		 * reader of it reports the data as immediate data. */
		if (wc.status == IBV_WC_SUCCESS && path == RetirePath::with_slot) {
			queue->take_remote_data(*record, wc); /* before the slot may be reused */
			const Retired done{record->context, record->flags, record->report()};
			queue->retire_through(record);
			return done;
		}
		/* iWARP's sends: in read order, then the room hook, which sends
		 * a credit write that found the ring full (one call, two loads
		 * and a test when none waits). */
		if (wc.status == IBV_WC_SUCCESS && path == RetirePath::iwarp_send) {
			const Retired done{record->context, record->flags, record->report()};
			queue->retire_behind_reads(*record);
			queue->hooks_->room(queue->owner_); /* after: the credit write it sends takes a slot */
			return done;
		}
		return queue->retire_other(*record, wc, placement);
	}

	/* Whether the completion is a message in a buffer nd places messages
	 * in: a multi-receive buffer, or a framed endpoint's own (nd_framing.h). */
	static bool placed_message(const ibv_wc &wc) noexcept
	{
		return record_of(wc.wr_id)->flags & kPlacedByNd;
	}

	uint64_t outstanding() const noexcept
	{
		return head_.load(std::memory_order_relaxed) - tail_.load(std::memory_order_acquire);
	}
	/* The ring is full (the fast path's check); it may still grow. */
	bool full() const noexcept { return outstanding() >= limit_; }
	/* The same, with head as the poster loaded it (posted()). */
	bool full_at(uint64_t h) const noexcept { return tail_.load(std::memory_order_acquire) + limit_ <= h; }
	/* How many more requests grow() would let the ring hold: 0 at the
	 * depth. */
	uint32_t growth() const noexcept;
	/* The ring size grow() makes. */
	uint32_t grown_size() const noexcept;
	/* A ring twice the size for the requests posted from now on; the
	 * old one stays until its requests retire. false when out of memory.
	 * The poster's, under the CQ's lock (the stall watch reads records). */
	bool grow() noexcept;
	/* The record of request `seq`, outstanding (held by the poster, or
	 * under the CQ's lock). */
	OpRecord &record_at(uint64_t seq) noexcept;

	/*
	 * retire_through for a queue whose reads may complete after requests
	 * posted behind them (reads_complete_late_; else it is retire_through).
	 * Reads complete in order among themselves, and every request before
	 * a read has completed when the read does (it was transmitted before
	 * the read's request was), so a read's completion retires through it,
	 * and then through the requests after it that completed early. Any
	 * other completion with a read before it still out (its read mark
	 * past the reads retired: every read is signaled, so each one retires
	 * itself) marks its record done and retires nothing yet. How many
	 * slots retired.
	 */
	uint64_t retire_in_read_order(OpRecord &record) noexcept
	{
		return reads_complete_late_ ? retire_behind_reads(record) : retire_through(&record);
	}
	/* retire_in_read_order of a queue whose reads complete late. The
	 * common case inline: no read at or before the record is out (a read
	 * counts itself in its read mark, so its own completion goes out of
	 * line). */
	[[gnu::always_inline]] uint64_t retire_behind_reads(OpRecord &record) noexcept
	{
		const uint32_t reads_out = record.read_mark - reads_retired_.load(std::memory_order_relaxed);
		if (__builtin_expect(static_cast<int32_t>(reads_out) <= 0, 1))
			return retire_through(&record);
		return retire_read_or_wait(record);
	}

	/* Retires every slot up to and including `last` (earlier ones were
	 * unsignaled, see above), and the reads posted up to it; how many. A
	 * `last` that is not outstanding (it cannot be, short of a device bug)
	 * retires all. */
	[[gnu::always_inline]] uint64_t retire_through(const OpRecord *last) noexcept
	{
		const uint64_t t = tail_.load(std::memory_order_relaxed);
		const uint64_t h = head_.load(std::memory_order_acquire);
		const uint64_t count = ((last->seq() - t) & kSeqMask) + 1;
		const uint64_t retired = count <= h - t ? count : h - t;
		/* Read before the slot is given back: the poster may reuse it,
		 * or free the old ring it is in, once tail passes it. */
		const uint32_t read_mark = last->read_mark;
		/* The reads first: whoever sees tail pass `last` (acquire) sees
		 * the reads it retired (SendQueue::unclaim reads both). */
		reads_retired_.store(read_mark, std::memory_order_release);
		tail_.store(t + retired, std::memory_order_release);
		return retired;
	}

protected:
	/* Allocates the ring (or pool); throws std::bad_alloc. `internal`
	 * slots beyond the depth are the provider's own (receive-credit
	 * writes, nd_credits.h): the application's requests never take them.
	 * A ring holds `initial` requests at first (at least; the depth when
	 * 0): grow() makes more room. A pool holds the depth. */
	WorkQueue(QueueKind k, uint32_t wanted_depth, uint32_t internal = 0, uint32_t initial = 0);
	/* Requests still counted go back to the budget with the queue. Not
	 * virtual: a queue is deleted as its kind (QueueDelete). */
	~WorkQueue();

	void choose_retire_path() noexcept
	{
		const bool plain = kind_ != QueueKind::shared_recv && !counted_ && !budget() && !multi() && !framing();
		/* iWARP's: a receive queue's remote CQ data slots; a send
		 * queue's read order, and its room hook (credit writes waiting
		 * for a slot). */
		const bool slots = kind_ == QueueKind::recv && data_slots_;
		const bool room = kind_ == QueueKind::send && hooks_ && hooks_->room;
		retire_path_ = !plain				? RetirePath::other
			       : slots				? RetirePath::with_slot
			       : room && reads_complete_late_	? RetirePath::iwarp_send
			       : room || reads_complete_late_	? RetirePath::other
								: RetirePath::plain;
	}

	/* Publishes the slot claimed at h. */
	[[gnu::always_inline]] void publish(uint64_t h) noexcept { head_.store(h + 1, std::memory_order_release); }
	/* Gives back the last n slots claimed, when posting them failed. */
	void give_back(uint64_t n) noexcept
	{
		const uint64_t h = head_.load(std::memory_order_relaxed) - n;
		if (__builtin_expect(extras_ && h < extras_->ring_first, 0))
			extras_->ring_first = h; /* those slots are taken again from the new ring */
		head_.store(h, std::memory_order_release);
		if (SendBudget *b = budget())
			b->give_back(n);
	}

	/*
	 * Two per endpoint, each one malloc block (the kinds' sizes are
	 * asserted below): the small words packed together, where the ring
	 * starts once it grew with requests outstanding among the extras, and
	 * the first ring inline.
	 */
	QueueKind kind_;
	bool counted_ = false;		/* a counter is bound to some of its requests */
	RetirePath retire_path_ = RetirePath::plain; /* choose_retire_path's */
	bool flush_breaks_link_ : 1 = false; /* RetireTargets' */
	bool reads_complete_late_ : 1 = false; /* RetireTargets' (kept by an orphan: its device's) */
	std::atomic<bool> stalled_{false};
	uint8_t internal_slots_ = 0;	/* beyond depth, for the provider's own */
	/* A send queue's: every signal_interval_-th request is signaled
	 * (SendQueue::set_signal_interval). Here, where it fills a hole.
	 * Atomic (relaxed: plain loads and stores) for the stall watch, which
	 * reads it with signal_at_ while the poster may set it. */
	std::atomic<uint16_t> signal_interval_{1};
	uint32_t depth_;		/* most requests outstanding at once */
	uint32_t limit_;		/* most the ring holds now (<= depth) */
	/* The ring requests take slots in: request number s (head when it
	 * was posted) in records_[s & mask_], from the extras' ring_first on
	 * (0 without extras). A queue whose CQ can grow starts small and
	 * grows when it fills (grow): memory follows the requests an endpoint
	 * has in flight at once, not the depth it may have, which for
	 * thousands of endpoints of one process is most of their memory.
	 * inline_ring_ while it fits there, else owned. */
	OpRecord *records_;
	uint32_t mask_;			/* ring size - 1 (a power of two > depth +
					 * internal slots: one slot always free for the
					 * close marker) */
	/* RDMA reads (and atomics) retired, wrapping (the reaper's; a send
	 * queue's poster counts those posted). Here, where it fills a hole. */
	std::atomic<uint32_t> reads_retired_{0};
	/* RetireTargets' link, hooks and their owner (its counters are in
	 * the extras, made for a counted queue only). */
	Link *link_ = nullptr;
	const QueueHooks *hooks_ = nullptr;
	union {
		void *owner_ = nullptr;		/* a send queue's: the hooks' argument */
		uint64_t *data_slots_;		/* a receive queue's: RetireTargets' */
	};
	std::atomic<uint64_t> head_{0};	/* posted: written by the poster */
	std::atomic<uint64_t> tail_{0};	/* retired: written by the reaper */
	/* Null until a queue needs one of its parts. */
	std::unique_ptr<QueueExtras> extras_;
	/* The first ring, where it fits (see kInlineRingSlots). */
	OpRecord inline_ring_[kInlineRingSlots];

private:
	/* Frees `ring` unless it is the inline one (nd_wq.cpp). */
	void free_ring(OpRecord *ring) const noexcept;
	/* iWARP's remote CQ data (nd_credits.h): a receive's slot, written by
	 * the peer's adapter before the message arrived, goes into its work
	 * completion, which then reads as one that carried immediate data.
	 * Before the ring slot retires: a receive posted in it again lets the
	 * peer write the data slot again. Most messages carry none: one load. */
	[[gnu::always_inline]] void take_remote_data(const OpRecord &record, ibv_wc &wc) noexcept
	{
		uint64_t *slot = data_slots_ + static_cast<size_t>(&record - records_) * kDataSlotWords;
		const uint64_t word = __atomic_load_n(slot, __ATOMIC_RELAXED); /* the adapter's write */
		if (__builtin_expect(word != 0, 0))
			apply_remote_data(record, slot, word, wc);
	}
	/* retire_behind_reads' rare part (nd_wq.cpp): a read retires through
	 * itself and the requests after it that completed early; any other
	 * request is marked done and waits. */
	uint64_t retire_read_or_wait(OpRecord &record) noexcept;
	/* retire() for a failure, a counted queue, a pool, or a buffer nd
	 * places messages in (nd_wq.cpp). */
	Retired retire_other(OpRecord &record, ibv_wc &wc, Placement *placement) noexcept;
	/* take_remote_data's rare part: a slot that holds data (nd_wq.cpp). */
	void apply_remote_data(const OpRecord &record, uint64_t *slot, uint64_t word, ibv_wc &wc) noexcept;
};

/* Deletes a queue as its kind (WorkQueue's destructor is not virtual: a
 * vtable pointer would be a word more in each of thousands of queues). */
struct QueueDelete {
	void operator()(WorkQueue *queue) const noexcept; /* nd_wq.cpp */
};
using AnyQueue = std::unique_ptr<WorkQueue, QueueDelete>;

/*
 * An endpoint's send queue: the ring, and the poster's counters that
 * decide what each request posted is (signaled, counted as a read,
 * fenced), which claim moves and unclaim gives back, nothing else.
 */
class SendQueue final : public WorkQueue {
public:
	SendQueue(uint32_t wanted_depth, uint32_t internal = 0, uint32_t initial = 0)
		: WorkQueue(QueueKind::send, wanted_depth, internal, initial)
	{
	}

	/* A signaled request is outstanding: reading the CQ will retire
	 * every request up to it once it completes. */
	bool signaled_outstanding() const noexcept
	{
		return signaled_head() > tail_.load(std::memory_order_acquire);
	}
	/* The stall watch's: head just after the last signaled request. */
	uint64_t last_signaled_end() const noexcept { return signaled_head(); }
	/*
	 * After a flush that put a completion for every request still on the
	 * queue pair into the CQ (Domain::synchronous_flush), with the CQ read
	 * to its end: what is still outstanding left the queue pair before the
	 * flush, unsignaled, and never completes. Retires it, under the CQ's
	 * lock; false, retiring nothing, while a signaled request or a read
	 * is out (a read waits for its response, and its completion may come
	 * yet).
	 */
	bool retire_completed_unsignaled() noexcept
	{
		if (signaled_outstanding() || reads_in_flight() != 0)
			return false;
		if (outstanding() == 0)
			return true;
		/* As the last one's completion would have retired them. */
		const uint64_t retired = retire_through(&record_at(posted_acquire() - 1));
		if (SendBudget *b = budget())
			b->give_back(retired);
		return true;
	}
	/* The ring or the shared budget is full (the slow paths' check). */
	bool no_room() const noexcept
	{
		const SendBudget *b = budget();
		return full() || (b && b->exhausted());
	}
	/* Counts a request about to be claimed unbudgeted (claim<Kind,
	 * false>) against the shared budget; unclaim gives it back. */
	void count_budget() noexcept
	{
		if (SendBudget *b = budget())
			b->take();
	}
	/* Slots beyond the depth for the provider's own requests. */
	uint32_t internal_slots() const noexcept { return internal_slots_; }
	/* Not even the provider's own slots beyond the depth are free. */
	bool internal_full() const noexcept { return outstanding() >= limit_ + internal_slots_; }
	/* Reads were posted since the last send or write fenced after them
	 * (fence_after_reads): the next one needs the fence, where the
	 * endpoint asked for it. */
	bool reads_unfenced() const noexcept { return reads_posted_ != reads_fenced_; }
	uint32_t reads_in_flight() const noexcept
	{
		return reads_posted_ - reads_retired_.load(std::memory_order_acquire);
	}
	/* A shared transmit context's budget (fi_enable, before any post);
	 * throws std::bad_alloc (extras). */
	void set_budget(std::shared_ptr<SendBudget> b)
	{
		extras().budget = std::move(b);
		choose_retire_path();
	}

	/*
	 * The posting protocol of the send queue, the one place that decides
	 * it for every request (a send, an inject, an RMA write or read, a
	 * receive-credit write, the drain marker): whether the request is
	 * signaled, its record, the fence it needs after reads, and its slot
	 * committed. The ring has room; the caller builds the work request
	 * with the flags returned (IBV_SEND_SIGNALED, IBV_SEND_FENCE) and
	 * posts it (Endpoint::submit), which unclaims it when that fails.
	 *
	 * A signaled request restarts both unsignaled counts: its completion
	 * retires every request before it, reads included, which is what lets
	 * a read past the negotiated limit wait for a completion that is sure
	 * to come (Endpoint::post_tx). Every interval-th request is signaled
	 * (set_signal_interval), so that the ring retires, and every
	 * `read_every`-th read; a request that must complete by itself says
	 * so (SendClaim::signal). Inlined with its constants at each caller:
	 * the inject path's costs nothing it does not use.
	 */
	template <SendKind Kind, bool Budgeted = true>
	[[gnu::always_inline]] Claimed claim(const SendClaim &request, uint32_t read_every = 1,
					      uint32_t fence = 0) noexcept
	{
		return claim_at<Kind, Budgeted>(posted(), request, read_every, fence);
	}
	/* Every `interval`-th request is signaled from now on (fi_enable, and
	 * when the ring grows): the poster's. */
	void set_signal_interval(uint32_t interval) noexcept
	{
		const uint64_t end = signaled_head();
		/* Signaling more often than asked is always safe. */
		signal_interval_.store(static_cast<uint16_t>(std::clamp<uint32_t>(interval, 1, UINT16_MAX)),
				       std::memory_order_relaxed);
		set_signaled_head(end);
	}
	/* claim() with head as the poster just loaded it (full_at): an
	 * atomic load is never merged with another. */
	template <SendKind Kind, bool Budgeted = true>
	[[gnu::always_inline]] Claimed claim_at(uint64_t h, const SendClaim &request, uint32_t read_every = 1,
						 uint32_t fence = 0) noexcept
	{
		constexpr bool is_read = Kind == SendKind::read;
		/* Copies with their flags known: a run of unsignaled requests
		 * keeps no flag in a register, and a read that must complete by
		 * itself reads neither interval (its path has no register to
		 * spare; a send's or write's is shorter without the copy). */
		if constexpr (is_read)
			if (request.signal)
				return claim_as<Kind, Budgeted, true>(h, request, fence, reads_posted_ + 1);
		/* interval requests since the last signaled one, this one
		 * included (head never wraps): signal_at_, kept so that an
		 * unsignaled request compares head with one word. */
		bool signaled = request.signal || h >= signal_at_.load(std::memory_order_relaxed);
		const uint32_t reads = reads_posted_ + (is_read ? 1 : 0);
		if constexpr (is_read)
			signaled = signaled || reads - reads_at_signal_ >= read_every;
		if (signaled)
			return claim_as<Kind, Budgeted, true>(h, request, fence, reads);
		return claim_as<Kind, Budgeted, false>(h, request, fence, reads);
	}

	/*
	 * Posting failed from `unposted` on (the work request ibv_post_send
	 * named, and those chained behind it, all claimed last): their slots
	 * go back, and every counter claim moved is as it was before the
	 * first of them was claimed, so that the next claim decides as if
	 * they had never been: head, the shared budget, the reads posted,
	 * the last signaled request and the reads since (found again among
	 * the requests still outstanding, whose records say which were
	 * signaled), and the fence mark. One exception, written down: where
	 * two or more of them moved the fence mark, the mark before the first
	 * is no longer known, and the next send or write is fenced (a fence
	 * too many costs time, never order). The poster's, under its lock.
	 */
	void unclaim(const ibv_send_wr *unposted) noexcept; /* nd_wq.cpp */

	/* What the poster's counters decide, for the tests: the undo test
	 * compares a queue that unclaimed with one that never claimed. */
	struct PosterView {
		uint64_t head, signaled_head;
		uint32_t unsignaled, reads_posted, unsignaled_reads;
		bool reads_unfenced;
		bool operator==(const PosterView &) const = default;
	};
	PosterView poster_view() const noexcept
	{
		const uint64_t h = posted();
		const uint64_t sh = signaled_head();
		return {h, sh, static_cast<uint32_t>(h - sh), reads_posted_, reads_posted_ - reads_at_signal_,
			reads_posted_ != reads_fenced_};
	}

private:
	/* claim_at's two copies; `reads` counts this request if a read. */
	template <SendKind Kind, bool Budgeted, bool Signaled>
	[[gnu::always_inline]] Claimed claim_as(uint64_t h, const SendClaim &request, uint32_t fence,
						 uint32_t reads) noexcept
	{
		constexpr bool is_read = Kind == SendKind::read;
		constexpr uint32_t signal_flag = Signaled ? IBV_SEND_SIGNALED : 0;
		OpRecord &record = records_[h & mask_];
		record.seq_and_report = static_cast<uint32_t>(h) << 8 | signal_flag | (is_read ? OpRecord::kReadBit : 0u) |
					(request.report ? 1u : 0u);
		record.context = request.context;
		record.flags = request.flags;
		record.len = request.len;
		record.read_mark = reads;
		uint32_t send_flags = signal_flag;
		/* Only the application's sends and writes wait for reads: an
		 * internal write must not mark the reads fenced for them. */
		if constexpr (Kind == SendKind::send_or_write)
			send_flags |= fence_after_reads(fence, record);
		if constexpr (is_read)
			reads_posted_ = reads;
		if constexpr (Signaled)
			reads_at_signal_ = reads;
		/* Published before posting: the completion may be reaped at once. */
		if constexpr (Budgeted)
			count_budget();
		if constexpr (Signaled)
			signal_at_.store(h + signal_interval_.load(std::memory_order_relaxed), std::memory_order_relaxed);
		publish(h);
		return {&record, send_flags};
	}
	/* The flag a send or RDMA write needs (`fence`: IBV_SEND_FENCE where
	 * the application asked for FI_ORDER_WAR or FI_ORDER_SAR, else 0):
	 * `fence` when reads were posted since the last fenced request, which
	 * then waits at the adapter until they have their data; requests
	 * behind it are ordered behind it. Nothing when no read came between. */
	uint32_t fence_after_reads(uint32_t fence, OpRecord &record) noexcept
	{
		/* An endpoint without FI_ORDER_WAR or FI_ORDER_SAR fences
		 * nothing, ever (fence is fixed at fi_enable): no mark to keep. */
		if (__builtin_expect(fence == 0 || reads_posted_ == reads_fenced_, 1))
			return 0;
		reads_fenced_before_ = reads_fenced_;
		reads_fenced_ = reads_posted_;
		record.seq_and_report |= OpRecord::kMovedFenceBit;
		return fence;
	}

	/* head just after the last signaled request: a request that will
	 * complete is outstanding while this is above tail (the stall watch
	 * reads it), and the requests claimed since are head minus this. */
	uint64_t signaled_head() const noexcept
	{
		return signal_at_.load(std::memory_order_relaxed) - signal_interval_.load(std::memory_order_relaxed) + 1;
	}
	void set_signaled_head(uint64_t end) noexcept
	{
		signal_at_.store(end + signal_interval_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
	}

	/* The head from which the next request is signaled: the last signaled
	 * request's end (signaled_head) + signal_interval_ - 1, kept as such
	 * so that an unsignaled request compares head with one word. Atomic
	 * for the stall watch (last_signaled_end), which reads the two without
	 * the poster: a look that meets a new interval (fi_enable, a grown
	 * ring) may take the last signaled end to be off by the difference,
	 * for that look (one a second; a stall is told after many). */
	std::atomic<uint64_t> signal_at_{0};
	/* RDMA reads (and atomics) posted, wrapping: in flight is this minus
	 * reads_retired_. */
	uint32_t reads_posted_ = 0;
	/* reads_posted_ when the last signaled request was claimed: the reads
	 * unsignaled since are reads_posted_ minus this. */
	uint32_t reads_at_signal_ = 0;
	/* reads_posted_ when a send or write was last fenced after reads, and
	 * what it was before (for unclaim). */
	uint32_t reads_fenced_ = 0;
	uint32_t reads_fenced_before_ = 0;
};

/*
 * An endpoint's receive queue: the ring, filled in posting order. Its
 * posting protocol: the next slot's record filled (OpRecord::fill_recv)
 * and published, before the receive is posted (or kept for the queue
 * pair's INIT); unclaim_recv gives it back when that fails. The ring has
 * room. claim_recv_at takes head as the poster loaded it (the receive
 * fast path): an atomic load is never merged with another.
 */
class ReceiveQueue final : public WorkQueue {
public:
	explicit ReceiveQueue(uint32_t wanted_depth, uint32_t initial = 0)
		: WorkQueue(QueueKind::recv, wanted_depth, 0, initial)
	{
	}

	[[gnu::always_inline]] OpRecord &claim_recv_at(uint64_t h, void *context, uint32_t flags, uint32_t len,
						       bool report) noexcept
	{
		OpRecord &record = records_[h & mask_];
		record.set_seq(h);
		record.fill_recv(context, flags, len, report);
		publish(h);
		return record;
	}
	OpRecord &claim_recv(void *context, uint32_t flags, uint32_t len, bool report) noexcept
	{
		return claim_recv_at(posted(), context, flags, len, report);
	}
	/* Gives back the `n` receives claimed last. */
	void unclaim_recv(uint64_t n) noexcept { give_back(n); }
	/* A framed endpoint's receive state, before any buffer is posted;
	 * throws std::bad_alloc (extras). */
	void set_framing(std::unique_ptr<PlacedReceiver> f)
	{
		extras().framing = std::move(f);
		choose_retire_path();
	}
};

/*
 * A shared receive context's records: it completes out of order, so its
 * slots are a pool of free ones instead of a ring's order, taken and given
 * back under the context's lock (nd_srx.cpp; retire() gives a slot back).
 */
class SharedReceivePool final : public WorkQueue {
public:
	explicit SharedReceivePool(uint32_t wanted_depth); /* nd_wq.cpp */

	/* Takes a free slot for a receive (fill_recv'd); null when none is
	 * free. Under the pool's lock. */
	OpRecord *claim_slot(void *context, uint32_t flags, uint32_t len, bool report) noexcept
	{
		std::vector<uint32_t> &free = extras_->free_slots;
		if (free.empty())
			return nullptr;
		OpRecord &record = records_[free.back()];
		free.pop_back();
		record.fill_recv(context, flags, len, report);
		return &record;
	}
	/* Gives back a slot claim_slot took whose receive was not posted. */
	void unclaim_slot(const OpRecord &record) noexcept { extras_->free_slots.push_back(slot_of(record)); }
	size_t free_slots() const noexcept { return extras_->free_slots.size(); }
	/* The context's lock, which retire() takes to give a slot back (set
	 * by the context before any receive is posted). */
	void set_pool_lock(OptionalLock *lock) noexcept { extras_->pool_lock = lock; }
};

/* 168 + malloc's 8-byte header: one 176-byte block; a field more is a 192-byte
 * block, two per endpoint (docs/scale.md, memory per connection). */
static_assert(sizeof(SendQueue) <= 168, "a send queue stays one 176-byte malloc block");
static_assert(sizeof(ReceiveQueue) <= 168, "a receive queue stays one 176-byte malloc block");

} // namespace nd

#endif /* ND_WQ_H */
