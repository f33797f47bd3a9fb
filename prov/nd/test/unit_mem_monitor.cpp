/* unit_mem_monitor.cpp: the memory monitor on the host, with libucm's real
 * hooks (they need no device): each way a process releases memory reaches a
 * listener, also beside an Open MPI whose memory hooks report nothing,
 * which keeps no callback of nd's once the monitor stops. Inside Open MPI itself the
 * monitor is tested by fabtests/functional/nd_mpi_check.c (released_memory)
 * under Open MPI 4.1 and 5 in the guest. */
#include <criterion/criterion.h>

#include "nd_mem_monitor.h"

#include <dlfcn.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

/* A stand-in for Open MPI's memory hooks (libopen-pal's exported API, which
 * the monitor finds with dlsym): present only while a test switches it on,
 * and silent, as Open MPI's are where libucm's patches were written over
 * them. The binary exports these (-rdynamic). */
namespace fake_open_mpi {
bool present = false;
int registered = 0;
void *callback = nullptr;
} // namespace fake_open_mpi

extern "C" {
int opal_mem_hooks_support_level()
{
	return fake_open_mpi::present ? 0x3 : 0;
}
int opal_mem_hooks_register_release(void *callback, void *)
{
	fake_open_mpi::registered++;
	fake_open_mpi::callback = callback;
	return 0;
}
int opal_mem_hooks_unregister_release(void *callback)
{
	if (callback == fake_open_mpi::callback) {
		fake_open_mpi::registered--;
		fake_open_mpi::callback = nullptr;
	}
	return 0;
}
}

namespace {

/* Records whether any reported range overlaps the one it watches. `seen`
 * is atomic for the compiler's sake: it knows that free() writes no memory
 * of the caller's, and would otherwise test the value set before it. */
struct Watch final : nd::UnmapListener {
	uintptr_t start = 0, end = 0;
	std::atomic<bool> seen{false};

	void watch(const void *p, size_t length)
	{
		start = reinterpret_cast<uintptr_t>(p);
		end = start + length;
		seen = false;
	}
	void on_unmap(uintptr_t s, size_t length) noexcept override
	{
		if (s < end && s + length > start)
			seen = true;
	}
};

bool under_a_sanitizer()
{
	return dlsym(RTLD_DEFAULT, "__asan_init") || dlsym(RTLD_DEFAULT, "__tsan_init");
}

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

char *fresh_pages(size_t count)
{
	void *p = mmap(nullptr, count * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(p, MAP_FAILED);
	static_cast<char *>(p)[0] = 1;
	return static_cast<char *>(p);
}

/* Starts the monitor with a listener, or, under a sanitizer, checks that it
 * refuses and says why (its allocator unmaps where no hook sees it). */
bool start_watching(Watch &watch)
{
	std::string why;
	const bool running = nd::mem_monitor_start(&why);
	if (under_a_sanitizer()) {
		cr_assert_not(running, "no monitor under a sanitizer");
		cr_assert(why.find("Sanitizer") != std::string::npos, "the reason names it: %s", why.c_str());
		return false;
	}
	cr_assert(running, "the monitor starts on the host: %s", why.c_str());
	cr_assert(nd::mem_monitor_subscribe(&watch));
	return true;
}

void stop_watching(Watch &watch)
{
	nd::mem_monitor_unsubscribe(&watch);
	nd::mem_monitor_stop();
}

} // namespace

Test(mem_monitor, every_way_of_releasing_memory_reaches_a_listener)
{
	Watch watch;
	if (!start_watching(watch))
		return;

	char *p = fresh_pages(1);
	watch.watch(p, kPage);
	munmap(p, kPage);
	cr_assert(watch.seen, "munmap");

	p = fresh_pages(1);
	watch.watch(p, kPage);
	mmap(p, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	cr_assert(watch.seen, "mmap(MAP_FIXED) over a mapping");
	munmap(p, kPage);

	p = fresh_pages(1);
	watch.watch(p, kPage);
	madvise(p, kPage, MADV_DONTNEED);
	cr_assert(watch.seen, "madvise(MADV_DONTNEED)");
	munmap(p, kPage);

	p = fresh_pages(2);
	watch.watch(p + kPage, kPage);
	mremap(p, 2 * kPage, kPage, 0);
	cr_assert(watch.seen, "mremap that shrinks");
	munmap(p, kPage);

	/* Above glibc's mmap threshold, fixed so that earlier frees cannot
	 * have raised it: free gives the block back by munmap. */
	mallopt(M_MMAP_THRESHOLD, 128 << 10);
	const size_t large = 8 << 20;
	auto *block = static_cast<char *>(malloc(large));
	cr_assert_not_null(block);
	std::memset(block, 1, large);
	watch.watch(block, large);
	free(block);
	cr_assert(watch.seen, "free of a block malloc mapped");

	/* glibc trims its heap this way. (This test's process is alone with
	 * its break: nothing else moves it between the two calls.) */
	char *top = static_cast<char *>(sbrk(static_cast<intptr_t>(kPage)));
	cr_assert_neq(top, reinterpret_cast<char *>(-1));
	watch.watch(top, kPage);
	sbrk(-static_cast<intptr_t>(kPage));
	cr_assert(watch.seen, "a shrinking sbrk");

	stop_watching(watch);
}

/* libucm's hooks are the live ones here, as under Open MPI 4.1 once UCX
 * has written over Open MPI's patches: the unmaps still arrive, and the
 * callback lent to Open MPI is taken back when the monitor stops. */
Test(mem_monitor, beside_an_open_mpi_that_reports_nothing)
{
	fake_open_mpi::present = true;
	Watch watch;
	if (!start_watching(watch)) {
		cr_assert_eq(fake_open_mpi::registered, 0, "nothing lent to Open MPI under a sanitizer");
		return;
	}
	char *p = fresh_pages(1);
	watch.watch(p, kPage);
	munmap(p, kPage);
	cr_assert(watch.seen, "libucm's hooks report");
	stop_watching(watch);
	cr_assert_eq(fake_open_mpi::registered, 0, "no callback left with Open MPI");

	Watch again;
	cr_assert(start_watching(again), "a second start after stop");
	p = fresh_pages(1);
	again.watch(p, kPage);
	munmap(p, kPage);
	cr_assert(again.seen);
	stop_watching(again);
}
