/*
 * nd_cm_progress.cpp: the EQ's connection-management progress engine (see
 * nd_cm.h for the model, nd_eq.h for the declarations): each EQ's rdma_cm
 * event channel, reading it and dispatching every event to the listener,
 * connection request or endpoint that owns its id, the work objects defer
 * to the next progress, the progress lock, and binding objects' ids to an
 * EQ. The queue of events itself is nd_eq.cpp's.
 */
#include "nd_eq.h"
#include "nd_async.h"
#include "nd_cm.h"
#include "nd_cm_data.h"

#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <vector>

namespace nd {

int EventQueue::cm_channel(rdma_event_channel **out)
{
	std::lock_guard<Mutex> guard(lock_);
	if (!cm_channel_) {
		UniqueEventChannel channel(rdma_create_event_channel());
		if (!channel) {
			int err = errno;
			ND_WARN(FI_LOG_EQ, "rdma_create_event_channel: %s\n", std::strerror(err));
			return fi_error_of_errno(err);
		}
		int flags = fcntl(channel->fd, F_GETFL);
		if (flags < 0 || fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
			ND_WARN(FI_LOG_EQ, "cannot make the CM channel non-blocking: %s\n",
				std::strerror(errno));
			return -FI_EOTHER;
		}
		if (int err = wait_fd_.add(channel->fd)) {
			ND_WARN(FI_LOG_EQ, "epoll_ctl(CM channel): %s\n", std::strerror(err));
			return -FI_ENOMEM;
		}
		cm_channel_ = std::move(channel);
	}
	*out = cm_channel_.get();
	return 0;
}

namespace {

CmEventCopy copy_event(const rdma_cm_event &event)
{
	CmEventCopy copy;
	copy.type = event.event;
	copy.status = event.status;
	copy.id = event.id;
	copy.listen_id = event.listen_id;
	copy.responder_resources = event.param.conn.responder_resources;
	copy.initiator_depth = event.param.conn.initiator_depth;
	copy.qp_num = event.param.conn.qp_num;
	if (event.param.conn.private_data && event.param.conn.private_data_len) {
		const uint8_t *data = static_cast<const uint8_t *>(event.param.conn.private_data);
		copy.private_data.assign(data, data + event.param.conn.private_data_len);
	}
	return copy;
}

void dispatch(const CmEventCopy &event)
{
	/* A connection request belongs to the listener until someone takes it. */
	rdma_cm_id *owner_id = event.type == RDMA_CM_EVENT_CONNECT_REQUEST ? event.listen_id
									   : event.id;
	auto *target = owner_id ? static_cast<CmTarget *>(owner_id->context) : nullptr;
	if (!target) {
		ND_INFO(FI_LOG_EQ, "CM event %s for an id nobody owns; absorbed\n",
			cm::event_name(event.type));
		return;
	}
	switch (target->kind) {
	case CmTargetKind::passive_endpoint:
		pep_cm_event(target->owner, event);
		break;
	case CmTargetKind::connection_request:
		connreq_cm_event(target->owner, event);
		break;
	case CmTargetKind::endpoint:
		ep_cm_event(target->owner, event);
		break;
	}
}

} // namespace

bool EventQueue::progress()
{
	/* A queue pair or device that failed: its owners' error entries. */
	async::drain();
	rdma_event_channel *channel;
	bool deferred;
	{
		std::lock_guard<Mutex> guard(lock_);
		channel = cm_channel_.get();
		deferred = !deferred_.empty();
	}
	if (!channel && !deferred)
		return false;
	std::lock_guard<Mutex> progress_guard(progress_lock_);
	run_deferred();
	if (!channel)
		return false;
	/* A bounded batch: a backlog of connection requests each becomes an
	 * fi_info here, yet the application takes one per fi_eq_read. Drained
	 * at once, a thousand of them were freed one by one among the
	 * endpoints accepted meanwhile, and the holes they left stayed
	 * resident (0.5 KiB a connection). What is left waits in the channel,
	 * whose fd stays readable in the wait set, for the next progress. */
	for (int taken = 0; taken < kCmEventsPerProgress; taken++) {
		rdma_cm_event *raw = nullptr;
		if (rdma_get_cm_event(channel, &raw)) {
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				ND_WARN(FI_LOG_EQ, "rdma_get_cm_event: %s\n", std::strerror(errno));
			return false;
		}
		CmEventCopy copy;
		try {
			copy = copy_event(*raw);
		} catch (...) {
			rdma_ack_cm_event(raw);
			throw;
		}
		/* Acknowledge before acting: rdma_destroy_id waits for every
		 * event of its id to be acknowledged. */
		rdma_ack_cm_event(raw);
		ND_TRACE(FI_LOG_EQ, "CM event %s status %d\n", cm::event_name(copy.type), copy.status);
		dispatch(copy);
	}
	return true; /* a whole batch: more may wait */
}

int EventQueue::defer(void (*run)(void *owner), void *owner) noexcept
{
	std::lock_guard<Mutex> guard(lock_);
	try {
		deferred_.push_back({run, owner});
	} catch (const std::bad_alloc &) {
		ND_WARN(FI_LOG_EQ, "EQ %p: out of memory for the work of %p; not queued\n",
			static_cast<void *>(this), owner);
		return -FI_ENOMEM;
	}
	/* An empty EQ's waiter sleeps: wake it to progress. */
	if (entries_.empty() && deferred_.size() == 1)
		wake_locked();
	return 0;
}

void EventQueue::cancel_deferred(void *owner) noexcept
{
	std::lock_guard<Mutex> progress_guard(progress_lock_);
	std::lock_guard<Mutex> guard(lock_);
	deferred_.erase(std::remove_if(deferred_.begin(), deferred_.end(),
				       [owner](const Deferred &d) { return d.owner == owner; }),
			deferred_.end());
}

void EventQueue::run_deferred()
{
	assert_held(progress_lock_, "EventQueue::run_deferred");
	std::vector<Deferred> work;
	{
		std::lock_guard<Mutex> guard(lock_);
		if (deferred_.empty())
			return;
		work.swap(deferred_);
	}
	for (const Deferred &d : work)
		d.run(d.owner);
	/* The wake-up defer() sent is spent when nothing came of it. */
	std::lock_guard<Mutex> guard(lock_);
	if (deferred_.empty())
		drain_signal_locked();
}

void EventQueue::progress_if_idle()
{
	if (!depth())
		progress();
}

int ensure_cm_id(EventQueue *eq, CmIdHolder &cm, CmTarget *target)
{
	rdma_event_channel *channel = nullptr;
	if (eq) {
		int ret = eq->cm_channel(&channel);
		if (ret)
			return ret;
	}
	return cm.ensure(channel, target);
}

int bind_cm_to_eq(EventQueue *eq, CmIdHolder &cm, EventQueue **slot, EventQueue *home,
		  const std::function<void()> &moved)
{
	rdma_event_channel *channel;
	int ret = eq->cm_channel(&channel);
	if (ret)
		return ret;
	std::unique_lock<Mutex> eq_guard(eq->progress_lock(), std::defer_lock);
	std::unique_lock<Mutex> home_guard;
	if (home && home != eq) {
		home_guard = std::unique_lock<Mutex>(home->progress_lock(), std::defer_lock);
		std::lock(eq_guard, home_guard);
	} else {
		eq_guard.lock();
	}
	ret = cm.migrate(channel);
	if (ret)
		return ret;
	*slot = eq;
	eq->bound.acquire();
	if (home)
		home->bound.release();
	if (moved)
		moved();
	return 0;
}

} // namespace nd
