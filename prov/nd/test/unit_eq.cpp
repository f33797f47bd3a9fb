/*
 * unit_eq.cpp: the event queue's logic (no device involved): reads, error
 * entries, FI_PEEK, short buffers, the wait fd and blocking reads.
 */
#include <criterion/criterion.h>

#include "nd_cm_data.h"
#include "nd_eq.h"

#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <poll.h>

#include <chrono>
#include <cstring>
#include <thread>

using namespace nd;

namespace {

fid_eq *open_eq(fi_wait_obj wait = FI_WAIT_FD, uint64_t flags = FI_WRITE, size_t size = 0,
		uint32_t version = FI_VERSION(1, 17), ChildCount *parent = nullptr)
{
	fi_eq_attr attr{};
	attr.wait_obj = wait;
	attr.flags = flags;
	attr.size = size;
	fid_eq *eq = nullptr;
	cr_assert_eq(EventQueue::open(version, parent, &attr, nullptr, &eq), 0);
	return eq;
}

EventQueue *queue(fid_eq *eq) { return from_fid<EventQueue>(eq); }

void push_error(fid_eq *eq, int err, const std::vector<uint8_t> &data)
{
	EqEntry entry;
	entry.is_error = true;
	entry.error.err = err;
	entry.error.prov_errno = -err;
	entry.err_data = data;
	queue(eq)->push(std::move(entry));
}

bool readable(int fd)
{
	pollfd pfd{fd, POLLIN, 0};
	return poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN);
}

} // namespace

Test(eq, empty_queue_reads_eagain)
{
	fid_eq *eq = open_eq();
	uint32_t event;
	char buf[64];
	cr_assert_eq(fi_eq_read(eq, &event, buf, sizeof(buf), 0), -FI_EAGAIN);
	fi_eq_err_entry err{};
	cr_assert_eq(fi_eq_readerr(eq, &err, 0), -FI_EAGAIN);
	cr_assert_eq(fi_close(&eq->fid), 0);
}

Test(eq, write_then_read_returns_the_same_bytes)
{
	fid_eq *eq = open_eq();
	fi_eq_entry in{};
	in.context = reinterpret_cast<void *>(0x1234);
	in.data = 42;
	cr_assert_eq(fi_eq_write(eq, FI_NOTIFY, &in, sizeof(in), 0), (ssize_t)sizeof(in));
	fi_eq_entry out{};
	uint32_t event = 0;
	cr_assert_eq(fi_eq_read(eq, &event, &out, sizeof(out), 0), (ssize_t)sizeof(out));
	cr_assert_eq(event, (uint32_t)FI_NOTIFY);
	cr_assert_eq(out.context, in.context);
	cr_assert_eq(out.data, 42u);
	cr_assert_eq(fi_eq_read(eq, &event, &out, sizeof(out), 0), -FI_EAGAIN);
	fi_close(&eq->fid);
}

Test(eq, write_needs_fi_write_and_valid_buffers)
{
	fid_eq *eq = open_eq(FI_WAIT_FD, 0);
	int payload = 1;
	cr_assert_eq(fi_eq_write(eq, FI_NOTIFY, &payload, sizeof(payload), 0), -FI_EINVAL);
	fi_close(&eq->fid);
	eq = open_eq();
	cr_assert_eq(fi_eq_write(eq, FI_NOTIFY, nullptr, 4, 0), -FI_EINVAL);
	cr_assert_eq(queue(eq)->depth(), 0u, "nothing queued by a failed write");
	fi_close(&eq->fid);
}

Test(eq, short_buffer_is_etoosmall_and_loses_nothing)
{
	fid_eq *eq = open_eq();
	char in[40];
	memset(in, 0xab, sizeof(in));
	fi_eq_write(eq, FI_NOTIFY, in, sizeof(in), 0);
	char out[40] = {};
	uint32_t event;
	cr_assert_eq(fi_eq_read(eq, &event, out, sizeof(out) - 1, 0), -FI_ETOOSMALL);
	cr_assert_eq(queue(eq)->depth(), 1u);
	cr_assert_eq(fi_eq_read(eq, &event, out, sizeof(out), 0), (ssize_t)sizeof(out));
	cr_assert_arr_eq(out, in, sizeof(in));
	fi_close(&eq->fid);
}

Test(eq, peek_leaves_the_entry)
{
	fid_eq *eq = open_eq();
	int v = 7;
	fi_eq_write(eq, FI_NOTIFY, &v, sizeof(v), 0);
	int out = 0;
	uint32_t event;
	cr_assert_eq(fi_eq_read(eq, &event, &out, sizeof(out), FI_PEEK), (ssize_t)sizeof(out));
	cr_assert_eq(out, 7);
	out = 0;
	cr_assert_eq(fi_eq_read(eq, &event, &out, sizeof(out), 0), (ssize_t)sizeof(out));
	cr_assert_eq(out, 7);
	cr_assert_eq(queue(eq)->depth(), 0u);
	fi_close(&eq->fid);
}

Test(eq, bad_arguments)
{
	fid_eq *eq = open_eq();
	char buf[8];
	cr_assert_eq(fi_eq_read(eq, nullptr, buf, sizeof(buf), 0), -FI_EINVAL);
	cr_assert_eq(fi_eq_read(eq, reinterpret_cast<uint32_t *>(buf), nullptr, 8, 0), -FI_EINVAL);
	cr_assert_eq(fi_eq_readerr(eq, nullptr, 0), -FI_EINVAL);
	cr_assert_eq(fi_control(&eq->fid, FI_GETWAIT, nullptr), -FI_EINVAL);
	cr_assert_eq(fi_control(&eq->fid, 12345, buf), -FI_ENOSYS);
	fi_close(&eq->fid);
	fi_eq_attr attr{};
	fid_eq *none = nullptr;
	cr_assert_eq(EventQueue::open(FI_VERSION(1, 17), nullptr, nullptr, nullptr, &none), -FI_EINVAL);
	cr_assert_eq(EventQueue::open(FI_VERSION(1, 17), nullptr, &attr, nullptr, nullptr), -FI_EINVAL);
	attr.wait_obj = FI_WAIT_SET; /* without a wait set of nd's */
	cr_assert_eq(EventQueue::open(FI_VERSION(1, 17), nullptr, &attr, nullptr, &none), -FI_EINVAL);
	cr_assert_null(none);
	attr.wait_obj = FI_WAIT_MUTEX_COND;
	cr_assert_eq(EventQueue::open(FI_VERSION(1, 17), nullptr, &attr, nullptr, &none), -FI_ENOSYS);
	attr.wait_obj = FI_WAIT_FD;
	attr.flags = 1ull << 40;
	cr_assert_eq(EventQueue::open(FI_VERSION(1, 17), nullptr, &attr, nullptr, &none), -FI_EBADFLAGS);
	cr_assert_null(none);
}

Test(eq, error_entries_block_reads_until_readerr)
{
	fid_eq *eq = open_eq();
	push_error(eq, FI_ECONNREFUSED, {1, 2, 3});
	uint32_t event;
	char buf[64];
	cr_assert_eq(fi_eq_read(eq, &event, buf, sizeof(buf), 0), -FI_EAVAIL);
	uint8_t mine[8] = {};
	fi_eq_err_entry err{};
	err.err_data = mine;
	err.err_data_size = sizeof(mine);
	cr_assert_eq(fi_eq_readerr(eq, &err, 0), (ssize_t)sizeof(err));
	cr_assert_eq(err.err, FI_ECONNREFUSED);
	cr_assert_eq(err.err_data, mine, "copied into the application's buffer");
	cr_assert_eq(err.err_data_size, 3u);
	cr_assert_eq(mine[2], 3);
	cr_assert_eq(fi_eq_read(eq, &event, buf, sizeof(buf), 0), -FI_EAGAIN);
	fi_close(&eq->fid);
}

Test(eq, readerr_err_data_owned_by_provider_when_asked)
{
	fid_eq *eq = open_eq();
	push_error(eq, FI_ECONNREFUSED, {9, 8, 7, 6});
	fi_eq_err_entry err{};
	cr_assert_eq(fi_eq_readerr(eq, &err, FI_PEEK), (ssize_t)sizeof(err));
	cr_assert_eq(queue(eq)->depth(), 1u, "FI_PEEK keeps the error");
	cr_assert_eq(err.err_data_size, 4u);
	cr_assert_eq(static_cast<uint8_t *>(err.err_data)[0], 9);
	uint8_t small[2] = {};
	err = {};
	err.err_data = small;
	err.err_data_size = sizeof(small);
	cr_assert_eq(fi_eq_readerr(eq, &err, 0), (ssize_t)sizeof(err));
	cr_assert_eq(err.err_data_size, 2u, "truncated to the application's buffer");
	cr_assert_eq(small[1], 8);
	fi_close(&eq->fid);
}

Test(eq, api_before_1_5_always_gets_the_provider_buffer)
{
	fid_eq *eq = open_eq(FI_WAIT_FD, FI_WRITE, 0, FI_VERSION(1, 4));
	push_error(eq, FI_ETIMEDOUT, {5});
	uint8_t mine[4] = {};
	fi_eq_err_entry err{};
	err.err_data = mine;
	err.err_data_size = sizeof(mine);
	cr_assert_eq(fi_eq_readerr(eq, &err, 0), (ssize_t)sizeof(err));
	cr_assert_neq(err.err_data, mine);
	cr_assert_eq(static_cast<uint8_t *>(err.err_data)[0], 5);
	cr_assert_eq(mine[0], 0);
	fi_close(&eq->fid);
}

Test(eq, wait_fd_is_readable_exactly_while_entries_are_queued)
{
	fid_eq *eq = open_eq(FI_WAIT_UNSPEC);
	fi_wait_obj obj;
	cr_assert_eq(fi_control(&eq->fid, FI_GETWAITOBJ, &obj), 0);
	cr_assert_eq(obj, FI_WAIT_FD, "UNSPEC becomes an fd");
	int fd = -1;
	cr_assert_eq(fi_control(&eq->fid, FI_GETWAIT, &fd), 0);
	cr_assert_geq(fd, 0);
	cr_assert_not(readable(fd));
	int v = 1;
	fi_eq_write(eq, FI_NOTIFY, &v, sizeof(v), 0);
	fi_eq_write(eq, FI_NOTIFY, &v, sizeof(v), 0);
	cr_assert(readable(fd));
	uint32_t event;
	fi_eq_read(eq, &event, &v, sizeof(v), 0);
	cr_assert(readable(fd), "one entry left");
	fi_eq_read(eq, &event, &v, sizeof(v), FI_PEEK);
	cr_assert(readable(fd), "a peek does not consume");
	fi_eq_read(eq, &event, &v, sizeof(v), 0);
	cr_assert_not(readable(fd));
	cr_assert_eq(queue(eq)->trywait(), 0);
	fi_close(&eq->fid);
}

Test(eq, sread_times_out_with_eagain)
{
	fid_eq *eq = open_eq();
	uint32_t event;
	char buf[16];
	auto start = std::chrono::steady_clock::now();
	cr_assert_eq(fi_eq_sread(eq, &event, buf, sizeof(buf), 50, 0), -FI_EAGAIN);
	auto waited = std::chrono::steady_clock::now() - start;
	cr_assert_geq(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count(), 45);
	fi_close(&eq->fid);
}

Test(eq, sread_wakes_when_an_event_arrives)
{
	fid_eq *eq = open_eq();
	std::thread writer([eq] {
		std::this_thread::sleep_for(std::chrono::milliseconds(20));
		int v = 99;
		fi_eq_write(eq, FI_NOTIFY, &v, sizeof(v), 0);
	});
	uint32_t event = 0;
	int v = 0;
	cr_assert_eq(fi_eq_sread(eq, &event, &v, sizeof(v), 10000, 0), (ssize_t)sizeof(v));
	cr_assert_eq(v, 99);
	writer.join();
	fi_close(&eq->fid);
}

/* What a deferred piece of work saw and did (EventQueue::defer). */
struct DeferredProbe {
	fid_eq *eq;
	int runs = 0;
	bool report = false;	/* push an FI_SHUTDOWN-like entry when run */
};

void run_probe(void *owner)
{
	auto *probe = static_cast<DeferredProbe *>(owner);
	probe->runs++;
	if (probe->report) {
		EqEntry entry;
		entry.event = FI_SHUTDOWN;
		entry.data.assign(sizeof(fi_eq_entry), 0);
		queue(probe->eq)->push(std::move(entry));
	}
}

int wait_fd(fid_eq *eq)
{
	int fd = -1;
	cr_assert_eq(fi_control(&eq->fid, FI_GETWAIT, &fd), 0);
	return fd;
}

Test(eq, deferred_work_wakes_a_sleeping_reader_and_runs_once)
{
	/* A CQ's poller that finds an endpoint's peer gone defers the
	 * endpoint's FI_SHUTDOWN to the EQ, whose reader may be asleep. */
	fid_eq *eq = open_eq();
	DeferredProbe probe{eq};
	probe.report = true;
	std::thread poller([&probe] {
		std::this_thread::sleep_for(std::chrono::milliseconds(20));
		cr_assert_eq(queue(probe.eq)->defer(run_probe, &probe), 0);
	});
	uint32_t event = 0;
	fi_eq_entry entry{};
	cr_assert_eq(fi_eq_sread(eq, &event, &entry, sizeof(entry), 10000, 0), (ssize_t)sizeof(entry));
	cr_assert_eq(event, (uint32_t)FI_SHUTDOWN);
	poller.join();
	cr_assert_eq(fi_eq_read(eq, &event, &entry, sizeof(entry), 0), -FI_EAGAIN);
	cr_assert_eq(probe.runs, 1);
	cr_assert_not(readable(wait_fd(eq)), "no wake-up is left behind");
	fi_close(&eq->fid);
}

Test(eq, deferred_work_that_reports_nothing_leaves_no_wakeup)
{
	fid_eq *eq = open_eq();
	DeferredProbe probe{eq};
	cr_assert_eq(queue(eq)->defer(run_probe, &probe), 0);
	cr_assert(readable(wait_fd(eq)), "a waiter wakes to run it");
	uint32_t event;
	char buf[64];
	cr_assert_eq(fi_eq_read(eq, &event, buf, sizeof(buf), 0), -FI_EAGAIN);
	cr_assert_eq(probe.runs, 1);
	/* Otherwise fi_eq_sread would spin until its timeout. */
	cr_assert_not(readable(wait_fd(eq)));
	fi_close(&eq->fid);
}

Test(eq, cancelled_deferred_work_never_runs)
{
	/* An endpoint's close cancels what it deferred before it is freed. */
	fid_eq *eq = open_eq();
	DeferredProbe closed{eq}, other{eq};
	closed.report = true;
	cr_assert_eq(queue(eq)->defer(run_probe, &closed), 0);
	cr_assert_eq(queue(eq)->defer(run_probe, &other), 0);
	queue(eq)->cancel_deferred(&closed);
	uint32_t event;
	char buf[64];
	cr_assert_eq(fi_eq_read(eq, &event, buf, sizeof(buf), 0), -FI_EAGAIN);
	cr_assert_eq(closed.runs, 0);
	cr_assert_eq(other.runs, 1);
	fi_close(&eq->fid);
}

Test(eq, sread_needs_a_wait_object)
{
	fid_eq *eq = open_eq(FI_WAIT_NONE);
	uint32_t event;
	char buf[8];
	cr_assert_eq(fi_eq_sread(eq, &event, buf, sizeof(buf), 0, 0), -FI_EINVAL);
	int fd;
	cr_assert_eq(fi_control(&eq->fid, FI_GETWAIT, &fd), -FI_ENODATA);
	fi_close(&eq->fid);
}

Test(eq, yield_wait_object_spins)
{
	fid_eq *eq = open_eq(FI_WAIT_YIELD);
	uint32_t event;
	char buf[8];
	cr_assert_eq(fi_eq_sread(eq, &event, buf, sizeof(buf), 5, 0), -FI_EAGAIN);
	fi_close(&eq->fid);
}

Test(eq, full_queue_refuses_application_writes)
{
	fid_eq *eq = open_eq(FI_WAIT_FD, FI_WRITE, 2);
	int v = 0;
	cr_assert_eq(fi_eq_write(eq, FI_NOTIFY, &v, sizeof(v), 0), (ssize_t)sizeof(v));
	cr_assert_eq(fi_eq_write(eq, FI_NOTIFY, &v, sizeof(v), 0), (ssize_t)sizeof(v));
	cr_assert_eq(fi_eq_write(eq, FI_NOTIFY, &v, sizeof(v), 0), -FI_EAGAIN);
	/* Provider events are never dropped, even past the size. */
	EqEntry entry;
	entry.event = FI_SHUTDOWN;
	queue(eq)->push(std::move(entry));
	cr_assert_eq(queue(eq)->depth(), 3u);
	fi_close(&eq->fid);
}

Test(eq, close_is_refused_while_bound_and_releases_the_parent)
{
	ChildCount parent;
	fid_eq *eq = open_eq(FI_WAIT_FD, FI_WRITE, 0, FI_VERSION(1, 17), &parent);
	cr_assert_eq(parent.value(), 1);
	queue(eq)->bound.acquire();
	cr_assert_eq(fi_close(&eq->fid), -FI_EBUSY);
	queue(eq)->bound.release();
	cr_assert_eq(fi_close(&eq->fid), 0);
	cr_assert_eq(parent.value(), 0);
}

Test(eq, unread_connreq_info_is_freed_at_close)
{
	/* Under ASan/valgrind a leak here fails the run. */
	fid_eq *eq = open_eq();
	EqEntry entry;
	entry.event = FI_CONNREQ;
	entry.owned_info = fi_allocinfo();
	entry.data.resize(sizeof(fi_eq_cm_entry));
	queue(eq)->push(std::move(entry));
	cr_assert_eq(fi_close(&eq->fid), 0);
}

Test(eq, strerror_names_the_errno)
{
	fid_eq *eq = open_eq();
	char buf[128];
	const char *text = fi_eq_strerror(eq, ETIMEDOUT, nullptr, buf, sizeof(buf));
	cr_assert_eq(text, buf);
	cr_assert_str_eq(buf, strerror(ETIMEDOUT));
	cr_assert_str_eq(fi_eq_strerror(eq, -ECONNREFUSED, nullptr, nullptr, 0), strerror(ECONNREFUSED));
	fi_close(&eq->fid);
}

/* A reject's IB CM reason is no errno: 28 must not read as ENOSPC. */
Test(eq, strerror_names_reject_reasons)
{
	using namespace nd::cm;
	fid_eq *eq = open_eq();
	const int by_application = prov_errno_of(RDMA_CM_EVENT_REJECTED, kRejectConsumer, FI_ECONNREFUSED);
	const int no_listener = prov_errno_of(RDMA_CM_EVENT_REJECTED, kRejectInvalidServiceId, FI_ECONNREFUSED);
	cr_assert_str_eq(fi_eq_strerror(eq, by_application, nullptr, nullptr, 0),
			 "connection rejected by the peer's application");
	cr_assert(strstr(fi_eq_strerror(eq, no_listener, nullptr, nullptr, 0), "nobody listens"));
	char buf[16];
	const char *text = fi_eq_strerror(eq, by_application, nullptr, buf, sizeof(buf));
	cr_assert_eq(text, buf);
	cr_assert_eq(strlen(buf), sizeof(buf) - 1, "cut to the buffer, terminated");
	cr_assert_str_eq(fi_eq_strerror(eq, kRejectReasonBase + 200, nullptr, nullptr, 0),
			 "connection rejected by the peer's connection manager");
	fi_close(&eq->fid);
}

Test(eq, prov_errno_is_never_negative_or_zero_for_an_error)
{
	using namespace nd::cm;
	cr_assert_eq(prov_errno_of(RDMA_CM_EVENT_ADDR_ERROR, -ENETUNREACH, FI_ENETUNREACH), ENETUNREACH);
	cr_assert_eq(prov_errno_of(RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, FI_ETIMEDOUT), ETIMEDOUT);
	cr_assert_eq(prov_errno_of(RDMA_CM_EVENT_REJECTED, -ECONNREFUSED, FI_ECONNREFUSED), ECONNREFUSED,
		     "iWARP's reject is an errno");
	cr_assert_eq(prov_errno_of(RDMA_CM_EVENT_REJECTED, kRejectConsumer, FI_ECONNREFUSED),
		     kRejectReasonBase + kRejectConsumer);
	cr_assert_eq(prov_errno_of(RDMA_CM_EVENT_DISCONNECTED, 0, FI_ECONNABORTED), FI_ECONNABORTED);
	cr_assert_eq(prov_errno_of(RDMA_CM_EVENT_DEVICE_REMOVAL, 0, FI_ENODEV), FI_ENODEV);
}
