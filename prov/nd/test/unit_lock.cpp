/*
 * unit_lock.cpp: the one-word mutex every endpoint queue and CQ locks with
 * (WordMutex and OptionalLock, nd.h): mutual exclusion under contention,
 * try_lock while held, a waiter that sleeps until the unlock, and a
 * disabled lock that never locks; and the debug builds' lock-order check
 * (LockRank): an inverted pair and a function's lock not held abort with
 * the locks named, a try_lock in any order does not.
 */
#include <criterion/criterion.h>

#include "nd.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

using namespace nd;

Test(lock, threads_that_contend_never_lose_an_increment)
{
	OptionalLock lock{LockRank::cq};
	lock.enable(true);
	constexpr int kThreads = 4, kRounds = 200000;
	uint64_t counter = 0; /* plain: only the lock protects it */
	std::vector<std::thread> threads;
	for (int t = 0; t < kThreads; t++)
		threads.emplace_back([&] {
			for (int i = 0; i < kRounds; i++) {
				std::lock_guard<OptionalLock> guard(lock);
				counter++;
			}
		});
	for (std::thread &t : threads)
		t.join();
	cr_assert_eq(counter, static_cast<uint64_t>(kThreads) * kRounds);
}

Test(lock, try_lock_fails_while_another_thread_holds_it)
{
	WordMutex mutex;
	mutex.lock();
	bool taken = true;
	std::thread([&] { taken = mutex.try_lock(); }).join();
	cr_assert_not(taken);
	mutex.unlock();
	std::thread([&] { taken = mutex.try_lock(); }).join();
	cr_assert(taken);
	mutex.unlock();
}

Test(lock, a_waiter_sleeps_until_the_holder_unlocks)
{
	WordMutex mutex;
	std::atomic<bool> inside{false};
	mutex.lock();
	std::thread waiter([&] {
		mutex.lock();
		inside = true;
		mutex.unlock();
	});
	std::this_thread::sleep_for(std::chrono::milliseconds(100));
	cr_assert_not(inside.load(), "the waiter got in while the lock was held");
	mutex.unlock();
	waiter.join();
	cr_assert(inside.load());
	/* Free again after a contended hand-over. */
	cr_assert(mutex.try_lock());
	mutex.unlock();
}

Test(lock, a_disabled_lock_never_locks)
{
	OptionalLock lock{LockRank::cq};
	cr_assert_not(lock.enabled());
	lock.lock();
	cr_assert(lock.try_lock(), "a disabled lock is always free");
	lock.unlock();
	lock.unlock();
}

/* Runs `body` in a child process with its stderr captured; what it wrote,
 * and whether it died (SIGABRT, or the exit status a sanitizer's abort
 * handler gives it) rather than ending normally. */
template <typename Body>
static std::pair<std::string, bool> in_child(Body body)
{
	int fds[2];
	cr_assert_eq(pipe(fds), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* Ends at once on the abort, leaving nothing of the test
		 * runner's own behind (it writes a file for a crashed worker). */
		signal(SIGABRT, [](int) { _exit(134); });
		dup2(fds[1], 2);
		close(fds[0]);
		body();
		_exit(0);
	}
	close(fds[1]);
	std::string said;
	char buf[512];
	ssize_t n;
	while ((n = read(fds[0], buf, sizeof(buf))) > 0)
		said.append(buf, static_cast<size_t>(n));
	close(fds[0]);
	int status = 0;
	waitpid(pid, &status, 0);
	return {said, WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0)};
}

#ifdef ND_LOCK_ORDER
Test(lock_order, a_lock_taken_below_one_held_aborts_naming_both)
{
	auto [said, aborted] = in_child([] {
		Mutex eq{LockRank::eq};
		OptionalLock cq{LockRank::cq};
		std::lock_guard<Mutex> outer(eq);
		std::lock_guard<OptionalLock> inner(cq); /* cq ranks above eq: inverted */
	});
	cr_assert(aborted, "the inverted pair did not abort: %s", said.c_str());
	cr_assert(said.find(lock_rank_name(LockRank::cq)) != std::string::npos, "%s", said.c_str());
	cr_assert(said.find(lock_rank_name(LockRank::eq)) != std::string::npos, "%s", said.c_str());
}

Test(lock_order, the_order_itself_passes_and_a_try_lock_may_go_against_it)
{
	auto [said, aborted] = in_child([] {
		OptionalLock tx{LockRank::endpoint_tx};
		OptionalLock cq{LockRank::cq};
		Mutex eq{LockRank::eq};
		{
			std::lock_guard<OptionalLock> a(tx);
			std::lock_guard<OptionalLock> b(cq);
			std::lock_guard<Mutex> c(eq);
		}
		/* The completion path's credit write: the CQ held, the send
		 * lock only tried. */
		std::lock_guard<OptionalLock> b(cq);
		if (tx.try_lock())
			tx.unlock();
	});
	cr_assert_not(aborted, "%s", said.c_str());
	cr_assert(said.empty(), "%s", said.c_str());
}

Test(lock_order, a_lock_taken_twice_aborts)
{
	auto [said, aborted] = in_child([] {
		Mutex framing{LockRank::framing};
		framing.lock();
		framing.lock(); /* would deadlock */
	});
	cr_assert(aborted);
	cr_assert(said.find(lock_rank_name(LockRank::framing)) != std::string::npos, "%s", said.c_str());
}

Test(lock_order, a_function_whose_lock_is_not_held_aborts_naming_it)
{
	auto [said, aborted] = in_child([] {
		OptionalLock cq{LockRank::cq};
		{
			std::lock_guard<OptionalLock> held(cq);
			assert_held(cq, "test"); /* passes */
		}
		assert_held(cq, "CompletionQueue::progress_locked");
	});
	cr_assert(aborted);
	cr_assert(said.find("CompletionQueue::progress_locked needs ") != std::string::npos, "%s", said.c_str());
	cr_assert(said.find(lock_rank_name(LockRank::cq)) != std::string::npos, "%s", said.c_str());
}
#else
Test(lock_order, release_builds_do_not_check_it)
{
	auto [said, aborted] = in_child([] {
		Mutex eq{LockRank::eq};
		OptionalLock cq{LockRank::cq};
		std::lock_guard<Mutex> outer(eq);
		std::lock_guard<OptionalLock> inner(cq);
	});
	cr_assert_not(aborted, "%s", said.c_str());
}
#endif

Test(lock_order, every_rank_has_a_name)
{
	for (int r = static_cast<int>(LockRank::wait_set); r <= static_cast<int>(LockRank::mr_cache_unmapped); r++)
		cr_assert_str_neq(lock_rank_name(static_cast<LockRank>(r)), "unknown lock", "rank %d", r);
}
