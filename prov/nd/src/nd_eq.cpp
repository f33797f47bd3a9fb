/* nd_eq.cpp: the event queue (fid_eq), see nd_eq.h: its entries, reads,
 * writes and wait fd. Reading the CM channel into it, the deferred work and
 * the progress lock are nd_cm_progress.cpp's. */
#include "nd_eq.h"
#include "nd_async.h"
#include "nd_unsupported.h"
#include "nd_cm.h"
#include "nd_cm_data.h"
#include "nd_wait.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <cstring>

namespace nd {

EqEntry::EqEntry(EqEntry &&other) noexcept { *this = std::move(other); }

EqEntry &EqEntry::operator=(EqEntry &&other) noexcept
{
	if (this != &other) {
		if (owned_info)
			fi_freeinfo(owned_info);
		event = other.event;
		flags = other.flags;
		is_error = other.is_error;
		from_provider = other.from_provider;
		data = std::move(other.data);
		error = other.error;
		err_data = std::move(other.err_data);
		owned_info = std::exchange(other.owned_info, nullptr);
		make_info = std::exchange(other.make_info, nullptr);
		make_info_arg = other.make_info_arg;
	}
	return *this;
}

EqEntry::~EqEntry()
{
	if (owned_info)
		fi_freeinfo(owned_info);
}

namespace {

EventQueue *eq_of(fid_eq *eq) noexcept { return from_fid<EventQueue>(eq); }

ssize_t eq_read(fid_eq *eq, uint32_t *event, void *buf, size_t len, uint64_t flags) noexcept
{
	return guarded("fi_eq_read", [&]() -> ssize_t { return eq_of(eq)->read(event, buf, len, flags); });
}

ssize_t eq_readerr(fid_eq *eq, fi_eq_err_entry *buf, uint64_t flags) noexcept
{
	return guarded("fi_eq_readerr", [&]() -> ssize_t { return eq_of(eq)->readerr(buf, flags); });
}

ssize_t eq_write(fid_eq *eq, uint32_t event, const void *buf, size_t len, uint64_t flags) noexcept
{
	return guarded("fi_eq_write",
		       [&]() -> ssize_t { return eq_of(eq)->write(event, buf, len, flags); });
}

ssize_t eq_sread(fid_eq *eq, uint32_t *event, void *buf, size_t len, int timeout,
		 uint64_t flags) noexcept
{
	return guarded("fi_eq_sread", [&]() -> ssize_t {
		return eq_of(eq)->sread(event, buf, len, timeout, flags);
	});
}

const char *eq_strerror(fid_eq *eq, int prov_errno, const void *err_data, char *buf,
			size_t len) noexcept
{
	(void)eq;
	(void)err_data;
	/* An errno, or an IB CM reject reason (nd_cm_data.h). */
	const char *text = cm::prov_errno_str(prov_errno);
	if (buf && len) {
		std::strncpy(buf, text, len - 1);
		buf[len - 1] = '\0';
		return buf;
	}
	return text;
}

int eq_close(fid *fid) noexcept
{
	return guarded("fi_close(eq)", [&] { return from_fid<EventQueue>(fid)->close(); });
}

int eq_control(fid *fid, int command, void *arg) noexcept
{
	return guarded("fi_control(eq)",
		       [&] { return from_fid<EventQueue>(fid)->control(command, arg); });
}

fi_ops eq_fid_ops = {
	.size = sizeof(fi_ops),
	.close = eq_close,
	.bind = unsupported::bind,
	.control = eq_control,
	.ops_open = unsupported::ops_open,
	.tostr = nullptr,
	.ops_set = nullptr,
};

fi_ops_eq eq_ops = {
	.size = sizeof(fi_ops_eq),
	.read = eq_read,
	.readerr = eq_readerr,
	.write = eq_write,
	.sread = eq_sread,
	.strerror = eq_strerror,
};

} // namespace

EventQueue::EventQueue(uint32_t api_version, ChildCount *parent, const fi_eq_attr &attr)
	: eq{}, api_version_(api_version), parent_(parent), wait_obj_(attr.wait_obj),
	  open_flags_(attr.flags), capacity_(attr.size ? attr.size : kDefaultEqSize)
{
}

EventQueue::~EventQueue()
{
	wait_fd_.leave();
	if (watching_async_)
		async::unwatch(wait_fd_.fd());
	/* wait_fd_ closes its fds. */
}

int EventQueue::open(uint32_t api_version, ChildCount *parent, fi_eq_attr *attr, void *context,
		     fid_eq **out)
{
	if (!attr || !out) {
		ND_WARN(FI_LOG_EQ, "fi_eq_open: %s is NULL\n", attr ? "eq" : "attr");
		return -FI_EINVAL;
	}
	switch (attr->wait_obj) {
	case FI_WAIT_NONE:
	case FI_WAIT_UNSPEC:
	case FI_WAIT_FD:
	case FI_WAIT_YIELD:
		break;
	case FI_WAIT_SET:
		break;
	default:
		ND_WARN(FI_LOG_EQ, "fi_eq_open: wait object %d not supported; use FI_WAIT_FD\n",
			attr->wait_obj);
		return -FI_ENOSYS;
	}
	if (attr->flags & ~(uint64_t)(FI_WRITE | FI_AFFINITY)) {
		ND_WARN(FI_LOG_EQ, "fi_eq_open: unknown flags 0x%llx\n",
			static_cast<unsigned long long>(attr->flags));
		return -FI_EBADFLAGS;
	}
	WaitSet *wait_set = nullptr;
	if (attr->wait_obj == FI_WAIT_SET && !(wait_set = wait_set_of(attr->wait_set, "fi_eq_open")))
		return -FI_EINVAL;
	/* The provider picks the wait object for UNSPEC and says which. */
	if (attr->wait_obj == FI_WAIT_UNSPEC)
		attr->wait_obj = FI_WAIT_FD;

	/* In a wait set the EQ waits as with FI_WAIT_FD, its epoll fd in the set's. */
	fi_eq_attr own = *attr;
	if (wait_set)
		own.wait_obj = FI_WAIT_FD;
	auto queue = std::make_unique<EventQueue>(api_version, parent, own);
	int ret = queue->init_wait();
	if (ret)
		return ret;
	queue->eq.fid.fclass = FI_CLASS_EQ;
	queue->eq.fid.context = context;
	queue->eq.fid.ops = &eq_fid_ops;
	queue->eq.ops = &eq_ops;
	if (wait_set) { /* last: the set may try the EQ at once */
		if ((ret = queue->wait_fd_.join(wait_set, &queue->eq.fid)))
			return ret;
	}
	if (parent)
		parent->acquire();
	*out = &queue.release()->eq;
	return 0;
}

int EventQueue::init_wait()
{
	/* Even FI_WAIT_NONE EQs keep the eventfd: it costs one fd and keeps
	 * trywait and the CM progress uniform. */
	if (int err = wait_fd_.open()) {
		ND_WARN(FI_LOG_EQ, "fi_eq_open: %s: %s\n", wait_fd_.failed_call(), std::strerror(err));
		return wait_fd_.failed_call() == WaitFd::kEpollCtl ? -FI_ENOMEM
								    : fi_error_of_errno(err, -FI_ENOMEM);
	}
	/* Verbs asynchronous events wake the EQ's waiters too. */
	async::watch(wait_fd_.fd());
	watching_async_ = true;
	return 0;
}

/* The eventfd is non-zero exactly while entries are queued or work is
 * deferred (both under lock_), so the epoll fd polls readable iff a read
 * has something to do. */
void EventQueue::wake_locked()
{
	wait_fd_.signal();
}

void EventQueue::signal_locked()
{
	assert_held(lock_, "EventQueue::signal_locked");
	if (entries_.size() == 1)
		wake_locked();
}

void EventQueue::drain_signal_locked()
{
	assert_held(lock_, "EventQueue::drain_signal_locked");
	if (entries_.empty())
		wait_fd_.drain();
}

void EventQueue::push(EqEntry &&entry)
{
	std::lock_guard<Mutex> guard(lock_);
	entry.from_provider = true;
	entries_.push_back(std::move(entry));
	burst_ = burst_ || entries_.size() >= kBurst;
	signal_locked();
}

void EventQueue::forget(const fid *object)
{
	std::lock_guard<Mutex> guard(lock_);
	auto names = [object](const EqEntry &entry) {
		if (entry.is_error)
			return entry.from_provider && entry.error.fid == object;
		fid *named = nullptr;
		if (!entry.from_provider || entry.data.size() < sizeof(named))
			return false;
		std::memcpy(&named, entry.data.data(), sizeof(named)); /* fi_eq_entry / fi_eq_cm_entry: fid first */
		return named == object;
	};
	const size_t before = entries_.size();
	entries_.erase(std::remove_if(entries_.begin(), entries_.end(), names), entries_.end());
	if (entries_.size() != before) {
		ND_INFO(FI_LOG_EQ, "fi_close: %zu queued event(s) of the closed object removed\n",
			before - entries_.size());
		drain_signal_locked();
	}
}

size_t EventQueue::depth()
{
	std::lock_guard<Mutex> guard(lock_);
	return entries_.size();
}

ssize_t EventQueue::check_read_args(uint32_t *event, void *buf, size_t len) const
{
	if (!event) {
		ND_WARN(FI_LOG_EQ, "fi_eq_read: event is NULL\n");
		return -FI_EINVAL;
	}
	if (!buf && len) {
		ND_WARN(FI_LOG_EQ, "fi_eq_read: buf is NULL with len %zu\n", len);
		return -FI_EINVAL;
	}
	return 0;
}

ssize_t EventQueue::read(uint32_t *event, void *buf, size_t len, uint64_t flags)
{
	ssize_t ret = check_read_args(event, buf, len);
	if (ret)
		return ret;
	progress_if_idle();
	std::lock_guard<Mutex> guard(lock_);
	if (entries_.empty())
		return -FI_EAGAIN;
	EqEntry &head = entries_.front();
	if (head.is_error)
		return -FI_EAVAIL;
	if (len < head.data.size()) {
		ND_INFO(FI_LOG_EQ, "fi_eq_read: buffer of %zu bytes, the event needs %zu; kept\n",
			len, head.data.size());
		return -FI_ETOOSMALL;
	}
	if (head.make_info && !head.owned_info) {
		fi_info *info = nullptr;
		if (int made = head.make_info(head.make_info_arg, &info)) {
			if (made != -FI_ENOENT) {
				ND_WARN(FI_LOG_EQ, "fi_eq_read: out of memory for a connection request's info; the event is kept\n");
				return made;
			}
			ND_INFO(FI_LOG_EQ, "fi_eq_read: a connection request of a closing listener dropped\n");
			pop_locked();
			return -FI_EAGAIN;
		}
		head.owned_info = info;
		if (head.data.size() >= sizeof(fi_eq_cm_entry))
			std::memcpy(head.data.data() + offsetof(fi_eq_cm_entry, info), &info, sizeof(info));
	}
	*event = head.event;
	if (!head.data.empty())
		std::memcpy(buf, head.data.data(), head.data.size());
	ret = static_cast<ssize_t>(head.data.size());
	if (!(flags & FI_PEEK)) {
		head.owned_info = nullptr; /* the application owns it now */
		pop_locked();
	}
	return ret;
}

ssize_t EventQueue::readerr(fi_eq_err_entry *buf, uint64_t flags)
{
	if (!buf) {
		ND_WARN(FI_LOG_EQ, "fi_eq_readerr: buf is NULL\n");
		return -FI_EINVAL;
	}
	progress_if_idle();
	std::lock_guard<Mutex> guard(lock_);
	if (entries_.empty() || !entries_.front().is_error)
		return -FI_EAGAIN;
	EqEntry &head = entries_.front();
	void *user_err_data = buf->err_data;
	size_t user_err_size = buf->err_data_size;
	fi_eq_err_entry out = head.error;
	const bool provider_buffer = FI_VERSION_LT(api_version_, FI_VERSION(1, 5)) ||
				     user_err_size == 0 || !user_err_data;
	if (head.err_data.empty()) {
		out.err_data = nullptr;
		out.err_data_size = 0;
	} else if (provider_buffer) {
		/* Valid until the next read, as fi_eq(3) promises. */
		delivered_err_data_ = head.err_data;
		out.err_data = delivered_err_data_.data();
		out.err_data_size = delivered_err_data_.size();
	} else {
		size_t n = std::min(user_err_size, head.err_data.size());
		std::memcpy(user_err_data, head.err_data.data(), n);
		out.err_data = user_err_data;
		out.err_data_size = n;
	}
	*buf = out;
	if (!(flags & FI_PEEK)) {
		pop_locked();
	}
	return static_cast<ssize_t>(sizeof(fi_eq_err_entry));
}

void EventQueue::pop_locked() noexcept
{
	assert_held(lock_, "EventQueue::pop_locked");
	entries_.pop_front();
	/* A burst (thousands of connections set up at once) grew the deque's
	 * map; once it is read empty the storage goes, so that it does not
	 * stay high in the heap, keeping malloc from returning what the
	 * burst's endpoints freed below it when they close. */
	if (entries_.empty() && burst_) {
		release_storage(entries_);
		burst_ = false;
	}
	drain_signal_locked();
}

ssize_t EventQueue::write(uint32_t event, const void *buf, size_t len, uint64_t flags)
{
	if (!(open_flags_ & FI_WRITE)) {
		ND_WARN(FI_LOG_EQ, "fi_eq_write: the EQ was opened without FI_WRITE\n");
		return -FI_EINVAL;
	}
	if (!buf && len) {
		ND_WARN(FI_LOG_EQ, "fi_eq_write: buf is NULL with len %zu\n", len);
		return -FI_EINVAL;
	}
	EqEntry entry;
	entry.event = event;
	entry.flags = flags;
	if (len)
		entry.data.assign(static_cast<const uint8_t *>(buf),
				  static_cast<const uint8_t *>(buf) + len);
	std::lock_guard<Mutex> guard(lock_);
	if (entries_.size() >= capacity_) {
		ND_INFO(FI_LOG_EQ, "fi_eq_write: EQ full (%zu entries)\n", capacity_);
		return -FI_EAGAIN;
	}
	entries_.push_back(std::move(entry));
	burst_ = burst_ || entries_.size() >= kBurst;
	signal_locked();
	return static_cast<ssize_t>(len);
}

int EventQueue::wait(int timeout_ms)
{
	if (wait_obj_ == FI_WAIT_YIELD) {
		sched_yield();
		return 0;
	}
	pollfd pfd{wait_fd_.fd(), POLLIN, 0};
	int rc = poll(&pfd, 1, timeout_ms);
	if (rc < 0 && errno != EINTR)
		return -errno;
	return 0;
}

ssize_t EventQueue::sread(uint32_t *event, void *buf, size_t len, int timeout, uint64_t flags)
{
	if (wait_obj_ == FI_WAIT_NONE) {
		ND_WARN(FI_LOG_EQ, "fi_eq_sread: the EQ was opened with FI_WAIT_NONE\n");
		return -FI_EINVAL;
	}
	ssize_t ret = check_read_args(event, buf, len);
	if (ret)
		return ret;
	const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout);
	for (;;) {
		ret = read(event, buf, len, flags);
		if (ret != -FI_EAGAIN)
			return ret;
		int left = timeout < 0 ? -1 : remaining_ms(deadline);
		if (timeout >= 0 && left == 0)
			return -FI_EAGAIN;
		int rc = wait(left);
		if (rc)
			return rc;
	}
}

int EventQueue::control(int command, void *arg)
{
	return control_wait(FI_LOG_EQ, "eq", command, arg, wait_obj_ == FI_WAIT_FD ? wait_fd_.fd() : -1,
			    wait_obj_);
}

int EventQueue::trywait()
{
	/* A full batch may have left events in the channel. */
	const bool more = progress();
	return more || depth() ? -FI_EAGAIN : 0;
}

int EventQueue::close()
{
	if (bound.busy()) {
		ND_WARN(FI_LOG_EQ, "fi_close(eq): %d endpoint(s) still bound\n", bound.value());
		return -FI_EBUSY;
	}
	if (parent_)
		parent_->release();
	delete this; /* every id on the CM channel is gone: nothing is bound */
	return 0;
}

int eq_open(uint32_t api_version, ChildCount *parent, fi_eq_attr *attr, fid_eq **eq,
	    void *context) noexcept
{
	return guarded("fi_eq_open",
		       [&] { return EventQueue::open(api_version, parent, attr, context, eq); });
}

int eq_trywait(fid *eq) noexcept
{
	return guarded("fi_trywait", [&] { return from_fid<EventQueue>(eq)->trywait(); });
}

} // namespace nd
