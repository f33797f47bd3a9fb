/*
 * nd_lock.cpp: the lock ranks' names, and the debug builds' check of the
 * lock order (nd.h, LockRank): each thread keeps the locks it holds, and a
 * blocking acquisition that is not above all of them aborts with both
 * named, before it can deadlock with the thread that takes them the other
 * way round.
 */
#include "nd.h"

#include <cstdio>
#include <cstdlib>

namespace nd {

const char *lock_rank_name(LockRank rank) noexcept
{
	switch (rank) {
	case LockRank::wait_set: return "wait set (WaitSet::lock)";
	case LockRank::poll_set: return "poll set (PollSet::lock)";
	case LockRank::eq_progress: return "EQ progress (EventQueue::progress_lock_)";
	case LockRank::async_registry: return "async registry (async::registry_lock)";
	case LockRank::counter_sources: return "counter sources (Counter::sources_lock)";
	case LockRank::endpoint_rx: return "endpoint receive (DataPath::rx.lock)";
	case LockRank::endpoint_tx: return "endpoint send (DataPath::tx.lock)";
	case LockRank::cq: return "CQ (CompletionQueue::lock)";
	case LockRank::shared_rx: return "shared receive pool (SharedRx::lock)";
	case LockRank::multi_recv: return "multi-receive buffer (MultiRecv::lock)";
	case LockRank::framing: return "framing (Framing::lock)";
	case LockRank::eq: return "EQ entries (EventQueue::lock_)";
	case LockRank::requests: return "connection requests (request_lock)";
	case LockRank::tuples: return "address tuples (tuple_lock)";
	case LockRank::made_once: return "made once (Once)";
	case LockRank::slab: return "slab pool (SlabPool::lock_)";
	case LockRank::memory_windows: return "memory windows (MemoryWindows::lock_)";
	case LockRank::mr_cache: return "registration cache (RegistrationCache::lock_)";
	case LockRank::monitor_start: return "memory monitor start (start_lock)";
	case LockRank::adapters: return "adapter list (recent_adapters)";
	case LockRank::inline_probe: return "inline probe cache (probe_inline)";
	case LockRank::nic_registry: return "nic registry";
	case LockRank::topology: return "topology (topology_lock)";
	case LockRank::monitor: return "memory monitor listeners (Monitor::lock)";
	case LockRank::mr_cache_unmapped: return "unmapped ranges (RegistrationCache::unmapped_lock_)";
	}
	return "unknown lock";
}

#ifdef ND_LOCK_ORDER
namespace lock_order {
namespace {

struct Held {
	const void *lock;
	LockRank rank;
};
/* Deeper than any path nests (the deepest, a wait set's wait down to a
 * registration's unmap, is about eight). */
constexpr int kMaxHeld = 32;
thread_local Held held_locks[kMaxHeld];
thread_local int held_count = 0;

[[noreturn]] void fail(const char *what) noexcept
{
	fprintf(stderr, "nd: lock order: %s\n", what);
	fflush(stderr);
	abort();
}

} // namespace

void acquired(const void *lock, LockRank rank, bool blocking) noexcept
{
	if (blocking) {
		for (int i = 0; i < held_count; i++) {
			if (held_locks[i].rank < rank)
				continue;
			char line[512];
			snprintf(line, sizeof(line),
				 "taking %s (rank %d, at %p) while holding %s (rank %d, at %p): "
				 "locks are taken in increasing rank only (nd.h, LockRank)",
				 lock_rank_name(rank), static_cast<int>(rank), lock, lock_rank_name(held_locks[i].rank),
				 static_cast<int>(held_locks[i].rank), held_locks[i].lock);
			fail(line);
		}
	}
	if (held_count == kMaxHeld)
		fail("more locks held at once than the check keeps");
	held_locks[held_count++] = {lock, rank};
}

void released(const void *lock) noexcept
{
	for (int i = held_count - 1; i >= 0; i--) {
		if (held_locks[i].lock != lock)
			continue;
		for (int j = i + 1; j < held_count; j++)
			held_locks[j - 1] = held_locks[j];
		held_count--;
		return;
	}
	char line[160];
	snprintf(line, sizeof(line), "releasing a lock this thread does not hold (at %p)", lock);
	fail(line);
}

bool held(const void *lock) noexcept
{
	for (int i = 0; i < held_count; i++)
		if (held_locks[i].lock == lock)
			return true;
	return false;
}

void not_held(const void *lock, LockRank rank, const char *where) noexcept
{
	char line[320];
	snprintf(line, sizeof(line), "%s needs %s held (at %p)", where, lock_rank_name(rank), lock);
	fail(line);
}

} // namespace lock_order
#endif

} // namespace nd
