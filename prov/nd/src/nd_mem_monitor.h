/*
 * nd_mem_monitor.h: tells registration caches when memory leaves the
 * address space.
 *
 * A cached registration pins the pages a virtual range had when it was
 * registered. Once that range is unmapped (munmap, free of a large block,
 * realloc that moves, madvise(MADV_DONTNEED), a shrinking brk, mremap), the
 * same addresses may be mapped again with other pages, and a cache that
 * returned the old registration would send stale bytes or land writes where
 * the application no longer looks. The monitor is UCX's libucm, the library
 * Open MPI's UCX layer uses for exactly this: it patches the process's
 * unmapping calls and reports each range before it goes (a hand-written hook
 * would have to follow every libc; userfaultfd must register every range and
 * blocks faults on it). Inside Open MPI, whose own patcher writes over
 * libucm's patches of munmap and the rest (or libucm's over Open MPI's,
 * whichever comes last), the monitor also takes Open MPI's release
 * callbacks, and libucm's sbrk hook, which Open MPI has no hook for. Either
 * way start() unmaps, remaps, madvises and mremaps pages of its own and
 * runs no cache unless each was reported. libucm is loaded at run time, so
 * that the provider needs it only when caching is on; where it cannot be
 * loaded, or cannot see every unmap (an AddressSanitizer or valgrind
 * allocator unmaps with raw system calls), start() says why and no cache is
 * made.
 *
 * Listeners are called from inside the unmapping call of any thread, with
 * the monitor's lock held: a listener only records the range (no locks of
 * its own that a registration holds while it allocates, no allocation).
 */
#ifndef ND_MEM_MONITOR_H
#define ND_MEM_MONITOR_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace nd {

struct UnmapListener {
	/* [start, start + length) is about to be unmapped. */
	virtual void on_unmap(uintptr_t start, size_t length) noexcept = 0;

protected:
	~UnmapListener() = default;
};

/* Starts the process-wide monitor once; true when it sees every unmap.
 * Otherwise *why says what is missing. */
bool mem_monitor_start(std::string *why);
/* Adds a listener (false: too many caches at once). */
bool mem_monitor_subscribe(UnmapListener *listener) noexcept;
void mem_monitor_unsubscribe(UnmapListener *listener) noexcept;
/* Removes the monitor's hook before the provider is unloaded (fi_fini). */
void mem_monitor_stop() noexcept;

} // namespace nd

#endif /* ND_MEM_MONITOR_H */
