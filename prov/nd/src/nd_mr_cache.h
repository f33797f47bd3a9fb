/*
 * nd_mr_cache.h: a domain's registration cache.
 *
 * Open MPI over ofi_rxm registers the user's buffer for every large message
 * (rendezvous) and deregisters it after; applications reuse buffers, so the
 * same range is pinned and unpinned again and again, each time a system
 * call that on real adapters costs as much as sending the data. The cache
 * keeps a registration after fi_close of the region that made it, and a
 * later fi_mr_reg of a range it covers (with no more access than it grants)
 * gets it back without a system call.
 *
 * Entries are reference counted by the regions using them. Idle entries
 * (no region) are evicted least recently used first, to keep the cache
 * within FI_ND_MR_CACHE_MAX_COUNT entries and FI_ND_MR_CACHE_MAX_SIZE bytes;
 * a registration that does not fit while every entry is in use is made
 * uncached. A registration that fails for want of lockable memory evicts
 * every idle entry and is tried once more.
 *
 * Correctness under memory reuse rests on the monitor (nd_mem_monitor.h):
 * every unmapped range is recorded without taking the cache's lock (the
 * unmap may come from inside this cache's own allocation, or from any
 * thread), and every cache operation applies the recorded ranges before it
 * looks anything up. An entry that overlaps one is never returned again; it
 * is deregistered at once when idle, otherwise when its last region closes.
 */
#ifndef ND_MR_CACHE_H
#define ND_MR_CACHE_H

#include "nd.h"
#include "nd_mem_monitor.h"
#include "nd_verbs.h"

#include <rdma/fi_ext_nd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>

namespace nd {

/* Makes and removes registrations: with the domain's PD, or a test's fake.
 * Plain function pointers keep the domain that holds one standard-layout. */
struct Registrar {
	void *owner = nullptr;
	/* nullptr with errno set on failure. */
	ibv_mr *(*reg)(void *owner, void *addr, size_t length, int access) noexcept = nullptr;
	void (*dereg)(void *owner, ibv_mr *mr) noexcept = nullptr;
};

class RegistrationCache final : public UnmapListener {
public:
	struct Limits {
		size_t max_bytes;
		size_t max_count;
	};
	struct Entry {
		uintptr_t start;
		uintptr_t end;
		int access;			/* IBV_ACCESS_* it was registered with */
		ibv_mr *mr;
		int users = 0;
		bool indexed = false;		/* findable; false once stale or uncached */
		bool idle = false;
		std::list<Entry *>::iterator idle_at;
	};

	RegistrationCache(const Registrar &registrar, Limits limits) : registrar_(registrar), limits_(limits) {}
	RegistrationCache(const RegistrationCache &) = delete;
	RegistrationCache &operator=(const RegistrationCache &) = delete;
	/* Subscribes to the memory monitor (false: too many caches). */
	bool watch_unmaps() noexcept;
	/* Unsubscribes and deregisters every idle entry; no region may be
	 * open. */
	~RegistrationCache();

	/* The entry for [addr, addr + length) with at least `access`: a cached
	 * one, or a new registration. With `exact`, only an entry of exactly
	 * that range serves: a memory window bound on a larger one would let
	 * peers reach all of it on Soft-RoCE, which checks a window's requests
	 * against its region's bounds (nd_mw.h). nullptr with *err (positive
	 * errno) when registration fails. */
	Entry *acquire(const void *addr, size_t length, int access, int *err, bool exact = false);
	/* Gives the entry back; with reusable false it is never found again
	 * and is deregistered when its last region closes. */
	void release(Entry *entry, bool reusable = true) noexcept;
	/* Deregisters every idle entry; returns how many. */
	size_t evict_idle() noexcept;
	void on_unmap(uintptr_t start, size_t length) noexcept override;
	void stats(fi_nd_mr_cache_stats *out);

private:
	Entry *find_locked(uintptr_t start, uintptr_t end, int access, bool exact) noexcept;
	void apply_unmapped_locked() noexcept;
	void invalidate_locked(uintptr_t start, uintptr_t end) noexcept;
	void unindex_locked(Entry *entry) noexcept;
	void destroy_locked(Entry *entry) noexcept;
	bool make_room_locked(size_t length) noexcept;
	void evict_idle_locked(size_t keep) noexcept;
	Entry *register_locked(uintptr_t start, uintptr_t end, int access, int *err);

	const Registrar registrar_;
	const Limits limits_;
	bool watching_ = false;
	Mutex lock_{LockRank::mr_cache};
	std::multimap<uintptr_t, Entry *> index_;	/* by start */
	std::list<Entry *> idle_;			/* most recently used first */
	size_t longest_ = 0;				/* longest entry ever indexed */
	size_t indexed_bytes_ = 0;
	size_t in_use_ = 0;

	/* Ranges the monitor reported, not yet applied. A full array makes the
	 * next operation treat every entry as unmapped. */
	Mutex unmapped_lock_{LockRank::mr_cache_unmapped};
	std::array<std::pair<uintptr_t, uintptr_t>, 32> unmapped_{};
	size_t unmapped_count_ = 0;
	bool unmapped_overflow_ = false;

	uint64_t hits_ = 0, misses_ = 0, uncached_ = 0, evictions_ = 0, invalidations_ = 0;
};

} // namespace nd

#endif /* ND_MR_CACHE_H */
