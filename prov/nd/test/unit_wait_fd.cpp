/*
 * unit_wait_fd.cpp: the wait fd the CQ, the counter and the EQ share
 * (nd_wait_fd.h): signal and drain, other fds in the set, epoll_wait,
 * joining and leaving a wait set, and closing on destruction.
 */
#include <criterion/criterion.h>

#include "nd_wait.h"
#include "nd_wait_fd.h"

#include <rdma/fi_errno.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <memory>

using namespace nd;

namespace {

bool readable(int fd)
{
	pollfd pfd{fd, POLLIN, 0};
	return poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN);
}

bool is_open_fd(int fd) { return fcntl(fd, F_GETFD) != -1; }

} // namespace

Test(wait_fd, closed_until_opened)
{
	WaitFd wait;
	cr_assert_eq(wait.fd(), -1);
}

Test(wait_fd, signal_makes_the_fd_readable_until_drained)
{
	WaitFd wait;
	cr_assert_eq(wait.open(), 0);
	cr_assert_geq(wait.fd(), 0);
	cr_assert_not(readable(wait.fd()));
	cr_assert_not(wait.drain(), "nothing signalled yet");
	cr_assert_eq(wait.signal(), 0);
	cr_assert_eq(wait.signal(), 0);
	cr_assert(readable(wait.fd()));
	cr_assert_eq(wait.wait(0), 1);
	cr_assert(wait.drain(), "two signals, one drain");
	cr_assert_not(readable(wait.fd()));
	cr_assert_not(wait.drain());
	cr_assert_eq(wait.wait(0), 0);
}

Test(wait_fd, an_added_fd_wakes_it_until_removed)
{
	WaitFd wait;
	cr_assert_eq(wait.open(), 0);
	int pipe_fds[2];
	cr_assert_eq(pipe(pipe_fds), 0);
	cr_assert_eq(wait.add(pipe_fds[0]), 0);
	cr_assert_eq(wait.add(pipe_fds[0]), EEXIST, "the errno, for the owner's own log line");
	cr_assert_not(readable(wait.fd()));
	cr_assert_eq(write(pipe_fds[1], "x", 1), 1);
	cr_assert(readable(wait.fd()));
	cr_assert_eq(wait.wait(100), 1);
	wait.remove(pipe_fds[0]);
	cr_assert_not(readable(wait.fd()));
	close(pipe_fds[0]);
	close(pipe_fds[1]);
}

Test(wait_fd, the_destructor_closes_the_epoll_fd)
{
	int fd;
	{
		WaitFd wait;
		cr_assert_eq(wait.open(), 0);
		fd = wait.fd();
		cr_assert(is_open_fd(fd));
	}
	cr_assert_not(is_open_fd(fd));
}

Test(wait_fd, a_joined_wait_set_wakes_with_it_until_left)
{
	WaitSet set(nullptr);
	set.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	cr_assert_geq(set.epoll_fd, 0);
	fid member{};
	{
		WaitFd wait;
		cr_assert_eq(wait.open(), 0);
		cr_assert_eq(wait.join(&set, &member), 0);
		cr_assert_eq(set.members.size(), 1u);
		cr_assert_eq(set.members[0], &member);
		cr_assert_not(readable(set.epoll_fd));
		cr_assert_eq(wait.signal(), 0);
		cr_assert(readable(set.epoll_fd), "a wait set nests its members' epoll fds");
		cr_assert(wait.drain());
		wait.leave();
		cr_assert(set.members.empty());
		wait.leave(); /* twice: nothing more to leave */
		cr_assert_eq(wait.join(&set, &member), 0);
	} /* the destructor leaves too */
	cr_assert(set.members.empty());
}
