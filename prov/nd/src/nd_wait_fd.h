/*
 * nd_wait_fd.h: the wait fd of a CQ, a counter or an EQ (FI_WAIT_FD,
 * FI_WAIT_SET), owned: an epoll set holding an eventfd.
 *
 * The epoll fd is what FI_GETWAIT hands out, what a waiter sleeps on and
 * what a wait set (nd_wait.h) nests; the eventfd is how the provider wakes
 * that waiter (fi_cq_signal, fi_cntr_add, a queued EQ entry) until it
 * drains it. Other fds the object's news arrives on (a completion channel,
 * a CM channel, the verbs asynchronous fds) join the same epoll set with
 * add(). The destructor leaves the wait set, then closes both fds.
 *
 * Nothing here logs: each object keeps its own words for a failure, so
 * open() and add() return the errno and failed_call() names the system
 * call of open() that failed.
 */
#ifndef ND_WAIT_FD_H
#define ND_WAIT_FD_H

#include "nd.h"

namespace nd {

struct WaitSet;

class WaitFd {
public:
	/* What failed_call() returns. */
	static constexpr const char *kEventfd = "eventfd";
	static constexpr const char *kEpollCreate = "epoll_create1";
	static constexpr const char *kEpollCtl = "epoll_ctl";

	WaitFd() = default;
	WaitFd(const WaitFd &) = delete;
	WaitFd &operator=(const WaitFd &) = delete;
	~WaitFd();

	/* Creates the eventfd (non-blocking) and the epoll set holding it.
	 * 0, or the errno of the call that failed (failed_call() names it;
	 * what was created is closed). */
	int open() noexcept;
	/* After a failed open(): kEventfd, kEpollCreate or kEpollCtl. */
	const char *failed_call() const noexcept { return failed_call_; }
	/* The epoll fd (FI_GETWAIT's), -1 until open() succeeds. */
	int fd() const noexcept { return epoll_fd_; }

	/* Leaves the wait set and closes both fds (as the destructor does);
	 * open() may follow. */
	void close() noexcept;

	/* Watches another fd for readability: 0 or epoll_ctl's errno. */
	int add(int fd) noexcept;
	void remove(int fd) noexcept;

	/* Makes the epoll fd readable until drain(): 0, or -FI_EIO when the
	 * eventfd cannot be written. */
	int signal() noexcept;
	/* Resets the eventfd; true when it had been signalled. */
	bool drain() noexcept;
	/* Sleeps in epoll_wait for at most timeout_ms (-1: no limit): what
	 * epoll_wait returns, -1 with errno set on failure. */
	int wait(int timeout_ms) noexcept;

	/* Joins `set` as `member` (the last step of an open: the set may try
	 * the member at once): 0, or the set's -FI_E* (logged by the set). */
	int join(WaitSet *set, fid *member);
	/* Leaves the wait set joined, if any: the first step of a close, so
	 * that the set no longer tries the member. The destructor leaves too. */
	void leave() noexcept;

private:
	int epoll_fd_ = -1;
	int event_fd_ = -1;
	const char *failed_call_ = nullptr;
	WaitSet *set_ = nullptr;		/* joined as member_ */
	fid *member_ = nullptr;
};

} // namespace nd

#endif /* ND_WAIT_FD_H */
