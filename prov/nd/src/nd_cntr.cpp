/* nd_cntr.cpp: counters (fi_cntr_open and its operations). */
#include "nd_cntr.h"
#include "nd_domain.h"
#include "nd_unsupported.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

namespace nd {

void Counter::attach(const void *user)
{
	std::lock_guard<std::mutex> guard(sources_lock);
	if (std::find(users.begin(), users.end(), user) == users.end()) {
		users.push_back(user);
		bound.acquire();
	}
}

void Counter::detach(const void *user) noexcept
{
	std::lock_guard<std::mutex> guard(sources_lock);
	auto it = std::find(users.begin(), users.end(), user);
	if (it != users.end()) {
		users.erase(it);
		bound.release();
	}
}

void Counter::watch(CompletionQueue *cq)
{
	std::lock_guard<std::mutex> guard(sources_lock);
	cqs.push_back(cq);
}

void Counter::unwatch(CompletionQueue *cq) noexcept
{
	std::lock_guard<std::mutex> guard(sources_lock);
	auto it = std::find(cqs.begin(), cqs.end(), cq);
	if (it != cqs.end())
		cqs.erase(it);
}

void Counter::progress()
{
	std::lock_guard<std::mutex> guard(sources_lock);
	/* A CQ watched through several endpoints is polled once per watch:
	 * the second poll finds it empty, which costs less than sorting. */
	for (CompletionQueue *cq : cqs)
		cq_progress(*cq);
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
	return counter->value.load(std::memory_order_acquire);
}

uint64_t cntr_readerr(fid_cntr *c) noexcept
{
	Counter *counter = cntr_of(c);
	guarded("fi_cntr_readerr", [&] { counter->progress(); return 0; });
	return counter->errors.load(std::memory_order_acquire);
}

int cntr_add(fid_cntr *c, uint64_t value) noexcept
{
	cntr_of(c)->value.fetch_add(value, std::memory_order_acq_rel);
	return 0;
}

int cntr_adderr(fid_cntr *c, uint64_t value) noexcept
{
	cntr_of(c)->errors.fetch_add(value, std::memory_order_acq_rel);
	return 0;
}

int cntr_set(fid_cntr *c, uint64_t value) noexcept
{
	cntr_of(c)->value.store(value, std::memory_order_release);
	return 0;
}

int cntr_seterr(fid_cntr *c, uint64_t value) noexcept
{
	cntr_of(c)->errors.store(value, std::memory_order_release);
	return 0;
}

/* Polls: progress the endpoints' CQs until the threshold, an error, or the
 * timeout (milliseconds, -1 for none). */
int cntr_wait(fid_cntr *c, uint64_t threshold, int timeout) noexcept
{
	Counter *counter = cntr_of(c);
	return guarded("fi_cntr_wait", [&] {
		const auto start = std::chrono::steady_clock::now();
		const uint64_t errors_before = counter->errors.load(std::memory_order_acquire);
		for (;;) {
			counter->progress();
			if (counter->value.load(std::memory_order_acquire) >= threshold)
				return 0;
			if (counter->errors.load(std::memory_order_acquire) != errors_before)
				return -FI_EAVAIL;
			if (timeout >= 0 && std::chrono::steady_clock::now() - start >=
						    std::chrono::milliseconds(timeout))
				return -FI_ETIMEDOUT;
			std::this_thread::sleep_for(std::chrono::microseconds(50));
		}
	});
}

int cntr_close(fid *fid) noexcept
{
	return guarded("fi_close(cntr)", [&] { return from_fid<Counter>(fid)->close(); });
}

int cntr_bind(fid *, fid *, uint64_t) noexcept
{
	ND_WARN(FI_LOG_CNTR, "fi_cntr_bind: nothing binds to a counter (wait sets are not supported)\n");
	return -FI_ENOSYS;
}

int cntr_control(fid *, int command, void *) noexcept
{
	ND_WARN(FI_LOG_CNTR, "fi_control(cntr): command %d not supported (counters have no wait object)\n",
		command);
	return -FI_ENOSYS;
}

fi_ops cntr_fid_ops = {
	.size = sizeof(fi_ops),
	.close = cntr_close,
	.bind = cntr_bind,
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
			if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC) {
				ND_WARN(FI_LOG_CNTR, "fi_cntr_open: wait object %d not supported; fi_cntr_wait polls\n",
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
