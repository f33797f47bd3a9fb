/*
 * nd_cq.h: completion queues (fid_cq) on verbs CQs.
 *
 * Reading polls the verbs CQ in batches and writes each completion straight
 * into the application's buffer in the CQ's format (one ops table per
 * format, chosen at open, so the loop has no format switch). A work
 * completion leads to its OpRecord (nd_wq.h), which says whose it is and
 * what to report. Completions found by someone other than fi_cq_read (a
 * counter's progress, fi_trywait, an endpoint's close) wait in a software
 * queue, and errors in an error queue that fi_cq_readerr drains: fi_cq_read
 * returns -FI_EAVAIL once no success entry is ahead of them.
 *
 * No completion is ever lost: the verbs CQ is resized, before a queue pair
 * can post to it, to hold every request that may be outstanding on the
 * queues that complete into it (fi_enable reserves, fi_close releases).
 * Where the device resizes CQs, a queue reserves what its ring holds, and
 * ring and reservation grow together when it fills (grow): a CQ of
 * thousands of endpoints is sized by what they have in flight, not by
 * their depths.
 * Where that would pass the device's largest CQ, the CQ chains another
 * verbs CQ (on the same completion channel, so one fd still wakes its
 * waiters) and the new queue pair completes there: one libfabric CQ serves
 * any number of endpoints, as ofi_rxm and MPI use it; only an endpoint
 * whose own queues exceed the device's CQ size is refused (-FI_ENOSPC).
 * Reads poll the verbs CQs in turn, starting where the last read stopped.
 *
 * Waiting (FI_WAIT_FD, FI_WAIT_UNSPEC, FI_WAIT_SET): a completion channel and an eventfd
 * (fi_cq_signal) inside one epoll set (a WaitFd); FI_GETWAIT returns the epoll fd and
 * fi_trywait arms the CQ. All three, and the verbs CQs, are made on first
 * use (make_wait_objects, reserve): a CQ opened and never used costs no
 * descriptor and no device memory.
 *
 * An endpoint with no CQ bound for a direction still needs a verbs CQ: it
 * gets an internal CompletionQueue whose entries only feed counters.
 */
#ifndef ND_CQ_H
#define ND_CQ_H

#include "nd.h"
#include "nd_verbs.h"
#include "nd_wait_fd.h"
#include "nd_wq.h"

#include <rdma/fi_eq.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

namespace nd {

struct Domain;

using UniqueCompChannel = VerbsHandle<ibv_comp_channel, ibv_destroy_comp_channel>;

/* What a completion reports: fi_cq_tagged_entry holds every field of the
 * context, msg, data and tagged formats (each a prefix of the next). */
using CqEntry = fi_cq_tagged_entry;

/* No default member initializer: the rings below leave their storage
 * untouched until used, and every error is built as `CqError error{}`. */
struct CqError {
	fi_cq_err_entry entry;
};

/*
 * A ring's slots, uninitialized. From kMappedFrom on they are an anonymous
 * mapping of their own rather than malloc's: a ring doubles as endpoints
 * reserve, and each smaller ring it left behind was a hole in the heap
 * that the endpoints' own allocations then filled and touched (resident
 * heap per connection, docs/scale.md). A mapping goes back to the kernel
 * whole when the ring grows or closes.
 */
template <typename T>
class RingStorage {
public:
	static constexpr size_t kMappedFrom = 64 * 1024;

	RingStorage() noexcept = default;
	/* Throws std::bad_alloc. */
	explicit RingStorage(size_t count) : bytes_(count * sizeof(T))
	{
		if (bytes_ < kMappedFrom) {
			slots_ = static_cast<T *>(::operator new(bytes_));
			return;
		}
		void *mapped = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (mapped == MAP_FAILED)
			throw std::bad_alloc();
		slots_ = static_cast<T *>(mapped);
	}
	RingStorage(RingStorage &&other) noexcept
		: slots_(std::exchange(other.slots_, nullptr)), bytes_(std::exchange(other.bytes_, 0))
	{
	}
	RingStorage &operator=(RingStorage &&other) noexcept
	{
		if (this != &other) {
			release();
			slots_ = std::exchange(other.slots_, nullptr);
			bytes_ = std::exchange(other.bytes_, 0);
		}
		return *this;
	}
	~RingStorage() { release(); }
	T &operator[](size_t i) noexcept { return slots_[i]; }
	bool mapped() const noexcept { return bytes_ >= kMappedFrom; }

private:
	void release() noexcept
	{
		if (!slots_)
			return;
		if (mapped())
			munmap(slots_, bytes_);
		else
			::operator delete(slots_);
		slots_ = nullptr;
	}
	T *slots_ = nullptr;
	size_t bytes_ = 0;
};

/*
 * A FIFO whose storage is allocated ahead of use: when the CQ opens and
 * when it grows (fi_enable's reservation), where a failure is reported as
 * -FI_ENOMEM. Completion handling, reached from noexcept entry points
 * (fi_cq_read, and fi_send through Endpoint::free_send_slots), never allocates through it.
 *
 * A CQ shared by many endpoints reserves room for every request they may
 * have outstanding, yet rarely holds more than a few. So the storage is
 * not initialized, a large one is a mapping of its own (RingStorage: the
 * kernel backs it with pages only where it is written), and an emptied
 * ring starts again at its first slot: the memory a process touches
 * follows the entries queued at once, not the reservation.
 */
template <typename T>
class CompletionRing {
	static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_default_constructible_v<T>,
		      "slots are left uninitialized until written");
public:
	bool empty() const noexcept { return count_ == 0; }
	size_t size() const noexcept { return count_; }
	size_t room() const noexcept { return capacity_ - count_; }
	T &front() noexcept { return slots_[head_]; }
	void pop_front() noexcept
	{
		head_ = head_ + 1 == capacity_ || count_ == 1 ? 0 : head_ + 1;
		count_--;
	}
	/* Needs room() > 0. */
	void push_back(const T &value) noexcept
	{
		size_t at = head_ + count_;
		slots_[at >= capacity_ ? at - capacity_ : at] = value;
		count_++;
	}
	/* Makes room for `capacity` entries in all, keeping those queued;
	 * throws std::bad_alloc. */
	void reserve(size_t capacity)
	{
		if (capacity <= capacity_)
			return;
		RingStorage<T> slots(capacity);
		for (size_t i = 0; i < count_; i++)
			slots[i] = slots_[(head_ + i) % capacity_];
		slots_ = std::move(slots);
		capacity_ = capacity;
		head_ = 0;
	}

	/* The storage is a mapping of its own (tests). */
	bool mapped() const noexcept { return slots_.mapped(); }

private:
	RingStorage<T> slots_;
	size_t capacity_ = 0;
	size_t head_ = 0;
	size_t count_ = 0;
};

/*
 * Where the transport never gives up on a silent peer (Domain::
 * stall_timeout_s: Soft-RoCE with retry count 7, iWARP), requests that
 * stand still end their connection. A CQ read that finds nothing looks,
 * at most once a second, at the send queues completing here: one with a
 * signaled request outstanding whose retired count has not moved for the
 * timeout, plus a second per MB outstanding, is flushed, its first
 * request reports FI_ETIMEDOUT, and its endpoint is told the peer is lost
 * (FI_SHUTDOWN through the EQ). A receiver that is late is not lost: it
 * answers each retry with a not-ready NAK. While the device keeps
 * receiving those (Domain::not_ready_naks_path), the wait is 30 times the
 * timeout (10 minutes at 20 s), as ofi_rxm without its flow control
 * expects late receivers waited for; a peer that is gone sends none. Only
 * an empty read looks: a completion still unread means the peer answered.
 * Under the CQ's lock.
 */
struct StallWatch {
	static constexpr uint32_t kEmptyReadsPerLook = 64;	/* then a clock read */
	/* 1 MB/s: between two Soft-RoCE guests RDMA moved 1.7 to 7.6 MiB/s,
	 * and two transfers share the wire (MPICH's reduce, across nodes). */
	static constexpr uint64_t kBytesPerMs = 1000;
	static constexpr int kNotReadyTimeouts = 30;		/* the wait while NAKs come */
	/* A NAK within this long before a look: the receiver is answering. */
	static constexpr std::chrono::seconds kNakQuiet{2};
	struct Entry {
		SendQueue *queue;
		uint64_t tail;			/* retired when last seen moving */
		std::chrono::steady_clock::time_point since;
		int timeout_s;
		bool told;			/* the endpoint was told */
	};
	/* The device's count of not-ready NAKs as last read, and when it was
	 * last seen to change. */
	struct NakCount {
		bool known = false;
		uint64_t value = 0;
		std::chrono::steady_clock::time_point changed{};

		/* Notes a reading at `now`; whether a NAK came within
		 * kNakQuiet. The first reading (or one after the watch last read
		 * long ago) gives the benefit of the doubt: a change since is
		 * taken as now. */
		bool coming(uint64_t reading, std::chrono::steady_clock::time_point now) noexcept
		{
			if (!known || reading != value) {
				known = true;
				value = reading;
				changed = now;
			}
			return now - changed < kNakQuiet;
		}
	};
	/* Whether a queue that has stood still `still` with `bytes`
	 * outstanding is given up: past the timeout (30 of them while
	 * `naks_coming`) and the allowance for its bytes at 1 MB/s. */
	static bool lost(std::chrono::steady_clock::duration still, int timeout_s, uint64_t bytes,
			 bool naks_coming) noexcept
	{
		const int64_t wait_s = static_cast<int64_t>(timeout_s) * (naks_coming ? kNotReadyTimeouts : 1);
		return still >= std::chrono::seconds(wait_s) + std::chrono::milliseconds(bytes / kBytesPerMs);
	}
	std::vector<Entry> queues;
	std::atomic<size_t> count{0};		/* queues.size(), for sread */
	uint32_t empty_reads = 0;
	std::chrono::steady_clock::time_point last_look{};
	NakCount naks;
};

/* One verbs CQ of a CompletionQueue, and what was reserved on it. */
struct VerbsCqSlot {
	UniqueCq cq;
	int capacity = 0;			/* entries it holds */
	int reserved = 0;			/* requests that may complete into it now */
	int promised = 0;			/* what they may grow to (their depths) */
	int floor = 0;				/* what it was made with: it never shrinks below */
};

/*
 * Whether a verbs CQ that can be resized takes one more endpoint, which
 * reserves `count` entries now and whose rings may grow to `promise`: while
 * every ring there can still grow to its depth, or else while half of the
 * device's largest CQ is left for the rings there to grow into. A queue
 * pair completes into one verbs CQ for its life, and a read that finds
 * nothing polls every verbs CQ: by depths alone, a Soft-RoCE CQ holds a few
 * dozen endpoints at the default depth, and an empty fi_cq_read at
 * thousands of connections polled hundreds of verbs CQs (docs/scale.md).
 * Past the half, a ring that finds its verbs CQ full stays
 * at its size and its post says -FI_EAGAIN until completions are read,
 * as at its depth; no completion is ever without its entry.
 */
inline bool takes_endpoint(const VerbsCqSlot &slot, int count, int promise, int max_cqe) noexcept
{
	return slot.promised + promise <= max_cqe || slot.reserved + count <= max_cqe / 2;
}

/*
 * The CQ's state is private: other objects reach it through the operations
 * below (reserve and grow for an endpoint's queues, the Sink, complete_now
 * and report_canceled for entries), so that its lock, its rings and its
 * verbs CQs have one owner, which the compiler holds them to.
 */
class CompletionQueue {
public:
	fid_cq &fid() noexcept { return cq; }
	Domain *owning_domain() const noexcept { return domain; }
	/* An endpoint's own; no application reads it. */
	bool is_internal() const noexcept { return internal; }
	/* Endpoints and poll sets bound to it, which keep it from closing. */
	ChildCount &bindings() noexcept { return bound; }

private:
	/* The host unit tests' view of the rings (unit_completion.cpp). */
	friend struct CompletionQueueTest;
	/* The counter's waits on the CQs it counts (nd.h), and the close of
	 * any object endpoints bind to: this file's other half. */
	friend int cq_channel_fd(CompletionQueue &cq) noexcept;
	friend int cq_arm(CompletionQueue &cq) noexcept;
	template <typename T>
	friend int close_bound_domain_child(T *object, fi_log_subsys subsys, const char *what);

	fid_cq cq;				/* first: from_fid<CompletionQueue> */
	Domain *domain;
	fi_cq_format format;
	bool internal;				/* an endpoint's own; no application reads it */
	bool waitable;
	int vector;				/* completion vector of its verbs CQs */
	UniqueCompChannel channel;
	/* [0] made for the first endpoint (reserve) at the size asked, up
	 * to 8,192 entries (or as large as that endpoint needs, if more),
	 * doubling as more is reserved and never below its first size;
	 * another chained when the depths of the endpoints on the last would
	 * pass the device's largest CQ. After channel: destroyed first. A chained one goes when no endpoint completes there
	 * any more (unreserve). */
	std::vector<VerbsCqSlot> slots;
	int requested_size;			/* fi_cq_attr::size, within the device's (logged) */
	size_t next_slot = 0;			/* where the next read starts */
	/* The one verbs CQ while there is exactly one (read's fast path),
	 * else null: kept by slots_changed, under the lock. */
	ibv_cq *only_cq = nullptr;
	void slots_changed() noexcept { only_cq = slots.size() == 1 ? slots.front().cq.get() : nullptr; }
	bool resizable = true;			/* false once ibv_resize_cq is refused (siw) */
	int capacity;				/* entries all verbs CQs hold */
	int reserved;				/* requests that may complete into them */
	WaitFd wait_fd;				/* waitable: channel, fi_cq_signal; FI_WAIT_SET joins it */
	/* channel and wait_fd, made by make_wait_objects, and never
	 * cleared while the CQ is open. */
	Once wait_objects;
	/* The lock and the two rings are the CQ's alone: other objects queue
	 * entries through the Sink below, complete_now and report_canceled
	 * (layering.sh checks that no other file names them). */
	OptionalLock lock{LockRank::cq};
	/* Found but not yet read, sized when the CQ opens and at each
	 * fi_enable (size_rings), never while completing. `ready` holds
	 * `capacity` entries, and a read polls only while it has room; one
	 * completion makes at most one success. `errors` holds those unread
	 * at the last fi_enable plus twice `capacity`: one completion makes
	 * at most one error (the end of a framed endpoint's connection
	 * cancels the receives waiting there, at most the receive queue's
	 * size, reserved here), an endpoint posts nothing more once a request
	 * of its failed or its link went down, so each endpoint adds at most
	 * what it has outstanding, and what closed endpoints left
	 * outstanding was reserved when they posted it. */
	CompletionRing<CqEntry> ready;
	CompletionRing<CqError> errors;
	/* Queues of endpoints closed while requests were still outstanding:
	 * their records must outlive any completion still to come. */
	std::vector<AnyQueue> orphans;
	ChildCount bound;			/* endpoints completing here */
	StallWatch stall_watch;			/* under lock */

public:
	/* Opens an application CQ (fi_cq_open) or an internal one. */
	static int open(Domain *domain, const fi_cq_attr *attr, void *context, bool internal,
			CompletionQueue **out);
	int close();

	/* Keeps a closed endpoint's queue whose requests are still
	 * outstanding, until the CQ closes. */
	void adopt_orphan(AnyQueue queue) noexcept;

private:
	/* Under lock: halves a verbs CQ that endpoints closing left mostly
	 * unreserved. */
	void shrink(VerbsCqSlot &slot) noexcept;
	/* Under lock: the slot of verbs CQ `where`, or null. */
	VerbsCqSlot *slot_of(ibv_cq *where) noexcept;
	/* Under lock: resizes the slot's verbs CQ to hold `needed` entries,
	 * at least doubling it, within the device's largest (the size asked
	 * in *grown); returns ibv_resize_cq's code. */
	int double_to(VerbsCqSlot &slot, int needed, int *grown) noexcept;
	/* Under lock: resizes the slot's verbs CQ (doubling) and the rings so
	 * that `more` entries more can be reserved there (for a queue that
	 * becomes `becomes` requests deep, for the log); -FI_EAGAIN, logged,
	 * past the device's largest CQ or short of memory. */
	int grow_to_reserve(VerbsCqSlot &slot, int more, uint32_t becomes) noexcept;

public:

	/* Makes room for `count` more outstanding requests (fi_enable), on a
	 * verbs CQ where they may grow to `promise` (the queues' depths), and
	 * says which (*where) they must complete on. */
	int reserve(int count, int promise, ibv_cq **where);
	void unreserve(int count, int promise, ibv_cq *where) noexcept;
	/* A queue completing into `where` that filled grows (WorkQueue::
	 * grow), its reservation with it: the verbs CQ is resized when it
	 * must hold more. Adds how many entries more were reserved to
	 * *reserved_by_endpoint (what the endpoint gives back at close,
	 * under the CQ's lock, since both its queues may grow at once) and
	 * returns it, or -FI_EAGAIN (logged) when the queue is at its depth,
	 * the verbs CQ at the device's largest, or memory short. The
	 * poster's, under its lock; takes the CQ's. */
	int grow(WorkQueue &queue, ibv_cq *where, uint32_t *reserved_by_endpoint) noexcept;
	/* One entry more on `where`, for the request that drains a closing
	 * endpoint's send queue (Endpoint::post_drain_marker): false where
	 * the verbs CQ is full and cannot grow. Adds it to
	 * *reserved_by_endpoint. Takes the lock. */
	bool reserve_one(ibv_cq *where, uint32_t *reserved_by_endpoint) noexcept;
	/* A connected endpoint's send queue joins the stall watch (fi_enable
	 * where Domain::stall_timeout_s is set), and leaves it before its
	 * queue goes (fi_close). Take the lock. */
	void watch_stalls(SendQueue *queue, int timeout_s);
	void unwatch_stalls(const SendQueue *queue) noexcept;
	/* An FI_ECANCELED error entry for a request nd held and cancelled
	 * before the adapter saw it (fi_cancel); false when the error ring
	 * is full (the application leaves its errors unread). */
	bool report_canceled(void *context, uint64_t flags);

	/* What completes requests sees of the CQ, under its lock: the only
	 * way entries are queued from outside nd_cq.cpp. */
	class Sink final : public CompletionSink {
	public:
		explicit Sink(CompletionQueue &cq) noexcept : cq_(cq) {}
		bool has_room() const noexcept override;
		bool success(const CqEntry &entry) noexcept override;
		bool error(const fi_cq_err_entry &entry) noexcept override;
		bool queued() const noexcept { return queued_; }

	private:
		CompletionQueue &cq_;
		bool queued_ = false;
	};
	/* Runs fn(Sink &) under the CQ's lock, for a request that completes
	 * as the application posts it (a framed receive meeting a message
	 * that waits), then wakes a waiter if fn queued an entry. Returns
	 * fn's result. */
	template <typename Fn>
	ssize_t complete_now(Fn &&fn)
	{
		return complete_now_with(
			[](void *arg, CompletionSink &sink) noexcept -> ssize_t {
				return (*static_cast<std::remove_reference_t<Fn> *>(arg))(sink);
			},
			&fn);
	}
	ssize_t complete_now_with(ssize_t (*fn)(void *arg, CompletionSink &sink) noexcept, void *arg);

	/* Polls the verbs CQ into the software queues (counters, trywait,
	 * close). Takes the lock. Returns the number of entries it queued
	 * (completions that only feed counters queue none). */
	int progress();
	/* Progresses, then says whether a completion or an error entry waits
	 * to be read (fi_poll). */
	bool pending();
	/* Polls until no record of `queue` is outstanding or `timeout_ms`
	 * passes; true when the queue drained. */
	bool drain(const WorkQueue &queue, int timeout_ms);
	/* After a synchronous flush (Domain::synchronous_flush): reads the
	 * verbs CQs to their end, then retires what of `queue` is left
	 * outstanding (SendQueue::retire_completed_unsignaled); true when
	 * nothing of it is outstanding now. False where the software queues
	 * had no room for all (what is left may yet complete). */
	bool retire_after_synchronous_flush(SendQueue &queue);

	ssize_t readerr(fi_cq_err_entry *buf, uint64_t flags);
	ssize_t sread(void *buf, size_t count, const void *cond, int timeout, bool with_src,
		      fi_addr_t *src_addr);
	int control(int command, void *arg);
	int trywait();
	int signal();

	/* Read path, instantiated per format (nd_cq.cpp). */
	template <fi_cq_format Format>
	ssize_t read(void *buf, size_t count);
	ssize_t read_any(void *buf, size_t count);

	~CompletionQueue();

private:
	/* Handles one work completion: retires its records (WorkQueue::
	 * retire) and returns true (with *out filled) when it is a success
	 * the application sees; errors, and what a framed endpoint delivers,
	 * go to the rings. Called under the lock; allocates nothing. */
	bool complete(ibv_wc &wc, CqEntry *out) noexcept;
	/* Queues an error entry; false when the ring is full (logged).
	 * Under lock. */
	bool push_error(const CqError &error) noexcept;
	/* Sizes the rings for `total` entries in all (above); throws
	 * std::bad_alloc. Under lock, or before the CQ is shared. */
	void size_rings(int total);
	/* true when it read every verbs CQ to its end; false when the
	 * software queues filled first. */
	bool progress_locked();
	/* StallWatch's look (at most once a second), from a read that found
	 * nothing or a wait that timed out. Under the lock. */
	void look_for_stalls() noexcept;
	/* Polls one verbs CQ into the application's buffer from index n. */
	template <fi_cq_format Format>
	size_t poll_into(ibv_cq *verbs, void *buf, size_t n, size_t count);
	/* One poll's work completions into the buffer from index n. */
	template <fi_cq_format Format>
	[[gnu::always_inline]] size_t complete_into(ibv_wc *wc, int got, void *buf, size_t n, size_t count);
	/* read()'s paths once its poll found something (nd_cq.cpp says which
	 * are inline). Under the lock. */
	template <fi_cq_format Format>
	[[gnu::always_inline]] ssize_t complete_polled(ibv_cq *verbs, ibv_wc *wc, int got, int want, void *buf,
						  size_t count);
	template <fi_cq_format Format>
	[[gnu::noinline]] ssize_t complete_many(ibv_cq *verbs, ibv_wc *wc, int got, int want, void *buf,
						size_t count);
	template <fi_cq_format Format>
	[[gnu::noinline]] ssize_t read_found(void *buf, size_t count);
	ssize_t nothing_read() noexcept;
	/* The completion channel and the wait fd of a waitable CQ, made on
	 * first use: a waiter (fi_cq_sread, fi_trywait, FI_GETWAIT,
	 * fi_cq_signal), a counter the CQ feeds, a wait set (at open), or
	 * the first verbs CQ, which completes on the channel. 0 or -FI_E*
	 * (logged, naming `call`); -FI_EINVAL for FI_WAIT_NONE. */
	int make_wait_objects(const char *call) noexcept;
	/* Arms every verbs CQ for the next completion. Returns 0 or an errno. */
	int arm_all() noexcept;
	/* A verbs CQ of `size` entries on the CQ's channel; null with errno. */
	ibv_cq *create_verbs_cq(int size) noexcept;
};

/* Maps a verbs work completion status to a libfabric error code
 * (positive, as fi_cq_err_entry.err carries it). */
int fi_error_of_wc_status(ibv_wc_status status) noexcept;


} // namespace nd

#endif /* ND_CQ_H */
