/*
 * guest_mr.cpp: memory regions on a real device: registration's arguments
 * (suite mr), and the registration cache (suite mr_cache, below): what it
 * reuses, what an unmap makes it drop, and that a closed region is out of
 * its old key's reach. A peer writes through RDMA into the memory under
 * test, because a stale registration is seen only where the bytes land.
 * (The cache's bookkeeping on the host: unit_mr_cache.cpp.)
 */
#include <criterion/criterion.h>

#include "data_fixture.h"

#include <dlfcn.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <atomic>
#include <chrono>
#include <thread>

using namespace nd::test;

TestSuite(mr, .timeout = 120);

Test(mr, memory_registration_checks_arguments)
{
	DataFixture f;
	f.open();
	char buf[64];
	fid_mr *mr = nullptr;
	cr_assert_eq(fi_mr_reg(f.domain, nullptr, 64, 0, 0, 0, 0, &mr, nullptr), -FI_EINVAL);
	cr_assert_eq(fi_mr_reg(f.domain, buf, sizeof(buf), 1ULL << 60, 0, 0, 0, &mr, nullptr), -FI_EINVAL);
	cr_assert_eq(fi_mr_reg(f.domain, buf, sizeof(buf), 0, 0, 0, 0, nullptr, nullptr), -FI_EINVAL);
	iovec two[2] = {{buf, 32}, {buf + 32, 32}};
	cr_assert_eq(fi_mr_regv(f.domain, two, 2, 0, 0, 0, 0, &mr, nullptr), -FI_EINVAL,
		     "mr_iov_limit is 1");
	cr_assert_null(mr);
	cr_assert_eq(fi_mr_regv(f.domain, two, 1, FI_SEND, 0, 0, 0, &mr, nullptr), 0);
	cr_assert_neq(fi_mr_desc(mr), nullptr);
	cr_assert_eq(fi_close(&f.domain->fid), -FI_EBUSY, "a region is open");
	cr_assert_eq(fi_close(&mr->fid), 0);
	fi_mr_attr attr{};
	attr.mr_iov = two;
	attr.iov_count = 1;
	attr.access = FI_REMOTE_READ | FI_REMOTE_WRITE;
	attr.context = buf;
	cr_assert_eq(fi_mr_regattr(f.domain, &attr, 0, &mr), 0);
	cr_assert_eq(mr->fid.context, buf);
	cr_assert_eq(fi_close(&mr->fid), 0);
	f.close_data();
}

/*
 * Under the memory-lock limit, as a user meets it: root in the guest gives
 * up CAP_IPC_LOCK (each test runs in a process of its own), and the limit
 * is lowered to 1 MiB. A registration past it is -FI_ENOMEM with a warning
 * that says why and what to do, pins nothing, and the ones that fit keep
 * working while the cache holds at most half the limit.
 */
namespace {

void lose_ipc_lock()
{
	__user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
	__user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
	cr_assert_eq(syscall(SYS_capget, &header, data), 0, "capget: %s", std::strerror(errno));
	data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective &= ~CAP_TO_MASK(CAP_IPC_LOCK);
	cr_assert_eq(syscall(SYS_capset, &header, data), 0, "capset: %s", std::strerror(errno));
}

void limit_memlock(size_t bytes)
{
	rlimit limit{};
	cr_assert_eq(getrlimit(RLIMIT_MEMLOCK, &limit), 0);
	limit.rlim_cur = bytes;
	cr_assert_eq(setrlimit(RLIMIT_MEMLOCK, &limit), 0, "setrlimit: %s", std::strerror(errno));
}

/* VmPin of /proc/self/status: the bytes this process has pinned. */
size_t pinned_bytes()
{
	FILE *status = std::fopen("/proc/self/status", "r");
	cr_assert_not_null(status);
	char line[256];
	size_t kib = SIZE_MAX;
	while (std::fgets(line, sizeof(line), status))
		if (std::sscanf(line, "VmPin: %zu kB", &kib) == 1)
			break;
	std::fclose(status);
	cr_assert_neq(kib, SIZE_MAX, "no VmPin in /proc/self/status");
	return kib * 1024;
}

} // namespace

Test(mr, a_registration_past_the_memory_lock_limit_is_enomem_and_says_why)
{
	/* Read by libfabric when this process first calls it. */
	setenv("FI_LOG_LEVEL", "warn", 1);
	lose_ipc_lock();
	const size_t limit = size_t{1} << 20;
	limit_memlock(limit);
	DataFixture f;
	f.open();
	std::vector<uint8_t> bytes(size_t{4} << 20, 1);
	const size_t pinned_before = pinned_bytes();
	fid_mr *mr = nullptr;
	StderrCapture capture;
	const int rc = fi_mr_reg(f.domain, bytes.data(), bytes.size(), FI_SEND | FI_RECV, 0, 0, 0, &mr, nullptr);
	const std::string log = capture.text();
	cr_assert_eq(rc, -FI_ENOMEM, "fi_mr_reg past the limit: %d", rc);
	cr_assert_null(mr);
	cr_assert_eq(pinned_bytes(), pinned_before, "a failed registration leaves nothing pinned");
	for (const char *said : {"4096 KiB more to pin", "memory-lock limit", "is 1024 KiB", "ulimit -l",
				 "limits.conf"})
		cr_assert(log.find(said) != std::string::npos, "the warning says \"%s\": %s", said, log.c_str());
	/* Regions that fit, each a range of its own: every one registers, and
	 * what the cache keeps idle stays within half the limit. */
	const size_t region = limit / 4;
	for (size_t i = 0; i < 12; i++) {
		cr_assert_eq(fi_mr_reg(f.domain, bytes.data() + (i % 16) * region, region, FI_SEND | FI_RECV, 0, 0,
				       0, &mr, nullptr), 0, "region %zu", i);
		cr_assert_eq(fi_close(&mr->fid), 0);
	}
	fi_nd_mr_cache_stats stats{};
	if (fi_nd_get_mr_cache_stats(f.domain, &stats) == 0) {
		cr_assert_leq(stats.bytes, limit / 2, "the cache keeps %zu bytes", size_t(stats.bytes));
		cr_assert_gt(stats.evictions, 0u);
	}
	cr_assert_leq(pinned_bytes(), pinned_before + limit / 2 + region);
	f.close_data();
}

/*
 * The registration cache on the device: reuse makes no new registration,
 * and memory that was unmapped and mapped again (munmap, free, realloc,
 * madvise) is registered anew, so that a peer's RDMA write lands in the
 * memory the application now has at that address. Under AddressSanitizer,
 * ThreadSanitizer and valgrind the provider keeps no cache (their
 * allocators unmap where no hook sees it): the tests then check that, and
 * still check the bytes.
 */
TestSuite(mr_cache, .timeout = 120);

namespace {

bool allocator_hides_unmaps()
{
	const char *preload = std::getenv("LD_PRELOAD");
	return dlsym(RTLD_DEFAULT, "__asan_init") || dlsym(RTLD_DEFAULT, "__tsan_init") ||
	       (preload && std::strstr(preload, "vgpreload"));
}

/* The domain's cache statistics; false when it has none (which only the
 * sanitizers and valgrind may cause). */
bool cache_stats(fid_domain *domain, fi_nd_mr_cache_stats *stats)
{
	int rc = fi_nd_get_mr_cache_stats(domain, stats);
	if (rc == -FI_ENOSYS) {
		cr_assert(allocator_hides_unmaps(), "no registration cache outside the sanitizers and valgrind");
		return false;
	}
	cr_assert_eq(rc, 0);
	return true;
}

/* Registers [addr, addr + len) for remote writes, has the client write a
 * pattern there, checks the bytes in that memory, and closes the region. */
void write_lands_in(DataFixture &f, Side c, void *addr, size_t len, uint8_t seed)
{
	fid_mr *mr = nullptr;
	cr_assert_eq(fi_mr_reg(f.domain, addr, len, FI_REMOTE_WRITE, 0, 0, 0, &mr, nullptr), 0);
	Buffer &src = f.buffer(len);
	auto want = pattern(len, seed);
	src.fill(want);
	cr_assert_eq(fi_write(c.ep, src.data(), len, src.desc(), 0, reinterpret_cast<uintptr_t>(addr),
			      fi_mr_key(mr), nullptr), 0);
	wait_cq(c.cq);
	cr_assert(std::equal(want.begin(), want.end(), static_cast<uint8_t *>(addr)),
		  "the write landed in the memory now at %p", addr);
	cr_assert_eq(fi_close(&mr->fid), 0);
}

void *map_anonymous(size_t len, void *at = nullptr)
{
	void *p = mmap(at, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);
	cr_assert_neq(p, MAP_FAILED);
	return p;
}

} // namespace

Test(mr_cache, reuse_of_a_buffer_registers_once)
{
	DataFixture f;
	f.open();
	std::vector<uint8_t> bytes(1 << 20);
	fi_nd_mr_cache_stats before{}, after{};
	const bool cached = cache_stats(f.domain, &before);
	for (int i = 0; i < 100; i++) {
		fid_mr *mr = nullptr;
		/* The whole buffer, then a part of it: both are covered. (Regions
		 * that peers may reach: regions_for_peers_reuse_one_registration.) */
		cr_assert_eq(fi_mr_reg(f.domain, bytes.data() + (i % 2) * 4096, bytes.size() / (1 + i % 2),
				       FI_SEND | FI_RECV, 0, 0, 0, &mr, nullptr), 0);
		cr_assert_eq(fi_close(&mr->fid), 0);
	}
	if (cached) {
		cache_stats(f.domain, &after);
		cr_assert_eq(after.misses - before.misses, 1u);
		cr_assert_eq(after.hits - before.hits, 99u);
		cr_assert_eq(after.in_use, 0u);
	}
	f.close_data();
}

Test(mr_cache, ofi_rxm_pools_flagged_nocache_bypass_it)
{
	DataFixture f;
	f.open();
	fi_nd_mr_cache_stats before{}, after{};
	if (!cache_stats(f.domain, &before))
		return f.close_data();
	std::vector<uint8_t> bytes(8192);
	for (int i = 0; i < 3; i++) {
		fid_mr *mr = nullptr;
		cr_assert_eq(fi_mr_reg(f.domain, bytes.data(), bytes.size(), 0, 0, 0, 1ULL << 60 /* OFI_MR_NOCACHE */,
				       &mr, nullptr), 0);
		cr_assert_eq(fi_close(&mr->fid), 0);
	}
	cache_stats(f.domain, &after);
	cr_assert_eq(after.misses, before.misses);
	cr_assert_eq(after.hits, before.hits);
	f.close_data();
}

Test(mr_cache, munmap_then_mmap_at_the_same_address_registers_the_new_memory)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const size_t len = 1 << 16;
	void *p = map_anonymous(len);
	write_lands_in(f, c, p, len, 1); /* cached (idle) after the close */
	fi_nd_mr_cache_stats before{}, after{};
	/* Not on soft-iWARP, which has no memory windows: a region that peers
	 * may reach is not cached there (the bytes are still checked). */
	const bool cached = cache_stats(f.domain, &before) && !f.iwarp();
	cr_assert_eq(munmap(p, len), 0);
	cr_assert_eq(map_anonymous(len, p), p);
	write_lands_in(f, c, p, len, 2);
	if (cached) {
		cache_stats(f.domain, &after);
		cr_assert_geq(after.invalidations - before.invalidations, 1u);
		cr_assert_eq(after.hits, before.hits, "the old registration was not reused");
	}
	munmap(p, len);
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(mr_cache, madvise_dontneed_drops_the_registration)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const size_t len = 1 << 16;
	void *p = map_anonymous(len);
	write_lands_in(f, c, p, len, 3);
	/* The pages go; the next touch maps fresh zero pages at the same
	 * addresses, which a stale registration would not reach. */
	cr_assert_eq(madvise(p, len, MADV_DONTNEED), 0);
	write_lands_in(f, c, p, len, 4);
	munmap(p, len);
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(mr_cache, free_and_realloc_of_large_blocks_register_the_new_memory)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const size_t len = 8 << 20; /* above glibc's mmap threshold: free unmaps it */
	fi_nd_mr_cache_stats before{}, after{};
	for (int round = 0; round < 4; round++) {
		auto *block = static_cast<uint8_t *>(std::malloc(len));
		cr_assert_not_null(block);
		write_lands_in(f, c, block, 4096, static_cast<uint8_t>(10 + round));
		if (round % 2) {
			/* realloc: moved or grown in place, the memory at the old
			 * address may be new. */
			auto *grown = static_cast<uint8_t *>(std::realloc(block, 4 * len));
			cr_assert_not_null(grown);
			write_lands_in(f, c, grown, 4096, static_cast<uint8_t>(20 + round));
			block = grown;
		}
		/* Regions peers may reach are not cached on soft-iWARP (no
		 * memory windows). */
		const bool cached = cache_stats(f.domain, &before) && !f.iwarp();
		std::free(block);
		/* Whatever malloc hands out now, at the old address or not. */
		auto *next = static_cast<uint8_t *>(std::malloc(len));
		cr_assert_not_null(next);
		write_lands_in(f, c, next, 4096, static_cast<uint8_t>(30 + round));
		if (cached && round == 0) {
			cache_stats(f.domain, &after);
			cr_assert_geq(after.invalidations - before.invalidations, 1u,
				      "free of an mmapped block is seen");
		}
		std::free(next);
	}
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(mr_cache, a_shrinking_brk_drops_the_registration)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const long page = sysconf(_SC_PAGESIZE);
	const size_t len = 16 * page;
	Buffer &src = f.buffer(len);
	const std::vector<uint8_t> wants[2] = {pattern(len, 7), pattern(len, 8)};
	/* Pages above the break: given back by a shrinking brk, and new ones at
	 * the same addresses when it grows again. Nothing is allocated between
	 * the sbrk calls but the registration's own small objects, so malloc
	 * does not move the break meanwhile. */
	auto *top = static_cast<uint8_t *>(sbrk(0));
	auto *start = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(top) + page - 1) &
						  ~static_cast<uintptr_t>(page - 1));
	const intptr_t grow = (start - top) + static_cast<intptr_t>(len);
	cr_assert_neq(sbrk(grow), reinterpret_cast<void *>(-1));
	for (int round = 0; round < 2; round++) {
		const std::vector<uint8_t> &want = wants[round];
		src.fill(want);
		fid_mr *mr = nullptr;
		cr_assert_eq(fi_mr_reg(f.domain, start, len, FI_REMOTE_WRITE, 0, 0, 0, &mr, nullptr), 0);
		cr_assert_eq(fi_write(c.ep, src.data(), len, src.desc(), 0, reinterpret_cast<uintptr_t>(start),
				      fi_mr_key(mr), nullptr), 0);
		wait_cq(c.cq);
		cr_assert(std::equal(want.begin(), want.end(), start), "the write landed above the break");
		cr_assert_eq(fi_close(&mr->fid), 0);
		if (round == 0) { /* shrink and grow: the same addresses, new pages */
			cr_assert_neq(sbrk(-static_cast<intptr_t>(len)), reinterpret_cast<void *>(-1));
			cr_assert_neq(sbrk(static_cast<intptr_t>(len)), reinterpret_cast<void *>(-1));
		}
	}
	cr_assert_eq(sbrk(0), start + len, "nothing else moved the break");
	cr_assert_neq(sbrk(-grow), reinterpret_cast<void *>(-1));
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(mr_cache, threads_register_while_memory_comes_and_goes)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	std::vector<uint8_t> shared(1 << 20);
	std::atomic<bool> failed{false};
	std::vector<std::thread> threads;
	for (int t = 0; t < 4; t++) {
		threads.emplace_back([&, t] {
			for (int i = 0; i < 300 && !failed; i++) {
				fid_mr *mr = nullptr;
				/* Local regions, and regions for peers (memory
				 * windows bound and invalidated from four threads). */
				const uint64_t access = i % 2 ? FI_REMOTE_WRITE : FI_RECV;
				if (t % 2) {
					size_t off = (i * 4096) % (shared.size() / 2);
					if (fi_mr_reg(f.domain, shared.data() + off, 65536, access, 0, 0, 0, &mr,
						      nullptr) || fi_close(&mr->fid))
						failed = true;
				} else {
					void *p = mmap(nullptr, 65536, PROT_READ | PROT_WRITE,
						       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
					if (p == MAP_FAILED ||
					    fi_mr_reg(f.domain, p, 65536, access, 0, 0, 0, &mr, nullptr) ||
					    fi_close(&mr->fid) || munmap(p, 65536))
						failed = true;
				}
			}
		});
	}
	for (auto &thread : threads)
		thread.join();
	cr_assert_not(failed.load(), "a registration or close failed");
	fi_nd_mr_cache_stats stats{};
	if (cache_stats(f.domain, &stats)) {
		cr_assert_eq(stats.in_use, 0u, "every region's use was returned");
		cr_assert_geq(stats.invalidations, 1u);
	}
	/* The cache still serves correct registrations afterwards. */
	void *p = map_anonymous(65536);
	write_lands_in(f, c, p, 65536, 5);
	munmap(p, 65536);
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(mr_cache, fi_nd_mr_cache_enable_0_turns_it_off)
{
	setenv("FI_ND_MR_CACHE_ENABLE", "0", 1);
	DataFixture f;
	f.open();
	fi_nd_mr_cache_stats stats{};
	cr_assert_eq(fi_nd_get_mr_cache_stats(f.domain, &stats), -FI_ENOSYS);
	cr_assert_eq(fi_nd_get_mr_cache_stats(f.domain, nullptr), -FI_EINVAL);
	auto [c, s] = f.connect_data();
	void *p = map_anonymous(4096);
	write_lands_in(f, c, p, 4096, 6);
	munmap(p, 4096);
	close_side(c);
	close_side(s);
	f.close_data();
}

/*
 * Remote access ends at fi_close (issue 26). A region is registered the
 * three ways libfabric has, a peer writes it with its key, the application
 * closes it and puts new bytes there (as it would after freeing and reusing
 * the memory); the peer's write or read with the old key then fails at the
 * peer, and neither the memory nor the peer's buffer changes. The same
 * buffer is registered again each round, so that with the cache on the
 * rounds reuse one cached registration: its key must not serve peers. A
 * region served from a larger cached registration is reachable in its own
 * bytes only.
 */
namespace {

enum class RegisterWay { reg, regv, regattr };

fid_mr *register_remote(fid_domain *domain, void *addr, size_t len, RegisterWay way)
{
	const uint64_t access = FI_REMOTE_READ | FI_REMOTE_WRITE;
	fid_mr *mr = nullptr;
	iovec iov = {addr, len};
	fi_mr_attr attr{};
	attr.mr_iov = &iov;
	attr.iov_count = 1;
	attr.access = access;
	attr.iface = FI_HMEM_SYSTEM;
	int rc = -FI_EOTHER;
	switch (way) {
	case RegisterWay::reg:
		rc = fi_mr_reg(domain, addr, len, access, 0, 0, 0, &mr, nullptr);
		break;
	case RegisterWay::regv:
		rc = fi_mr_regv(domain, &iov, 1, access, 0, 0, 0, &mr, nullptr);
		break;
	case RegisterWay::regattr:
		rc = fi_mr_regattr(domain, &attr, 0, &mr);
		break;
	}
	cr_assert_eq(rc, 0, "registration way %d: %s", static_cast<int>(way), fi_strerror(-rc));
	return mr;
}

/* A request whose key reaches no memory completes in error at the
 * requester; on iWARP a refused read completes flushed (FI_ECANCELED) and a
 * refused write may complete, since iWARP reports write errors at the
 * responder only (fi_nd(7), iWARP). The caller then checks the bytes, after
 * a pause that lets a write in flight land if it were to. */
void expect_refused(DataFixture &f, fid_cq *cq, bool write, const char *what)
{
	const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
	for (;;) {
		fi_cq_data_entry entry{};
		ssize_t rc = fi_cq_read(cq, &entry, 1);
		if (rc == 1) {
			cr_assert(f.iwarp() && write, "%s completed without error", what);
			break;
		}
		if (rc == -FI_EAVAIL) {
			fi_cq_err_entry err{};
			cr_assert_eq(fi_cq_readerr(cq, &err, 0), 1);
			cr_assert(err.err == FI_EACCES || err.err == FI_EIO || (f.iwarp() && err.err == FI_ECANCELED),
				  "%s: err %d (%s)", what, err.err, fi_strerror(err.err));
			break;
		}
		cr_assert_eq(rc, -FI_EAGAIN, "%s: fi_cq_read: %zd", what, rc);
		cr_assert(std::chrono::steady_clock::now() < end, "%s: no completion in 10 s", what);
		std::this_thread::yield();
	}
	std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

void drain_events(DataFixture &f)
{
	while (next_event(f.eq, 300).rc != -FI_EAGAIN) {
	}
}

void closed_regions_are_out_of_reach()
{
	DataFixture f;
	f.open();
	const size_t len = 8192;
	uint8_t *target = static_cast<uint8_t *>(map_anonymous(len));
	const std::vector<uint8_t> reused(len, 0x5a);
	for (RegisterWay way : {RegisterWay::reg, RegisterWay::regv, RegisterWay::regattr}) {
		for (bool write : {true, false}) {
			auto [c, s] = f.connect_data();
			Buffer &local = f.buffer(len);
			fid_mr *mr = register_remote(f.domain, target, len, way);
			const uint64_t key = fi_mr_key(mr);
			auto want = pattern(len, static_cast<uint8_t>(static_cast<int>(way) * 2 + write));
			local.fill(want);
			cr_assert_eq(fi_write(c.ep, local.data(), len, local.desc(), 0,
					      reinterpret_cast<uintptr_t>(target), key, nullptr), 0);
			wait_cq(c.cq);
			cr_assert(std::equal(want.begin(), want.end(), target), "the write with the live key landed");
			cr_assert_eq(fi_close(&mr->fid), 0);
			std::copy(reused.begin(), reused.end(), target);
			std::fill(local.bytes.begin(), local.bytes.end(), 0);
			if (write) {
				local.fill(want);
				cr_assert_eq(fi_write(c.ep, local.data(), len, local.desc(), 0,
						      reinterpret_cast<uintptr_t>(target), key, nullptr), 0);
				expect_refused(f, c.cq, true, "a write with a closed region's key");
			} else {
				cr_assert_eq(fi_read(c.ep, local.data(), len, local.desc(), 0,
						     reinterpret_cast<uintptr_t>(target), key, nullptr), 0);
				expect_refused(f, c.cq, false, "a read with a closed region's key");
				cr_assert(local.holds(std::vector<uint8_t>(len, 0)), "the read brought nothing back");
			}
			cr_assert(std::equal(reused.begin(), reused.end(), target),
				  "way %d, %s: the closed region's memory is untouched", static_cast<int>(way),
				  write ? "write" : "read");
			close_side(c);
			close_side(s);
			drain_events(f);
		}
	}
	/* The whole buffer, then its second half: with the cache the half is
	 * served by the whole one's registration, and still its key reaches
	 * the half only. */
	fid_mr *whole = register_remote(f.domain, target, len, RegisterWay::reg);
	cr_assert_eq(fi_close(&whole->fid), 0);
	fid_mr *half = register_remote(f.domain, target + len / 2, len / 2, RegisterWay::reg);
	auto [c, s] = f.connect_data();
	Buffer &local = f.buffer(64, 0x11);
	cr_assert_eq(fi_write(c.ep, local.data(), 64, local.desc(), 0, reinterpret_cast<uintptr_t>(target),
			      fi_mr_key(half), nullptr), 0);
	expect_refused(f, c.cq, true, "a write below the region");
	cr_assert(std::equal(reused.begin(), reused.end(), target), "the bytes below the region are untouched");
	cr_assert_eq(fi_close(&half->fid), 0);
	close_side(c);
	close_side(s);
	drain_events(f);
	munmap(target, len);
	f.close_data();
}

} // namespace

Test(mr_cache, a_closed_region_is_out_of_reach_of_its_old_key)
{
	closed_regions_are_out_of_reach();
}

Test(mr_cache, without_the_cache_a_closed_region_is_out_of_reach_too)
{
	setenv("FI_ND_MR_CACHE_ENABLE", "0", 1);
	closed_regions_are_out_of_reach();
}

/* The cache keeps its gain with windows: a buffer registered for peers
 * again and again is registered with the device once, and each region's
 * key works while it is open. */
Test(mr_cache, regions_for_peers_reuse_one_registration)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const size_t len = 1 << 16;
	uint8_t *target = static_cast<uint8_t *>(map_anonymous(len));
	Buffer &local = f.buffer(len);
	fi_nd_mr_cache_stats before{}, after{};
	const bool cached = cache_stats(f.domain, &before);
	uint64_t previous_key = 0;
	for (int round = 0; round < 50; round++) {
		fid_mr *mr = register_remote(f.domain, target, len, RegisterWay::reg);
		cr_assert_neq(fi_mr_key(mr), previous_key, "round %d: a new key each time", round);
		previous_key = fi_mr_key(mr);
		auto want = pattern(len, static_cast<uint8_t>(round));
		local.fill(want);
		cr_assert_eq(fi_write(c.ep, local.data(), len, local.desc(), 0, reinterpret_cast<uintptr_t>(target),
				      fi_mr_key(mr), nullptr), 0);
		wait_cq(c.cq);
		cr_assert(std::equal(want.begin(), want.end(), target), "round %d", round);
		cr_assert_eq(fi_close(&mr->fid), 0);
	}
	if (cached) {
		cache_stats(f.domain, &after);
		cr_assert_leq(after.misses - before.misses, 1u, "one registration with the device at most");
		cr_assert_geq(after.hits - before.hits, 49u);
	}
	close_side(c);
	close_side(s);
	munmap(target, len);
	f.close_data();
}
