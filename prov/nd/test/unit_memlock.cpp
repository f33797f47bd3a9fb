/* unit_memlock.cpp: reading the memory-lock limit, sizing the registration
 * cache within it, and the advice a registration past it logs. */
#include <criterion/criterion.h>

#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "nd_memlock.h"

using nd::MemlockLimit;

namespace {

const char *const kUserStatus = "Name:\tfi_rma_bw\nVmLck:\t       0 kB\nVmPin:\t    6144 kB\n"
				"CapInh:\t0000000000000000\nCapEff:\t0000000000000000\n";
/* Root: every capability, CAP_IPC_LOCK (bit 14) among them. */
const char *const kRootStatus = "Name:\tfi_rma_bw\nVmPin:\t  131072 kB\nCapEff:\t000001ffffffffff\n";

} // namespace

Test(memlock, a_user_under_a_finite_limit_is_bound_by_it)
{
	const MemlockLimit limit = nd::memlock_limit_of(8u << 20, false, false);
	cr_assert(limit.applies);
	cr_assert_eq(limit.bytes, size_t{8} << 20);
}

Test(memlock, unlimited_or_cap_ipc_lock_is_not_bound)
{
	cr_assert_not(nd::memlock_limit_of(8u << 20, true, false).applies);
	cr_assert_not(nd::memlock_limit_of(8u << 20, false, true).applies);
}

Test(memlock, capabilities_are_read_from_the_status_text)
{
	cr_assert_not(nd::status_grants_ipc_lock(kUserStatus));
	cr_assert(nd::status_grants_ipc_lock(kRootStatus));
	cr_assert(nd::status_grants_ipc_lock("CapEff:\t0000000000004000\n"));
	cr_assert_not(nd::status_grants_ipc_lock("CapEff:\t0000000000002000\n"));
	cr_assert_not(nd::status_grants_ipc_lock("Name:\tx\n"));
	cr_assert_not(nd::status_grants_ipc_lock(""));
}

Test(memlock, pinned_bytes_are_read_from_vm_pin)
{
	cr_assert_eq(nd::status_kib_field(kUserStatus, "VmPin"), size_t{6144} * 1024);
	cr_assert_eq(nd::status_kib_field(kUserStatus, "VmLck"), 0u);
	cr_assert_eq(nd::status_kib_field(kUserStatus, "VmHWM"), 0u);
	/* A name that is a prefix of another field's does not match it. */
	cr_assert_eq(nd::status_kib_field("VmPinned:\t5 kB\n", "VmPin"), 0u);
}

Test(memlock, the_cache_keeps_to_half_the_limit)
{
	const MemlockLimit user = nd::memlock_limit_of(8u << 20, false, false);
	cr_assert_eq(nd::mr_cache_bytes_within(size_t{1} << 30, user), size_t{4} << 20);
	cr_assert_eq(nd::mr_cache_bytes_within(size_t{1} << 20, user), size_t{1} << 20);
	const MemlockLimit root = nd::memlock_limit_of(8u << 20, false, true);
	cr_assert_eq(nd::mr_cache_bytes_within(size_t{1} << 30, root), size_t{1} << 30);
}

Test(memlock, only_enomem_under_a_limit_is_the_limit)
{
	const MemlockLimit user = nd::memlock_limit_of(64u << 10, false, false);
	cr_assert(nd::hit_memlock_limit(ENOMEM, user));
	cr_assert(nd::hit_memlock_limit(EAGAIN, user));
	cr_assert_not(nd::hit_memlock_limit(EINVAL, user));
	cr_assert_not(nd::hit_memlock_limit(ENOMEM, MemlockLimit{}));
}

Test(memlock, the_advice_names_size_limit_pinned_and_remedy)
{
	const MemlockLimit user = nd::memlock_limit_of(8u << 20, false, false);
	const std::string advice = nd::memlock_advice(size_t{128} << 20, user, size_t{6} << 20);
	cr_assert(advice.find("131072 KiB more to pin") != std::string::npos, "%s", advice.c_str());
	cr_assert(advice.find("6144 KiB pinned already") != std::string::npos, "%s", advice.c_str());
	cr_assert(advice.find("is 8192 KiB") != std::string::npos, "%s", advice.c_str());
	cr_assert(advice.find("ulimit -l") != std::string::npos, "%s", advice.c_str());
	cr_assert(advice.find("limits.conf") != std::string::npos, "%s", advice.c_str());
}

Test(memlock, this_process_reads_its_own_limit)
{
	/* Lowered here (each test runs in a process of its own): a process
	 * without CAP_IPC_LOCK is then bound by 64 KiB; root is not bound. */
	rlimit rl{};
	cr_assert_eq(getrlimit(RLIMIT_MEMLOCK, &rl), 0);
	rl.rlim_cur = 64 << 10;
	cr_assert_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0, "%s", std::strerror(errno));
	char status[4096] = "";
	FILE *file = std::fopen("/proc/self/status", "r");
	cr_assert_not_null(file);
	status[std::fread(status, 1, sizeof(status) - 1, file)] = '\0';
	std::fclose(file);
	const MemlockLimit limit = nd::memlock_limit();
	if (nd::status_grants_ipc_lock(status)) {
		cr_assert_not(limit.applies);
	} else {
		cr_assert(limit.applies);
		cr_assert_eq(limit.bytes, size_t{64} << 10);
	}
}
