/*
 * unit_lock.cpp: the one-word mutex every endpoint queue and CQ locks with
 * (WordMutex and OptionalLock, nd.h): mutual exclusion under contention,
 * try_lock while held, a waiter that sleeps until the unlock, and a
 * disabled lock that never locks.
 */
#include <criterion/criterion.h>

#include "nd.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

using namespace nd;

Test(lock, threads_that_contend_never_lose_an_increment)
{
	OptionalLock lock;
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
	OptionalLock lock;
	cr_assert_not(lock.enabled());
	lock.lock();
	cr_assert(lock.try_lock(), "a disabled lock is always free");
	lock.unlock();
	lock.unlock();
}
