/* nd_async.cpp: the registry and the reader of verbs asynchronous events. */
#include "nd_async.h"
#include "nd.h"

#include <sys/epoll.h>

#include <algorithm>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace nd::async {

namespace {

struct Device {
	ibv_context *context;
	int users;			/* domains open on it */
};

struct QpOwner {
	ibv_context *context;
	Handler handler;
	void *owner;
};

/* One lock for the registry and for routing: see nd_async.h. */
Mutex registry_lock{LockRank::async_registry};
std::vector<Device> devices;
std::vector<int> watchers;		/* EQs' epoll fds */
std::unordered_map<ibv_qp *, QpOwner> qps;

Device *find_device(ibv_context *context)
{
	auto it = std::find_if(devices.begin(), devices.end(),
			       [context](const Device &d) { return d.context == context; });
	return it == devices.end() ? nullptr : &*it;
}

void watch_fd(int epoll_fd, int fd)
{
	epoll_event ev{};
	ev.events = EPOLLIN;
	ev.data.fd = fd;
	if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0 && errno != EEXIST)
		ND_WARN(FI_LOG_EQ, "epoll_ctl(async fd %d): %s; its events are read only when the EQ is\n",
			fd, std::strerror(errno));
}

const char *device_name(ibv_context *context)
{
	return context && context->device ? ibv_get_device_name(context->device) : "?";
}

} // namespace

int device_open(ibv_context *context)
{
	std::lock_guard<Mutex> guard(registry_lock);
	if (Device *d = find_device(context)) {
		d->users++;
		return 0;
	}
	/* librdmacm never reads this fd itself; the EQs read it without
	 * blocking. */
	int flags = fcntl(context->async_fd, F_GETFL);
	if (flags < 0 || fcntl(context->async_fd, F_SETFL, flags | O_NONBLOCK) < 0) {
		int err = errno;
		ND_WARN(FI_LOG_DOMAIN, "%s: cannot make the async event fd non-blocking: %s\n",
			device_name(context), std::strerror(err));
		return fi_error_of_errno(err);
	}
	devices.push_back({context, 1});
	for (int epoll_fd : watchers)
		watch_fd(epoll_fd, context->async_fd);
	return 0;
}

void device_close(ibv_context *context) noexcept
{
	std::lock_guard<Mutex> guard(registry_lock);
	Device *d = find_device(context);
	if (!d || --d->users > 0)
		return;
	for (int epoll_fd : watchers)
		epoll_ctl(epoll_fd, EPOLL_CTL_DEL, context->async_fd, nullptr);
	devices.erase(devices.begin() + (d - devices.data()));
}

int watch(int epoll_fd)
{
	std::lock_guard<Mutex> guard(registry_lock);
	watchers.push_back(epoll_fd);
	for (const Device &d : devices)
		watch_fd(epoll_fd, d.context->async_fd);
	return 0;
}

void unwatch(int epoll_fd) noexcept
{
	std::lock_guard<Mutex> guard(registry_lock);
	watchers.erase(std::remove(watchers.begin(), watchers.end(), epoll_fd), watchers.end());
}

/* Queue pairs a bucket of the table holds on average: the table is read
 * only when an event names a queue pair, and written when one is made or
 * destroyed, so a short chain costs nothing that matters, while with one
 * queue pair a bucket the bucket arrays (and the ones each rehash freed)
 * took heap of every endpoint (docs/scale.md). */
constexpr float kQpsPerBucket = 4.0f;

void add_qp(ibv_context *context, ibv_qp *qp, Handler handler, void *owner)
{
	std::lock_guard<Mutex> guard(registry_lock);
	if (qps.empty())
		qps.max_load_factor(kQpsPerBucket);
	qps[qp] = {context, handler, owner};
}

void remove_qp(ibv_qp *qp) noexcept
{
	std::lock_guard<Mutex> guard(registry_lock);
	qps.erase(qp);
	/* With the last queue pair gone, so is the table: a process that had
	 * thousands keeps no bucket array pinning its heap. */
	if (qps.empty())
		release_storage(qps);
}

bool names_qp(ibv_event_type type) noexcept
{
	switch (type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		return true;
	default:
		return false;
	}
}

int error_of(ibv_event_type type) noexcept
{
	switch (type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_PATH_MIG_ERR:
		/* The queue pair is in the error state: the connection is
		 * over, whatever the CM says later. */
		return FI_ECONNABORTED;
	case IBV_EVENT_DEVICE_FATAL:
		return FI_ENODEV;
	default:
		/* COMM_EST (data before the RTU: rdma_cm completes the
		 * connection), SQ_DRAINED, PATH_MIG, LAST_WQE_REACHED, port,
		 * CQ, SRQ and GID events: informational. */
		return 0;
	}
}

void route_locked(ibv_context *context, ibv_event_type type, ibv_qp *qp) noexcept
{
	const int error = error_of(type);
	if (!error) {
		ND_INFO(FI_LOG_DOMAIN, "%s: async event %s\n", device_name(context),
			ibv_event_type_str(type));
		return;
	}
	ND_WARN(FI_LOG_DOMAIN, "%s: async event %s%s\n", device_name(context),
		ibv_event_type_str(type), names_qp(type) ? " on a queue pair" : "");
	if (names_qp(type)) {
		auto it = qps.find(qp);
		if (it == qps.end()) {
			ND_INFO(FI_LOG_DOMAIN, "%s: %s names a queue pair nd no longer has\n",
				device_name(context), ibv_event_type_str(type));
			return;
		}
		it->second.handler(it->second.owner, type, error);
		return;
	}
	/* The device failed: every queue pair on it. */
	for (auto &entry : qps)
		if (entry.second.context == context)
			entry.second.handler(entry.second.owner, type, error);
}

void route(ibv_context *context, ibv_event_type type, ibv_qp *qp) noexcept
{
	std::lock_guard<Mutex> guard(registry_lock);
	route_locked(context, type, qp);
}

int drain() noexcept
{
	std::unique_lock<Mutex> guard(registry_lock, std::try_to_lock);
	/* Another thread is reading: it takes what is pending. */
	if (!guard.owns_lock())
		return 0;
	int routed = 0;
	for (size_t i = 0; i < devices.size(); i++) {
		ibv_context *context = devices[i].context;
		for (;;) {
			ibv_async_event event;
			if (ibv_get_async_event(context, &event))
				break; /* EAGAIN: nothing pending */
			const ibv_event_type type = event.event_type;
			ibv_qp *qp = names_qp(type) ? event.element.qp : nullptr;
			ibv_ack_async_event(&event);
			route_locked(context, type, qp);
			routed++;
		}
	}
	return routed;
}

} // namespace nd::async
