/* unit_mr_cache.cpp: the registration cache's bookkeeping, against a fake
 * registrar that counts what is registered (the device path is tested in
 * the guest: guest_mr.cpp, "mr_cache"). */
#include <criterion/criterion.h>

#include "nd_mr_cache.h"

#include <cerrno>
#include <set>

namespace {

using nd::RegistrationCache;

struct FakeDevice {
	std::set<ibv_mr *> live;
	int registrations = 0;
	int fail_with = 0;		/* errno for the next registration */
	size_t pinned_limit = SIZE_MAX;	/* bytes, as RLIMIT_MEMLOCK */
	size_t pinned = 0;

	nd::Registrar registrar()
	{
		nd::Registrar r;
		r.owner = this;
		r.reg = [](void *owner, void *addr, size_t length, int access) noexcept -> ibv_mr * {
			auto *self = static_cast<FakeDevice *>(owner);
			if (self->fail_with) {
				errno = self->fail_with;
				self->fail_with = 0;
				return nullptr;
			}
			if (self->pinned + length > self->pinned_limit) {
				errno = ENOMEM;
				return nullptr;
			}
			auto *mr = new ibv_mr{};
			mr->addr = addr;
			mr->length = length;
			mr->lkey = mr->rkey = static_cast<uint32_t>(++self->registrations);
			self->live.insert(mr);
			self->pinned += length;
			return mr;
		};
		r.dereg = [](void *owner, ibv_mr *mr) noexcept {
			auto *self = static_cast<FakeDevice *>(owner);
			cr_assert_eq(self->live.erase(mr), 1u, "deregistered twice or never registered");
			self->pinned -= mr->length;
			delete mr;
		};
		return r;
	}
};

constexpr int kRead = IBV_ACCESS_REMOTE_READ;
constexpr int kWrite = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
const RegistrationCache::Limits kRoomy = {1 << 30, 1024};

void *at(uintptr_t address) { return reinterpret_cast<void *>(address); }

fi_nd_mr_cache_stats stats_of(RegistrationCache &cache)
{
	fi_nd_mr_cache_stats stats{};
	cache.stats(&stats);
	return stats;
}

} // namespace

Test(mr_cache, reuse_of_a_range_makes_no_registration)
{
	FakeDevice device;
	{
		RegistrationCache cache(device.registrar(), kRoomy);
		int err = 0;
		auto *first = cache.acquire(at(0x10000), 8192, kWrite, &err);
		cr_assert_not_null(first);
		cache.release(first);
		cr_assert_eq(device.live.size(), 1u, "an idle entry stays registered");
		auto *again = cache.acquire(at(0x10000), 8192, kWrite, &err);
		auto *inside = cache.acquire(at(0x10100), 100, kWrite, &err);
		cr_assert_eq(again, first);
		cr_assert_eq(inside, first, "a range the entry covers is served by it");
		cr_assert_eq(device.registrations, 1);
		auto stats = stats_of(cache);
		cr_assert_eq(stats.hits, 2u);
		cr_assert_eq(stats.misses, 1u);
		cr_assert_eq(stats.in_use, 1u);
		cache.release(again);
		cache.release(inside);
	}
	cr_assert(device.live.empty(), "closing the cache deregisters its idle entries");
}

Test(mr_cache, wider_range_or_more_access_registers_anew)
{
	FakeDevice device;
	RegistrationCache cache(device.registrar(), kRoomy);
	int err = 0;
	auto *small = cache.acquire(at(0x10000), 4096, kRead, &err);
	auto *longer = cache.acquire(at(0x10000), 4097, kRead, &err);
	auto *before = cache.acquire(at(0xffff), 10, kRead, &err);
	auto *writable = cache.acquire(at(0x10000), 4096, kWrite, &err);
	cr_assert_eq(device.registrations, 4);
	cr_assert(small != longer && small != before && small != writable);
	/* The writable entry grants read as well: a read-only request may use it. */
	auto *read_only = cache.acquire(at(0x10000), 4096, kRead, &err);
	cr_assert(read_only == small || read_only == longer);
	for (auto *entry : {small, longer, before, writable, read_only})
		cache.release(entry);
}

Test(mr_cache, unmapped_memory_is_never_returned)
{
	FakeDevice device;
	RegistrationCache cache(device.registrar(), kRoomy);
	int err = 0;
	auto *idle = cache.acquire(at(0x100000), 65536, kWrite, &err);
	cache.release(idle);
	auto *busy = cache.acquire(at(0x200000), 65536, kWrite, &err);
	/* One page in the middle of each goes. */
	cache.on_unmap(0x108000, 4096);
	cache.on_unmap(0x208000, 4096);
	auto stats = stats_of(cache);
	cr_assert_eq(stats.invalidations, 2u);
	cr_assert_eq(device.live.size(), 1u, "the idle entry is deregistered at once");
	auto *fresh = cache.acquire(at(0x200000), 65536, kWrite, &err);
	cr_assert_neq(fresh, busy, "a stale entry is never handed out again");
	cache.release(busy);
	cr_assert_eq(device.live.size(), 1u, "the stale entry goes with its last region");
	cache.release(fresh);
	/* Ranges next to an entry leave it alone. */
	cache.on_unmap(0x200000 - 4096, 4096);
	cache.on_unmap(0x200000 + 65536, 4096);
	auto *kept = cache.acquire(at(0x200000), 65536, kWrite, &err);
	cr_assert_eq(kept, fresh);
	cache.release(kept);
}

Test(mr_cache, too_many_unmaps_at_once_drop_everything)
{
	FakeDevice device;
	RegistrationCache cache(device.registrar(), kRoomy);
	int err = 0;
	auto *entry = cache.acquire(at(0x100000), 4096, kWrite, &err);
	cache.release(entry);
	for (int i = 0; i < 40; i++) /* far from the entry, but more than it records */
		cache.on_unmap(0x900000 + i * 0x10000, 4096);
	cr_assert_eq(stats_of(cache).entries, 0u);
	cr_assert(device.live.empty());
}

Test(mr_cache, idle_entries_are_evicted_least_recently_used_first)
{
	FakeDevice device;
	RegistrationCache cache(device.registrar(), {1 << 30, 2});
	int err = 0;
	auto *a = cache.acquire(at(0x10000), 4096, kWrite, &err);
	auto *b = cache.acquire(at(0x20000), 4096, kWrite, &err);
	cache.release(a);
	cache.release(b);
	auto *a_again = cache.acquire(at(0x10000), 4096, kWrite, &err); /* a is now most recent */
	cache.release(a_again);
	auto *c = cache.acquire(at(0x30000), 4096, kWrite, &err);
	cr_assert_eq(stats_of(cache).evictions, 1u);
	auto *a_kept = cache.acquire(at(0x10000), 4096, kWrite, &err);
	cr_assert_eq(a_kept, a, "b, the least recently used, went");
	cr_assert_eq(device.live.size(), 2u);
	cache.release(a_kept);
	cache.release(c);
}

Test(mr_cache, what_does_not_fit_beside_regions_in_use_is_uncached)
{
	FakeDevice device;
	RegistrationCache cache(device.registrar(), {8192, 16});
	int err = 0;
	auto *big = cache.acquire(at(0x10000), 16384, kWrite, &err);
	cr_assert_not_null(big);
	auto *one = cache.acquire(at(0x40000), 8192, kWrite, &err);
	auto *two = cache.acquire(at(0x50000), 4096, kWrite, &err);
	auto stats = stats_of(cache);
	cr_assert_eq(stats.uncached, 2u, "larger than the limit, then no room beside one in use");
	cr_assert_eq(stats.entries, 1u);
	cache.release(big);
	cache.release(two);
	cr_assert_eq(device.live.size(), 1u, "uncached registrations go with their region");
	cache.release(one);
}

Test(mr_cache, lockable_memory_running_out_evicts_idle_entries)
{
	FakeDevice device;
	device.pinned_limit = 12288;
	RegistrationCache cache(device.registrar(), kRoomy);
	int err = 0;
	auto *a = cache.acquire(at(0x10000), 8192, kWrite, &err);
	cache.release(a);
	auto *b = cache.acquire(at(0x20000), 8192, kWrite, &err);
	cr_assert_not_null(b, "the idle entry made room (errno %d)", err);
	cr_assert_eq(device.live.size(), 1u);
	device.fail_with = EFAULT;
	auto *bad = cache.acquire(at(0x30000), 10, kWrite, &err);
	cr_assert_null(bad);
	cr_assert_eq(err, EFAULT, "the device's error is the caller's");
	cache.release(b);
}

Test(mr_cache, zero_length_regions_get_keys)
{
	FakeDevice device;
	RegistrationCache cache(device.registrar(), kRoomy);
	int err = 0;
	auto *empty = cache.acquire(at(0x10000), 0, kWrite, &err);
	cr_assert_not_null(empty);
	cr_assert_eq(empty->mr->length, 1u);
	cache.on_unmap(0x10000, 4096);
	cache.release(empty);
	cr_assert(device.live.empty(), "an unmap at its address drops it too");
}

/* Regions that peers reach through a memory window ask for their exact
 * range: a larger entry does not serve them (its window would reach all of
 * it on Soft-RoCE), an entry of that range does, and one released as not
 * reusable is never found again and is deregistered at once. */
Test(mr_cache, exact_lookups_and_entries_given_up)
{
	FakeDevice device;
	{
		RegistrationCache cache(device.registrar(), kRoomy);
		int err = 0;
		auto *whole = cache.acquire(at(0x10000), 8192, kWrite, &err);
		cache.release(whole);
		auto *half = cache.acquire(at(0x11000), 4096, kWrite, &err, true);
		cr_assert_neq(half, whole, "a larger entry does not serve an exact lookup");
		cr_assert_eq(device.registrations, 2);
		cache.release(half);
		auto *again = cache.acquire(at(0x11000), 4096, kWrite, &err, true);
		cr_assert_eq(again, half, "an entry of exactly the range does");
		auto *inside = cache.acquire(at(0x11000), 2048, kWrite, &err);
		cr_assert(inside == half || inside == whole, "a plain lookup takes any covering entry");
		cache.release(inside);
		cache.release(again, false);
		cr_assert_eq(device.live.size(), 1u, "the entry given up is deregistered when idle");
		auto *other = cache.acquire(at(0x11000), 4096, kWrite, &err, true);
		cr_assert_eq(device.registrations, 3);
		cache.release(other);
	}
	cr_assert(device.live.empty());
}
