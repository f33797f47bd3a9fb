/*
 * nd_eq.h: the event queue (fid_eq).
 *
 * A queue of entries under a mutex, and a wait fd that is readable exactly
 * while the queue holds an entry: an eventfd, inside an epoll set so that
 * connection-manager channels can be added to the same set later and one fd
 * still tells the application when to read. FI_GETWAIT returns the epoll fd.
 * Reading those channels and dispatching their events (the CM progress
 * engine) is nd_cm_progress.cpp.
 *
 * Entries are stored whole (event, payload, error entry with its error
 * data); a read into a buffer too small for the head entry fails with
 * -FI_ETOOSMALL and leaves it in place, and FI_PEEK copies without removing.
 * An FI_CONNREQ entry owns the fi_info it carries until a non-peek read hands
 * it to the application; entries still queued at close are freed. Closing
 * an endpoint or a passive endpoint removes the events queued for it.
 */
#ifndef ND_EQ_H
#define ND_EQ_H

#include "nd.h"
#include "nd_cm.h"
#include "nd_verbs.h"
#include "nd_wait_fd.h"

#include <rdma/fi_eq.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

namespace nd {

struct EqEntry {
	uint32_t event = 0;
	uint64_t flags = 0;
	bool is_error = false;
	std::vector<uint8_t> data;		/* what fi_eq_read copies out */
	fi_eq_err_entry error{};		/* valid when is_error */
	std::vector<uint8_t> err_data;		/* error.err_data points here */
	fi_info *owned_info = nullptr;		/* FI_CONNREQ: freed unless read */
	/* FI_CONNREQ: makes the info when the event is first read (or
	 * peeked): 0, -FI_ENOMEM (the event stays), or -FI_ENOENT (the
	 * request went with its closing listener: the event goes). A burst of
	 * requests then holds one info at a time, not one per event queued,
	 * and leaves no holes in the heap among the endpoints they make. */
	int (*make_info)(void *arg, fi_info **out) noexcept = nullptr;
	void *make_info_arg = nullptr;
	bool from_provider = false;		/* a connection event, not fi_eq_write's */

	EqEntry() = default;
	EqEntry(const EqEntry &) = delete;
	EqEntry &operator=(const EqEntry &) = delete;
	EqEntry(EqEntry &&other) noexcept;
	EqEntry &operator=(EqEntry &&other) noexcept;
	~EqEntry();
};

struct EventQueue {
	fid_eq eq;				/* first: from_fid<EventQueue> */

	/* Opens an EQ. `parent` (the fabric's child count, may be null in unit
	 * tests) is held while the EQ lives. api_version governs err_data
	 * semantics (provider-owned buffer before 1.5). */
	static int open(uint32_t api_version, ChildCount *parent, fi_eq_attr *attr,
			void *context, fid_eq **out);

	/* Queues an event the provider generated. Never drops: the queue grows
	 * past attr->size rather than lose a connection event. */
	void push(EqEntry &&entry);
	/* Number of queued entries (tests and trywait). */
	size_t depth();
	/* Removes the connection events queued for `object`, which is being
	 * closed: an application never reads a freed fid (an FI_CONNREQ's
	 * info is freed with it). Entries the application wrote stay. */
	void forget(const fid *object);

	ssize_t read(uint32_t *event, void *buf, size_t len, uint64_t flags);
	ssize_t readerr(fi_eq_err_entry *buf, uint64_t flags);
	ssize_t write(uint32_t event, const void *buf, size_t len, uint64_t flags);
	ssize_t sread(uint32_t *event, void *buf, size_t len, int timeout, uint64_t flags);
	int control(int command, void *arg);
	int close();
	int trywait();

	/* CM progress (nd_cm_progress.cpp). The rdma_cm event channel of
	 * this EQ, created on first use and added to the wait set. Objects
	 * bound to the EQ keep their ids on it. */
	int cm_channel(rdma_event_channel **out);
	/* Reads the CM channel and dispatches its events (see nd_cm.h), at
	 * most kCmEventsPerProgress of them; true when it took that many (more
	 * may wait there). */
	bool progress();
	static constexpr int kCmEventsPerProgress = 32;
	/* progress() only when nothing is queued: the queued head goes out
	 * first anyway, and the drain would end in a failed
	 * rdma_get_cm_event system call on a channel already read empty. */
	void progress_if_idle();
	/* Held by dispatch and by the connection calls of objects bound here. */
	Mutex &progress_lock() { return progress_lock_; }

	/* Work an object asks of the EQ's next progress, where its CM events
	 * are handled (under the progress lock): a CQ's poller that learns an
	 * endpoint's peer is gone cannot run the endpoint's state machine
	 * itself. Any thread; wakes a waiter. Returns -FI_ENOMEM (logged)
	 * when it cannot be queued. */
	int defer(void (*run)(void *owner), void *owner) noexcept;
	/* Drops what `owner` deferred and waits for a run in progress: after
	 * it, nothing runs for `owner`, which may be freed. */
	void cancel_deferred(void *owner) noexcept;

	ChildCount bound;			/* endpoints and PEPs bound to this EQ */

	/* Everything below is private to nd_eq.cpp and nd_cm_progress.cpp;
	 * public only so the type stays standard-layout for from_fid. */
	uint32_t api_version_;
	ChildCount *parent_;
	fi_wait_obj wait_obj_;
	uint64_t open_flags_;
	size_t capacity_;
	WaitFd wait_fd_;			/* eventfd, CM channel, async fds; FI_WAIT_SET joins it */
	bool watching_async_ = false;		/* wait_fd_ watches the async fds */
	Mutex lock_{LockRank::eq};
	Mutex progress_lock_{LockRank::eq_progress};
	UniqueEventChannel cm_channel_;
	std::deque<EqEntry> entries_;
	bool burst_ = false;			/* entries_ held kBurst or more since it was last empty */
	static constexpr size_t kBurst = 256;
	void pop_locked() noexcept;		/* the head read: gone */
	std::vector<uint8_t> delivered_err_data_; /* readerr's provider-owned buffer */
	struct Deferred {
		void (*run)(void *owner);
		void *owner;
	};
	std::vector<Deferred> deferred_;	/* under lock_ */
	void run_deferred();			/* under progress_lock_ */

	EventQueue(uint32_t api_version, ChildCount *parent, const fi_eq_attr &attr);
	~EventQueue();
	int init_wait();
	void wake_locked();
	void signal_locked();
	void drain_signal_locked();
	int wait(int timeout_ms);
	ssize_t check_read_args(uint32_t *event, void *buf, size_t len) const;
};

/* CM progress of the objects bound to an EQ (nd_cm_progress.cpp). */

/* Runs `fn` under the progress lock of `eq`, the EQ an object is bound to
 * (or directly when it has none yet): connection calls and CM event
 * handlers of the object never overlap. */
template <typename Fn>
auto under_progress_lock(EventQueue *eq, Fn &&fn) -> decltype(fn())
{
	if (!eq)
		return fn();
	std::lock_guard<Mutex> guard(eq->progress_lock());
	return fn();
}

/* An object's close: `teardown` (which destroys its rdma_cm ids) runs under
 * the progress lock, the events queued for `object` go, then it no longer
 * counts as bound to `eq`. */
template <typename Fn>
void teardown_and_unbind(EventQueue *eq, const fid *object, Fn &&teardown)
{
	under_progress_lock(eq, teardown);
	if (eq) {
		eq->forget(object);
		eq->bound.release();
	}
}

/* Creates the rdma_cm id of an object whose EQ is `eq` (none yet: a channel
 * of the id's own) if it has none. */
int ensure_cm_id(EventQueue *eq, CmIdHolder &cm, CmTarget *target);

/* Binds an object to `eq`: its id (if any) moves onto the EQ's channel
 * under the progress lock, *slot becomes eq and the EQ counts the
 * binding. The caller has checked that the object has no EQ yet. `home`,
 * when given, is the EQ whose channel carried the id until now (a taken
 * connection request's listener EQ): both progress locks are held while the
 * id moves, home stops counting the object, and `moved` runs under them. */
int bind_cm_to_eq(EventQueue *eq, CmIdHolder &cm, EventQueue **slot, EventQueue *home = nullptr,
		  const std::function<void()> &moved = {});

/* Default number of entries when the application asks for none. */
constexpr size_t kDefaultEqSize = 1024;

} // namespace nd

#endif /* ND_EQ_H */
