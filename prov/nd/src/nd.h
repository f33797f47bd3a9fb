/*
 * nd.h: the private header of the `nd` provider.
 *
 * Model. Every libfabric object (fabric, domain, EQ, ...) is a C++ class with
 * standard layout whose first member is the libfabric fid structure, so the
 * C entry points recover it with nd::from_fid. Every C entry point is a
 * `static ... noexcept` function with the exact libfabric signature that
 * calls a member; nothing thrown ever crosses into libfabric (nd::guarded
 * turns an escaped exception into -FI_ENOMEM or -FI_EOTHER and logs it).
 *
 * Lifetimes follow libfabric's rules: a parent counts its live children and
 * refuses fi_close with -FI_EBUSY while any is open. Verbs and rdma_cm objects
 * are owned through RAII handles (nd_verbs.h), declared in the order that
 * makes destruction release them correctly.
 *
 * Locking. Every lock has a rank (LockRank below) and a thread takes locks
 * in increasing rank only; prov/nd/ARCHITECTURE.md ("Locks") says what each
 * guards. Debug builds check the order at every acquisition and abort
 * naming both locks, and assert_held() checks that a function's lock is
 * held. The data path takes no lock unless the domain's threading model
 * requires it (OptionalLock).
 */
#ifndef ND_H
#define ND_H

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/providers/fi_prov.h>
#include <rdma/providers/fi_log.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "nd_api.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <type_traits>
#include <utility>

/* The provider object: libfabric logs and looks up parameters through it. */
extern struct fi_provider nd_prov;

#define ND_PROV_VERSION FI_VERSION(0, 1)

#define ND_WARN(subsys, ...) FI_WARN(&nd_prov, subsys, __VA_ARGS__)
#define ND_INFO(subsys, ...) FI_INFO(&nd_prov, subsys, __VA_ARGS__)
#define ND_TRACE(subsys, ...) FI_TRACE(&nd_prov, subsys, __VA_ARGS__)

namespace nd {

/* The header in front of every message of an endpoint opened with
 * FI_TAGGED (nd_framing.h), in bytes. */
constexpr size_t kFrameHeaderSize = 24;

/* Logs an escaped exception where it is caught; defined in nd_log.cpp so
 * that the catch sites stay small. */
void log_escaped_exception(const char *where, const char *what) noexcept;

/*
 * Runs a provider function body and guarantees that no exception leaves it:
 * every C entry point that may allocate goes through here.
 */
template <typename Fn>
auto guarded(const char *where, Fn &&fn) noexcept -> decltype(fn())
{
	try {
		return fn();
	} catch (const std::bad_alloc &) {
		log_escaped_exception(where, "out of memory");
		return -FI_ENOMEM;
	} catch (const std::exception &e) {
		log_escaped_exception(where, e.what());
		return -FI_EOTHER;
	} catch (...) {
		log_escaped_exception(where, "unknown exception");
		return -FI_EOTHER;
	}
}

/*
 * Recovers the provider object from the libfabric fid embedded as its first
 * member. Only valid for standard-layout types; checked at compile time.
 */
template <typename T, typename Fid>
T *from_fid(Fid *fid) noexcept
{
#ifdef __clang__
	/* clang does not count libstdc++'s unique_ptr as standard-layout (the
	 * base classes of its tuple), so its build (the fuzz harnesses,
	 * util/nd-fuzz) checks only what offset 0 needs; gcc's builds, the
	 * provider's, keep the strict rule. */
	static_assert(!std::is_polymorphic_v<T>,
		      "from_fid needs the fid at offset 0: no vtable before it");
#else
	static_assert(std::is_standard_layout_v<T>,
		      "from_fid needs the fid at offset 0 of a standard-layout type");
#endif
	return reinterpret_cast<T *>(fid);
}

/* Counts the live children of a libfabric object (fi_close of the parent
 * fails with -FI_EBUSY while any is open). */
class ChildCount {
public:
	void acquire() noexcept { count_.fetch_add(1, std::memory_order_relaxed); }
	void release() noexcept { count_.fetch_sub(1, std::memory_order_acq_rel); }
	bool busy() const noexcept { return count_.load(std::memory_order_acquire) != 0; }
	int value() const noexcept { return count_.load(std::memory_order_acquire); }

private:
	std::atomic<int> count_{0};
};

/* Closes a domain object that endpoints bind to (CQ, counter, shared
 * receive context): -FI_EBUSY while an endpoint is bound; otherwise the
 * object is deleted and its domain has one child less. */
template <typename T>
int close_bound_domain_child(T *object, fi_log_subsys subsys, const char *what)
{
	if (object->bound.busy()) {
		ND_WARN(subsys, "fi_close(%s): %d endpoint(s) still bound\n", what, object->bound.value());
		return -FI_EBUSY;
	}
	auto *domain = object->domain;
	delete object;
	domain->children.release();
	return 0;
}

/*
 * The one lock order, outermost first: a thread holding a lock may block on
 * a lock of higher rank only (a try_lock, which cannot deadlock, may take
 * any). Two locks of one rank are never held at once except through
 * try_lock (two EQs' progress locks are taken with std::lock, whose second
 * acquisition is a try_lock). ARCHITECTURE.md's table gives each lock's
 * reason; lock_rank_name() prints them.
 */
enum class LockRank : uint8_t {
	wait_set = 1,		/* WaitSet::lock: members, while they are tried */
	poll_set,		/* PollSet::lock: members and what each has shown */
	eq_progress,		/* EventQueue::progress_lock_: CM dispatch, connection state */
	async_registry,		/* async::registry_lock: devices, watchers, queue pairs */
	counter_sources,	/* Counter::sources_lock: the CQs that feed a counter */
	endpoint_rx,		/* DataPath::rx.lock: the receive queue's poster */
	endpoint_tx,		/* DataPath::tx.lock: the send queue's poster, credits */
	cq,			/* CompletionQueue::lock: its rings, the queues' retiring side */
	shared_rx,		/* SharedRx::lock: the shared receive pool */
	multi_recv,		/* MultiRecv::lock: a multi-receive buffer's state */
	framing,		/* Framing::lock: posted receives, unexpected messages */
	eq,			/* EventQueue::lock_: entries, deferred work */
	requests,		/* request_lock: live connection requests and listeners */
	tuples,			/* tuple_lock: the address pairs connections hold */
	made_once,		/* Once's lock: a thing made once (every Once) */
	slab,			/* SlabPool::lock_: slabs and their free lists */
	memory_windows,		/* MemoryWindows::lock_: binding and invalidating */
	mr_cache,		/* RegistrationCache::lock_: the cached registrations */
	monitor_start,		/* the memory monitor's start_lock */
	adapters,		/* recent_adapters' lock: the adapter list */
	inline_probe,		/* probe_inline's cache */
	nic_registry,		/* nd_nic.cpp's registry of nic attributes */
	topology,		/* nd_topology.cpp: the hwloc topology */
	monitor,		/* the memory monitor's listeners, called under it */
	mr_cache_unmapped,	/* RegistrationCache::unmapped_lock_: ranges unmapped */
};
const char *lock_rank_name(LockRank rank) noexcept;

#ifndef NDEBUG
#define ND_LOCK_ORDER 1
#endif

/* The debug builds' record of the locks each thread holds (nd_lock.cpp).
 * acquired() aborts, naming both locks, when a blocking acquisition is not
 * above every lock the thread holds; released() when the lock is not held.
 * OptionalLock records its acquisitions whether or not it locks, so that
 * single-threaded runs check the order too. */
namespace lock_order {
#ifdef ND_LOCK_ORDER
void acquired(const void *lock, LockRank rank, bool blocking) noexcept;
void released(const void *lock) noexcept;
bool held(const void *lock) noexcept;
[[noreturn]] void not_held(const void *lock, LockRank rank, const char *where) noexcept;
#else
inline void acquired(const void *, LockRank, bool) noexcept {}
inline void released(const void *) noexcept {}
#endif
} // namespace lock_order

/* A std::mutex with its rank. */
class Mutex {
public:
	explicit Mutex(LockRank rank) noexcept : rank_(rank) {}
	void lock() noexcept
	{
		lock_order::acquired(this, rank_, true);
		mutex_.lock();
	}
	bool try_lock() noexcept
	{
		if (!mutex_.try_lock())
			return false;
		lock_order::acquired(this, rank_, false);
		return true;
	}
	void unlock() noexcept
	{
		lock_order::released(this);
		mutex_.unlock();
	}
	LockRank rank() const noexcept { return rank_; }

private:
	std::mutex mutex_;
	LockRank rank_;
};

/*
 * The one way a thing is made once, for every thread: the first caller
 * runs `make`, later callers wait for it and then find it made. A failed
 * make (non-zero) leaves it unmade and says why; the next caller tries
 * again. Once made, done() is true with acquire ordering, so what make
 * wrote is visible to whoever sees it. Every Once's lock has the one rank
 * made_once: a make never takes another Once's lock, nor any lock ranked
 * before it.
 */
class Once {
public:
	template <typename Make>
	int run(Make &&make)
	{
		if (done_.load(std::memory_order_acquire))
			return 0;
		std::lock_guard<Mutex> guard(lock_);
		if (done_.load(std::memory_order_relaxed))
			return 0;
		const int ret = make();
		if (ret == 0)
			done_.store(true, std::memory_order_release);
		return ret;
	}
	bool done() const noexcept { return done_.load(std::memory_order_acquire); }

private:
	std::atomic<bool> done_{false};
	Mutex lock_{LockRank::made_once};
};

/*
 * A mutex in one word (Drepper's "Futexes Are Tricky", mutex 3): 0 free,
 * 1 held, 2 held with waiters; only a contended lock or an unlock that
 * finds waiters enters the kernel. std::mutex is at least ten times its
 * size (asserted below), and an endpoint holds two: with thousands of
 * endpoints on one CQ that counted in the memory per connection
 * (docs/scale.md).
 */
class WordMutex {
public:
	void lock() noexcept
	{
		uint32_t expected = 0;
		if (__builtin_expect(state_.compare_exchange_strong(expected, 1, std::memory_order_acquire), 1))
			return;
		if (expected != 2)
			expected = state_.exchange(2, std::memory_order_acquire);
		while (expected != 0) {
			futex(FUTEX_WAIT_PRIVATE, 2);
			expected = state_.exchange(2, std::memory_order_acquire);
		}
	}
	bool try_lock() noexcept
	{
		uint32_t expected = 0;
		return state_.compare_exchange_strong(expected, 1, std::memory_order_acquire);
	}
	void unlock() noexcept
	{
		if (__builtin_expect(state_.fetch_sub(1, std::memory_order_release) != 1, 0)) {
			state_.store(0, std::memory_order_release);
			futex(FUTEX_WAKE_PRIVATE, 1);
		}
	}

private:
	void futex(int op, uint32_t value) noexcept
	{
		/* EAGAIN (the word changed) and EINTR both mean: look again. */
		syscall(SYS_futex, reinterpret_cast<uint32_t *>(&state_), op, value, nullptr, nullptr, 0);
	}
	std::atomic<uint32_t> state_{0};
	static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "the futex word is the atomic");
};
static_assert(sizeof(WordMutex) == sizeof(uint32_t) && sizeof(std::mutex) >= 10 * sizeof(WordMutex));

/* A mutex that locks only when the threading model needs it; chosen when
 * the object is opened, never per call. Its rank sits in the padding. */
class OptionalLock {
public:
	explicit OptionalLock(LockRank rank) noexcept : rank_(rank) {}
	void enable(bool on) noexcept { enabled_ = on; }
	bool enabled() const noexcept { return enabled_; }
	void lock() noexcept
	{
		lock_order::acquired(this, rank_, true);
		if (enabled_)
			mutex_.lock();
	}
	void unlock() noexcept
	{
		lock_order::released(this);
		if (enabled_)
			mutex_.unlock();
	}
	bool try_lock() noexcept
	{
		if (enabled_ && !mutex_.try_lock())
			return false;
		lock_order::acquired(this, rank_, false);
		return true;
	}
	LockRank rank() const noexcept { return rank_; }

private:
	WordMutex mutex_;
	bool enabled_ = false;
	LockRank rank_;
};
static_assert(sizeof(OptionalLock) == 8, "two words' worth: a lock per queue is cheap");

/* Debug builds: aborts, naming the lock, unless this thread holds it. For
 * the functions whose data a lock guards; nothing in release builds. */
template <typename Lock>
inline void assert_held([[maybe_unused]] const Lock &lock, [[maybe_unused]] const char *where) noexcept
{
#ifdef ND_LOCK_ORDER
	if (!lock_order::held(&lock))
		lock_order::not_held(&lock, lock.rank(), where);
#endif
}

/* Gives a container's storage back once it is empty: one that grew with
 * thousands of endpoints would otherwise stay, high in the heap, and keep
 * malloc from returning the memory below it when they all closed. */
template <typename Container>
void release_storage(Container &c) noexcept
{
	Container().swap(c);
}

/* An fi_info owned until released (fi_freeinfo otherwise). */
struct InfoDeleter {
	void operator()(fi_info *info) const noexcept { fi_freeinfo(info); }
};
using UniqueInfo = std::unique_ptr<fi_info, InfoDeleter>;

/* Converts a libfabric return value or an errno to a printable string. */
const char *strerror_fi(int ret) noexcept;

/* The provider's one errno -> -FI_E* map (for system, verbs and rdma_cm
 * calls); an errno it does not name becomes `otherwise`, the meaning the
 * caller's context gives a failure. */
int fi_error_of_errno(int err, int otherwise = -FI_EINVAL) noexcept;

/* A failed ibv_post_send/_recv/_srq_recv: ENOMEM means the queue is full,
 * which the application retries (-FI_EAGAIN); anything else is mapped. */
inline int fi_error_of_post(int rc) noexcept
{
	return rc == ENOMEM ? -FI_EAGAIN : fi_error_of_errno(rc);
}

/* Milliseconds left until `deadline`, 0 once it passed: the timeout of the
 * next wait in a loop that waits until a deadline (EQs, wait sets). */
inline int remaining_ms(std::chrono::steady_clock::time_point deadline) noexcept
{
	auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
		deadline - std::chrono::steady_clock::now());
	return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

/* fi_control(FI_GETWAIT / FI_GETWAITOBJ) of an object waitable through
 * `fd` (an epoll set; -1 when it has none) with wait object `obj`; any other
 * command is -FI_ENOSYS. Shared by EQs and CQs. */
int control_wait(fi_log_subsys subsys, const char *object, int command, void *arg, int fd,
		 fi_wait_obj obj);

/*
 * The provider's entry points that open objects, declared in one place, as
 * libfabric's own providers declare theirs in their private header: a
 * parent's ops table names its children's entry points without including
 * the children's headers. Each is a noexcept thunk into its object's file.
 */
int open_domain(fid_fabric *fabric, fi_info *info, fid_domain **domain, void *context) noexcept;
int open_passive_ep(fid_fabric *fabric, fi_info *info, fid_pep **pep, void *context) noexcept;
int open_endpoint(fid_domain *domain, fi_info *info, fid_ep **ep, void *context) noexcept;
int cq_open(fid_domain *domain, fi_cq_attr *attr, fid_cq **cq, void *context) noexcept;
int query_atomic(fid_domain *domain, fi_datatype datatype, fi_op op, fi_atomic_attr *attr,
		 uint64_t flags) noexcept;
int cntr_open(fid_domain *domain, fi_cntr_attr *attr, fid_cntr **cntr, void *context) noexcept;
int srx_open(fid_domain *domain, fi_rx_attr *attr, fid_ep **rx_ep, void *context) noexcept;
int stx_open(fid_domain *domain, fi_tx_attr *attr, fid_stx **stx, void *context) noexcept;
int poll_open(fid_domain *domain, fi_poll_attr *attr, fid_poll **pollset) noexcept;
int wait_open(fid_fabric *fabric, fi_wait_attr *attr, fid_wait **waitset) noexcept;
int mr_reg(fid *domain, const void *buf, size_t len, uint64_t access, uint64_t offset,
	   uint64_t requested_key, uint64_t flags, fid_mr **mr, void *context) noexcept;
int mr_regv(fid *domain, const iovec *iov, size_t count, uint64_t access, uint64_t offset,
	    uint64_t requested_key, uint64_t flags, fid_mr **mr, void *context) noexcept;
int mr_regattr(fid *domain, const fi_mr_attr *attr, uint64_t flags, fid_mr **mr) noexcept;
/* ofi_rxm's flow-control extension (nd_flow_ctrl.h), which the domain's
 * fi_open_ops hands out: the table, defined with the endpoint's. */
const void *flow_ctrl_ops() noexcept;
/* fi_eq_open, for a parent that counts its EQs in `parent` and whose
 * application asked for `api_version`. */
int eq_open(uint32_t api_version, ChildCount *parent, fi_eq_attr *attr, fid_eq **eq,
	    void *context) noexcept;
/* fi_trywait on one EQ, CQ or counter (the fabric's fi_trywait and wait
 * sets dispatch by class). */
int eq_trywait(fid *eq) noexcept;
int cq_trywait(fid *cq) noexcept;
int cntr_trywait(fid *cntr) noexcept;

/* A counter progresses the CQs its endpoints complete into without knowing
 * what a CQ holds: this polls `cq`'s device queue into its rings, under the
 * CQ's lock, and returns the number of entries it queued. */
class CompletionQueue;
int cq_progress(CompletionQueue &cq);
/* A counter with a wait object sleeps on the completion channels of the
 * CQs that feed it: the channel's fd (-1 when the CQ has none), and arming
 * (acknowledge the channel's events, request the next one). */
int cq_channel_fd(CompletionQueue &cq) noexcept;
int cq_arm(CompletionQueue &cq) noexcept;

} // namespace nd

#endif /* ND_H */
