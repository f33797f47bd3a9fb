/* nd_wait.cpp: wait sets (fi_wait_open); see nd_wait.h. */
#include "nd_wait.h"
#include "nd_fabric.h"
#include "nd_unsupported.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

namespace nd {

namespace {

/* What fi_trywait says of one member: 0 when it is armed and empty. */
int try_member(fid *member)
{
	switch (member->fclass) {
	case FI_CLASS_CQ: return cq_trywait(member);
	case FI_CLASS_CNTR: return cntr_trywait(member);
	default: return eq_trywait(member);
	}
}

} // namespace

WaitSet::~WaitSet()
{
	if (epoll_fd >= 0)
		::close(epoll_fd);
}

int WaitSet::add(fid *member, int member_fd)
{
	std::lock_guard<Mutex> guard(lock);
	members.push_back(member);
	epoll_event ev{};
	ev.events = EPOLLIN;
	ev.data.ptr = member;
	if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, member_fd, &ev)) {
		int err = errno;
		members.pop_back();
		ND_WARN(FI_LOG_FABRIC, "wait set: epoll_ctl(add): %s\n", std::strerror(err));
		return fi_error_of_errno(err);
	}
	return 0;
}

void WaitSet::remove(fid *member, int member_fd) noexcept
{
	std::lock_guard<Mutex> guard(lock);
	members.erase(std::remove(members.begin(), members.end(), member), members.end());
	epoll_ctl(epoll_fd, EPOLL_CTL_DEL, member_fd, nullptr);
}

int WaitSet::wait_for(int timeout_ms)
{
	const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
	for (;;) {
		{
			/* Members cannot close under us: they leave under this
			 * lock, and trywait takes only their own locks. */
			std::lock_guard<Mutex> guard(lock);
			for (fid *member : members) {
				int rc = try_member(member);
				if (rc == -FI_EAGAIN)
					return 0;
				if (rc)
					return rc;
			}
		}
		const int left = timeout_ms < 0 ? -1 : remaining_ms(deadline);
		if (timeout_ms >= 0 && left == 0)
			return -FI_ETIMEDOUT;
		epoll_event events[8];
		int n = epoll_wait(epoll_fd, events, 8, left);
		if (n < 0 && errno != EINTR) {
			int err = errno;
			ND_WARN(FI_LOG_FABRIC, "fi_wait: epoll_wait: %s\n", std::strerror(err));
			return fi_error_of_errno(err);
		}
		/* Woken (or interrupted): look at the members again. */
	}
}

int WaitSet::close()
{
	{
		std::lock_guard<Mutex> guard(lock);
		if (!members.empty()) {
			ND_WARN(FI_LOG_FABRIC, "fi_close(wait): %zu CQ(s)/EQ(s)/counter(s) still use the set\n",
				members.size());
			return -FI_EBUSY;
		}
	}
	Fabric *owner = fabric;
	delete this;
	owner->children.release();
	return 0;
}

namespace {

int wait_wait(fid_wait *set, int timeout) noexcept
{
	if (!set)
		return -FI_EINVAL;
	return guarded("fi_wait", [&] { return from_fid<WaitSet>(&set->fid)->wait_for(timeout); });
}

int wait_close(fid *fid) noexcept
{
	return guarded("fi_close(wait)", [&] { return from_fid<WaitSet>(fid)->close(); });
}

int wait_control(fid *fid, int command, void *arg) noexcept
{
	WaitSet *set = from_fid<WaitSet>(fid);
	return control_wait(FI_LOG_FABRIC, "wait", command, arg, set->epoll_fd, FI_WAIT_FD);
}

fi_ops_wait wait_ops = {
	.size = sizeof(fi_ops_wait),
	.wait = wait_wait,
};

fi_ops wait_fid_ops = {
	.size = sizeof(fi_ops),
	.close = wait_close,
	.bind = unsupported::bind,
	.control = wait_control,
	.ops_open = unsupported::ops_open,
	.tostr = nullptr,
	.ops_set = nullptr,
};

} // namespace

WaitSet *wait_set_of(fid_wait *set, const char *call)
{
	if (!set || set->fid.fclass != FI_CLASS_WAIT || set->fid.ops != &wait_fid_ops) {
		ND_WARN(FI_LOG_FABRIC, "%s: FI_WAIT_SET needs wait_set, a wait set of this provider's\n", call);
		return nullptr;
	}
	return from_fid<WaitSet>(&set->fid);
}

int wait_open(fid_fabric *ffabric, fi_wait_attr *attr, fid_wait **out) noexcept
{
	return guarded("fi_wait_open", [&] {
		if (!ffabric || !attr || !out) {
			ND_WARN(FI_LOG_FABRIC, "fi_wait_open: fabric, attr and waitset must not be NULL\n");
			return -FI_EINVAL;
		}
		if (attr->wait_obj != FI_WAIT_UNSPEC && attr->wait_obj != FI_WAIT_FD) {
			ND_WARN(FI_LOG_FABRIC, "fi_wait_open: wait object %d not supported (FI_WAIT_FD, FI_WAIT_UNSPEC)\n",
				attr->wait_obj);
			return -FI_ENOSYS;
		}
		if (attr->flags) {
			ND_WARN(FI_LOG_FABRIC, "fi_wait_open: flags 0x%llx not supported\n",
				static_cast<unsigned long long>(attr->flags));
			return -FI_EBADFLAGS;
		}
		Fabric *fabric = from_fid<Fabric>(&ffabric->fid);
		auto set = std::make_unique<WaitSet>(fabric);
		set->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
		if (set->epoll_fd < 0) {
			int err = errno;
			ND_WARN(FI_LOG_FABRIC, "fi_wait_open: epoll_create1: %s\n", std::strerror(err));
			return fi_error_of_errno(err, -FI_ENOMEM);
		}
		attr->wait_obj = FI_WAIT_FD;
		set->wait.fid.fclass = FI_CLASS_WAIT;
		set->wait.fid.context = nullptr;
		set->wait.fid.ops = &wait_fid_ops;
		set->wait.ops = &wait_ops;
		fabric->children.acquire();
		*out = &set.release()->wait;
		return 0;
	});
}

} // namespace nd
