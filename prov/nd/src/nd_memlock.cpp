/* nd_memlock.cpp: the memory-lock limit (see nd_memlock.h). */
#include "nd_memlock.h"

#include "nd.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace nd {

namespace {

constexpr int kCapIpcLock = 14; /* linux/capability.h */

/* /proc/self/status, NUL-terminated, in `buf`; empty when unreadable (no
 * capability and nothing pinned is then seen). */
void read_status(char *buf, size_t size) noexcept
{
	buf[0] = '\0';
	FILE *file = std::fopen("/proc/self/status", "re");
	if (!file)
		return;
	buf[std::fread(buf, 1, size - 1, file)] = '\0';
	std::fclose(file);
}

/* The limit, with the status text `status` saying whether CAP_IPC_LOCK
 * lifts it. */
MemlockLimit limit_with_status(const char *status) noexcept
{
	rlimit rl{};
	if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0)
		return MemlockLimit{};
	return memlock_limit_of(rl.rlim_cur, rl.rlim_cur == RLIM_INFINITY, status_grants_ipc_lock(status));
}

/* The text after "\nName:" (or at the start), or nullptr. */
const char *field_of(const char *status, const char *name) noexcept
{
	const size_t length = std::strlen(name);
	for (const char *line = status; line && *line;) {
		if (std::strncmp(line, name, length) == 0 && line[length] == ':')
			return line + length + 1;
		line = std::strchr(line, '\n');
		if (line)
			line++;
	}
	return nullptr;
}

} // namespace

MemlockLimit memlock_limit_of(unsigned long long soft_limit, bool unlimited, bool cap_ipc_lock) noexcept
{
	MemlockLimit limit;
	if (unlimited || cap_ipc_lock)
		return limit;
	limit.applies = true;
	limit.bytes = static_cast<size_t>(soft_limit);
	return limit;
}

bool status_grants_ipc_lock(const char *status) noexcept
{
	const char *value = field_of(status, "CapEff");
	if (!value)
		return false;
	const unsigned long long caps = std::strtoull(value, nullptr, 16);
	return (caps >> kCapIpcLock) & 1;
}

size_t status_kib_field(const char *status, const char *name) noexcept
{
	const char *value = field_of(status, name);
	if (!value)
		return 0;
	return static_cast<size_t>(std::strtoull(value, nullptr, 10)) * 1024;
}

MemlockLimit memlock_limit() noexcept
{
	char status[4096];
	read_status(status, sizeof(status));
	return limit_with_status(status);
}

size_t mr_cache_bytes_within(size_t wanted, MemlockLimit limit) noexcept
{
	if (!limit.applies)
		return wanted;
	return wanted < limit.bytes / 2 ? wanted : limit.bytes / 2;
}

bool hit_memlock_limit(int err, MemlockLimit limit) noexcept
{
	/* ib_umem_get reports the limit as ENOMEM; some drivers pass EAGAIN. */
	return limit.applies && (err == ENOMEM || err == EAGAIN);
}

std::string memlock_advice(size_t length, MemlockLimit limit, size_t pinned)
{
	char text[512];
	std::snprintf(text, sizeof(text),
		      "%zu KiB more to pin, %zu KiB pinned already, and the memory-lock limit "
		      "(RLIMIT_MEMLOCK, `ulimit -l`) is %zu KiB; raise it (`ulimit -l`, memlock in "
		      "/etc/security/limits.conf, LimitMEMLOCK= for a systemd service) or register less",
		      (length + 1023) / 1024, pinned / 1024, limit.bytes / 1024);
	return text;
}

const char *object_limit_note(int err) noexcept
{
	return err == EAGAIN ? ": the device allows this process no more objects (its own limit, or the rdma "
			       "cgroup's rdma.max); close regions or endpoints, or raise rdma.max"
			     : "";
}

void warn_registration_failed(fi_log_subsys subsys, const char *what, size_t length, int err) noexcept
{
	/* One read of the status text for the capability and VmPin. */
	char status[4096];
	read_status(status, sizeof(status));
	const MemlockLimit limit = limit_with_status(status);
	if (!hit_memlock_limit(err, limit)) {
		ND_WARN(subsys, "%s: ibv_reg_mr: %s%s\n", what, std::strerror(err), object_limit_note(err));
		return;
	}
	try {
		ND_WARN(subsys, "%s: ibv_reg_mr: %s: %s\n", what, std::strerror(err),
			memlock_advice(length, limit, status_kib_field(status, "VmPin")).c_str());
	} catch (...) {
		ND_WARN(subsys, "%s: ibv_reg_mr: %s (the memory-lock limit, `ulimit -l`)\n", what,
			std::strerror(err));
	}
}

} // namespace nd
