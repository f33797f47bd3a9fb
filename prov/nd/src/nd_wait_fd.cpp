/* nd_wait_fd.cpp: the wait fd of a CQ, a counter or an EQ; see nd_wait_fd.h. */
#include "nd_wait_fd.h"
#include "nd_wait.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace nd {

WaitFd::~WaitFd()
{
	close();
}

void WaitFd::close() noexcept
{
	leave();
	if (epoll_fd_ >= 0)
		::close(epoll_fd_);
	if (event_fd_ >= 0)
		::close(event_fd_);
	epoll_fd_ = event_fd_ = -1;
}

int WaitFd::open() noexcept
{
	int err = 0;
	event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (event_fd_ < 0) {
		err = errno;
		failed_call_ = kEventfd;
	} else if ((epoll_fd_ = epoll_create1(EPOLL_CLOEXEC)) < 0) {
		err = errno;
		failed_call_ = kEpollCreate;
	} else if ((err = add(event_fd_))) {
		failed_call_ = kEpollCtl;
	}
	if (err) {
		if (epoll_fd_ >= 0)
			::close(epoll_fd_);
		if (event_fd_ >= 0)
			::close(event_fd_);
		epoll_fd_ = event_fd_ = -1;
	}
	return err;
}

int WaitFd::add(int fd) noexcept
{
	epoll_event ev{};
	ev.events = EPOLLIN;
	ev.data.fd = fd;
	return epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) ? errno : 0;
}

void WaitFd::remove(int fd) noexcept
{
	epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

int WaitFd::signal() noexcept
{
	uint64_t one = 1;
	return ::write(event_fd_, &one, sizeof(one)) == sizeof(one) ? 0 : -FI_EIO;
}

bool WaitFd::drain() noexcept
{
	uint64_t signals;
	return ::read(event_fd_, &signals, sizeof(signals)) == sizeof(signals);
}

int WaitFd::wait(int timeout_ms) noexcept
{
	epoll_event events[8];
	return epoll_wait(epoll_fd_, events, 8, timeout_ms);
}

int WaitFd::join(WaitSet *set, fid *member)
{
	if (int ret = set->add(member, epoll_fd_))
		return ret;
	set_ = set;
	member_ = member;
	return 0;
}

void WaitFd::leave() noexcept
{
	if (set_)
		set_->remove(member_, epoll_fd_);
	set_ = nullptr;
	member_ = nullptr;
}

} // namespace nd
