/* nd_cntr.cpp: counters (fi_cntr_open and its operations). */
#include "nd_cntr.h"
#include "nd_domain.h"
#include "nd_unsupported.h"
#include "nd_wait.h"


#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

namespace nd {

Counter::~Counter()
{
	wait_fd.leave();
	/* wait_fd closes its fds. */
}

void Counter::attach(const void *user)
{
	std::lock_guard<Mutex> guard(sources_lock);
	if (std::find(users.begin(), users.end(), user) == users.end()) {
		users.push_back(user);
		bound.acquire();
	}
}

void Counter::detach(const void *user) noexcept
{
	std::lock_guard<Mutex> guard(sources_lock);
	auto it = std::find(users.begin(), users.end(), user);
	if (it != users.end()) {
		users.erase(it);
		bound.release();
	}
}

int Counter::watch(CompletionQueue *cq)
{
	std::lock_guard<Mutex> guard(sources_lock);
	if (waitable) {
		const int fd = cq_channel_fd(*cq);
		if (fd < 0 && wait_obj != FI_WAIT_UNSPEC) {
			ND_WARN(FI_LOG_CNTR, "fi_enable: a counter with a wait object (%s) cannot be fed by a CQ "
				"opened with FI_WAIT_NONE: nothing would wake it\n",
				wait_obj == FI_WAIT_FD ? "FI_WAIT_FD" : "FI_WAIT_SET");
			return -FI_EINVAL;
		}
		if (fd < 0) {
			polled_sources++;
		} else if (std::find(cqs.begin(), cqs.end(), cq) == cqs.end()) {
			if (int err = wait_fd.add(fd)) {
				ND_WARN(FI_LOG_CNTR, "fi_enable: counter epoll_ctl: %s\n", std::strerror(err));
				return fi_error_of_errno(err);
			}
		}
	}
	cqs.push_back(cq);
	return 0;
}

void Counter::unwatch(CompletionQueue *cq) noexcept
{
	std::lock_guard<Mutex> guard(sources_lock);
	auto it = std::find(cqs.begin(), cqs.end(), cq);
	if (it == cqs.end())
		return;
	cqs.erase(it);
	if (!waitable)
		return;
	const int fd = cq_channel_fd(*cq);
	if (fd < 0)
		polled_sources--;
	else if (std::find(cqs.begin(), cqs.end(), cq) == cqs.end())
		wait_fd.remove(fd);
}

void Counter::progress()
{
	std::lock_guard<Mutex> guard(sources_lock);
	/* A CQ watched through several endpoints is polled once per watch:
	 * the second poll finds it empty, which costs less than sorting. */
	for (CompletionQueue *cq : cqs)
		cq_progress(*cq);
}

bool Counter::arm()
{
	std::lock_guard<Mutex> guard(sources_lock);
	if (!waitable || polled_sources)
		return false;
	for (CompletionQueue *cq : cqs)
		if (cq_arm(*cq))
			return false;
	return true;
}

void Counter::wake() noexcept
{
	if (!waitable)
		return;
	wait_fd.signal();
}

/* Until the threshold, an error, or the timeout (milliseconds, -1 for
 * none). With a wait object and every source armable it sleeps in epoll;
 * otherwise it polls. */
int Counter::wait(uint64_t threshold, int timeout)
{
	const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout);
	const uint64_t errors_before = words.errors.load(std::memory_order_acquire);
	auto outcome = [&]() -> int {
		if (words.success.load(std::memory_order_acquire) >= threshold)
			return 0;
		if (words.errors.load(std::memory_order_acquire) != errors_before)
			return -FI_EAVAIL;
		return 1;
	};
	for (;;) {
		progress();
		if (int rc = outcome(); rc <= 0)
			return rc;
		const bool armed = arm();
		if (armed) {
			/* What completed before the arm raised no event. */
			progress();
			if (int rc = outcome(); rc <= 0)
				return rc;
		}
		const int left = timeout < 0 ? -1 : remaining_ms(deadline);
		if (timeout >= 0 && left == 0)
			return -FI_ETIMEDOUT;
		if (!armed) {
			std::this_thread::sleep_for(std::chrono::microseconds(50));
			continue;
		}
		if (wait_fd.wait(left) < 0 && errno != EINTR)
			return fi_error_of_errno(errno);
		wait_fd.drain();
	}
}

/* 0 when it is safe to sleep on the counter's fd: every source armed and
 * the counter unchanged since the last fi_trywait (a completion reported
 * only to a counter adds no CQ entry, so the value is what says it came). */
int Counter::trywait()
{
	if (!waitable) {
		ND_WARN(FI_LOG_CNTR, "fi_trywait: the counter was opened with FI_WAIT_NONE\n");
		return -FI_EINVAL;
	}
	auto moved = [this] {
		const uint64_t now = words.success.load(std::memory_order_acquire) +
				     words.errors.load(std::memory_order_acquire);
		return observed.exchange(now, std::memory_order_acq_rel) != now;
	};
	const bool woken = wait_fd.drain();
	progress();
	if (moved() || woken)
		return -FI_EAGAIN;
	if (!arm())
		return -FI_EAGAIN; /* a source without a channel: keep polling */
	progress();
	return moved() ? -FI_EAGAIN : 0;
}

int Counter::close()
{
	return close_bound_domain_child(this, FI_LOG_CNTR, "cntr");
}

namespace {

Counter *cntr_of(fid_cntr *c) { return from_fid<Counter>(c); }

uint64_t cntr_read(fid_cntr *c) noexcept
{
	Counter *counter = cntr_of(c);
	guarded("fi_cntr_read", [&] { counter->progress(); return 0; });
	return counter->words.success.load(std::memory_order_acquire);
}

uint64_t cntr_readerr(fid_cntr *c) noexcept
{
	Counter *counter = cntr_of(c);
	guarded("fi_cntr_readerr", [&] { counter->progress(); return 0; });
	return counter->words.errors.load(std::memory_order_acquire);
}

int cntr_add(fid_cntr *c, uint64_t value) noexcept
{
	cntr_of(c)->words.success.fetch_add(value, std::memory_order_acq_rel);
	cntr_of(c)->wake();
	return 0;
}

int cntr_adderr(fid_cntr *c, uint64_t value) noexcept
{
	cntr_of(c)->words.errors.fetch_add(value, std::memory_order_acq_rel);
	cntr_of(c)->wake();
	return 0;
}

int cntr_set(fid_cntr *c, uint64_t value) noexcept
{
	cntr_of(c)->words.success.store(value, std::memory_order_release);
	cntr_of(c)->wake();
	return 0;
}

int cntr_seterr(fid_cntr *c, uint64_t value) noexcept
{
	cntr_of(c)->words.errors.store(value, std::memory_order_release);
	cntr_of(c)->wake();
	return 0;
}

int cntr_wait(fid_cntr *c, uint64_t threshold, int timeout) noexcept
{
	Counter *counter = cntr_of(c);
	return guarded("fi_cntr_wait", [&] { return counter->wait(threshold, timeout); });
}

} // namespace

int cntr_trywait(fid *fid) noexcept
{
	return guarded("fi_trywait(cntr)", [&] { return from_fid<Counter>(fid)->trywait(); });
}

namespace {

int cntr_close(fid *fid) noexcept
{
	return guarded("fi_close(cntr)", [&] { return from_fid<Counter>(fid)->close(); });
}

int cntr_control(fid *fid, int command, void *arg) noexcept
{
	Counter *counter = from_fid<Counter>(fid);
	/* Only FI_WAIT_FD promises an fd; FI_WAIT_UNSPEC is for fi_cntr_wait. */
	const bool fd = counter->wait_obj == FI_WAIT_FD;
	return control_wait(FI_LOG_CNTR, "cntr", command, arg, fd ? counter->wait_fd.fd() : -1,
			    fd ? FI_WAIT_FD : counter->wait_obj);
}

fi_ops cntr_fid_ops = {
	.size = sizeof(fi_ops),
	.close = cntr_close,
	.bind = unsupported::bind,
	.control = cntr_control,
	.ops_open = unsupported::ops_open,
	.tostr = nullptr,
	.ops_set = nullptr,
};

fi_ops_cntr cntr_ops = {
	.size = sizeof(fi_ops_cntr),
	.read = cntr_read,
	.readerr = cntr_readerr,
	.add = cntr_add,
	.set = cntr_set,
	.wait = cntr_wait,
	.adderr = cntr_adderr,
	.seterr = cntr_seterr,
};

} // namespace

int cntr_open(fid_domain *fdomain, fi_cntr_attr *attr, fid_cntr **out, void *context) noexcept
{
	return guarded("fi_cntr_open", [&] {
		if (!fdomain || !out) {
			ND_WARN(FI_LOG_CNTR, "fi_cntr_open: domain and cntr must not be NULL\n");
			return -FI_EINVAL;
		}
		if (attr) {
			if (attr->events != FI_CNTR_EVENTS_COMP) {
				ND_WARN(FI_LOG_CNTR, "fi_cntr_open: events %d; only FI_CNTR_EVENTS_COMP\n",
					attr->events);
				return -FI_ENOSYS;
			}
			if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC &&
			    attr->wait_obj != FI_WAIT_FD && attr->wait_obj != FI_WAIT_SET) {
				ND_WARN(FI_LOG_CNTR, "fi_cntr_open: wait object %d not supported (FI_WAIT_NONE, _UNSPEC, _FD, _SET)\n",
					attr->wait_obj);
				return -FI_ENOSYS;
			}
			if (attr->flags) {
				ND_WARN(FI_LOG_CNTR, "fi_cntr_open: flags 0x%llx not supported\n",
					static_cast<unsigned long long>(attr->flags));
				return -FI_EBADFLAGS;
			}
		}
		Domain *domain = from_fid<Domain>(fdomain);
		auto counter = std::make_unique<Counter>();
		counter->domain = domain;
		counter->wait_obj = attr ? attr->wait_obj : FI_WAIT_UNSPEC;
		counter->waitable = counter->wait_obj != FI_WAIT_NONE;
		WaitSet *set = nullptr;
		if (counter->wait_obj == FI_WAIT_SET && !(set = wait_set_of(attr->wait_set, "fi_cntr_open")))
			return -FI_EINVAL;
		if (counter->waitable) {
			if (int err = counter->wait_fd.open()) {
				ND_WARN(FI_LOG_CNTR, "fi_cntr_open: wait fd: %s\n", std::strerror(err));
				return fi_error_of_errno(err);
			}
		}
		if (set) {
			if (int rc = counter->wait_fd.join(set, &counter->cntr.fid))
				return rc;
		}
		counter->cntr.fid.fclass = FI_CLASS_CNTR;
		counter->cntr.fid.context = context;
		counter->cntr.fid.ops = &cntr_fid_ops;
		counter->cntr.ops = &cntr_ops;
		domain->children.acquire();
		*out = &counter.release()->cntr;
		return 0;
	});
}

} // namespace nd
