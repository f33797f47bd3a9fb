/*
 * nd_memlock.h: what the memory-lock limit lets a process register.
 *
 * A registration pins its pages, and the kernel counts every pinned page
 * (VmPin in /proc/self/status) against RLIMIT_MEMLOCK unless the process
 * has CAP_IPC_LOCK, as root has. Users of an RDMA cluster are not root, and
 * Debian's default limit is 8 MiB: a registration past it fails with
 * ENOMEM, which on its own names neither the limit nor the remedy. This
 * file reads the limit, sizes the registration cache within it, and says
 * in the log what a failed registration ran into.
 */
#ifndef ND_MEMLOCK_H
#define ND_MEMLOCK_H

#include <rdma/providers/fi_log.h>

#include <cstddef>
#include <string>

namespace nd {

struct MemlockLimit {
	/* false: unlimited, or the process may lock any amount (CAP_IPC_LOCK). */
	bool applies = false;
	/* The soft limit in bytes, when it applies. */
	size_t bytes = 0;
};

/* This process's limit, read now (getrlimit and /proc/self/status). */
MemlockLimit memlock_limit() noexcept;

/* The registration cache's byte limit under the memory-lock limit: at most
 * half of it, the other half left for the regions the application holds
 * outside the cache and nd's own buffers (receive credits, framing). */
size_t mr_cache_bytes_within(size_t wanted, MemlockLimit limit) noexcept;

/* Whether a registration that failed with `err` ran into the limit. */
bool hit_memlock_limit(int err, MemlockLimit limit) noexcept;

/* The log text for a registration of `length` bytes that ran into the
 * limit: the size asked, the limit, what was pinned already, the remedy. */
std::string memlock_advice(size_t length, MemlockLimit limit, size_t pinned);

/* Logs why a registration of `length` bytes (`what`: the call and its
 * arguments) failed with errno `err`: with the advice above when it ran
 * into the limit. */
void warn_registration_failed(fi_log_subsys subsys, const char *what, size_t length, int err) noexcept;

/* What a device's EAGAIN at creating an object (queue pair, CQ, region,
 * window) means, to follow strerror in a warning; "" for other errors. The
 * kernel counts a process's verbs objects against the device's limits and
 * the rdma cgroup's rdma.max, and says EAGAIN at either. */
const char *object_limit_note(int err) noexcept;

/* The pure parts of the reading above, for the unit tests. */
MemlockLimit memlock_limit_of(unsigned long long soft_limit, bool unlimited, bool cap_ipc_lock) noexcept;
/* Whether /proc/self/status's text grants CAP_IPC_LOCK (CapEff, bit 14). */
bool status_grants_ipc_lock(const char *status) noexcept;
/* A "Name:   N kB" field of /proc/self/status's text, in bytes (0: none). */
size_t status_kib_field(const char *status, const char *name) noexcept;

} // namespace nd

#endif
