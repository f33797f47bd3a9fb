/*
 * unit_async.cpp: verbs asynchronous events (nd_async.h) on the host: the
 * events a failing queue pair or device produces are fed through the
 * registry's routing and the endpoint's own handler, into a real EQ. No
 * device is involved: the contexts and queue pairs are stand-ins that the
 * routing only compares, and the endpoint has no queue pair to flush.
 */
#include <criterion/criterion.h>

#include "nd_async.h"
#include "nd_cm_data.h"
#include "nd_domain.h"
#include "nd_ep.h"
#include "nd_eq.h"

#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <sys/epoll.h>
#include <unistd.h>

#include <cstring>
#include <vector>

using namespace nd;

namespace {

struct Heard {
	void *owner;
	ibv_event_type type;
	int error;
};
std::vector<Heard> heard;

void record(void *owner, ibv_event_type type, int error)
{
	heard.push_back({owner, type, error});
}

/* Distinct addresses that stand for queue pairs and devices. */
ibv_context device_a{}, device_b{};
int qp_storage[3];
ibv_qp *fake_qp(int i) { return reinterpret_cast<ibv_qp *>(&qp_storage[i]); }

void setup() { heard.clear(); }

} // namespace

TestSuite(async, .init = setup);

Test(async, a_queue_pair_error_reaches_its_owner_only)
{
	int owner0, owner1;
	async::add_qp(&device_a, fake_qp(0), record, &owner0);
	async::add_qp(&device_a, fake_qp(1), record, &owner1);
	for (ibv_event_type e : {IBV_EVENT_QP_FATAL, IBV_EVENT_QP_REQ_ERR, IBV_EVENT_QP_ACCESS_ERR}) {
		heard.clear();
		async::route(&device_a, e, fake_qp(1));
		cr_assert_eq(heard.size(), 1u, "%s", ibv_event_type_str(e));
		cr_assert_eq(heard[0].owner, &owner1);
		cr_assert_eq(heard[0].type, e);
		cr_assert_eq(heard[0].error, FI_ECONNABORTED);
	}
	async::remove_qp(fake_qp(0));
	async::remove_qp(fake_qp(1));
}

Test(async, a_device_failure_reaches_every_queue_pair_on_that_device)
{
	int owner0, owner1, owner2;
	async::add_qp(&device_a, fake_qp(0), record, &owner0);
	async::add_qp(&device_a, fake_qp(1), record, &owner1);
	async::add_qp(&device_b, fake_qp(2), record, &owner2);
	async::route(&device_a, IBV_EVENT_DEVICE_FATAL, nullptr);
	cr_assert_eq(heard.size(), 2u);
	for (const Heard &h : heard) {
		cr_assert(h.owner == &owner0 || h.owner == &owner1, "only device A's queue pairs");
		cr_assert_eq(h.error, FI_ENODEV);
	}
	for (int i = 0; i < 3; i++)
		async::remove_qp(fake_qp(i));
}

Test(async, informational_events_and_removed_queue_pairs_reach_nobody)
{
	int owner0;
	async::add_qp(&device_a, fake_qp(0), record, &owner0);
	for (ibv_event_type e : {IBV_EVENT_COMM_EST, IBV_EVENT_SQ_DRAINED, IBV_EVENT_PATH_MIG,
				 IBV_EVENT_QP_LAST_WQE_REACHED, IBV_EVENT_PORT_ERR, IBV_EVENT_PORT_ACTIVE,
				 IBV_EVENT_LID_CHANGE, IBV_EVENT_GID_CHANGE, IBV_EVENT_CQ_ERR,
				 IBV_EVENT_SRQ_LIMIT_REACHED})
		async::route(&device_a, e, async::names_qp(e) ? fake_qp(0) : nullptr);
	cr_assert_eq(heard.size(), 0u, "informational events are logged only");
	async::remove_qp(fake_qp(0));
	async::route(&device_a, IBV_EVENT_QP_FATAL, fake_qp(0));
	async::route(&device_a, IBV_EVENT_DEVICE_FATAL, nullptr);
	cr_assert_eq(heard.size(), 0u, "an unregistered queue pair has no owner to tell");
}

Test(async, every_watching_epoll_set_sees_a_device_in_use)
{
	int pipe_fds[2];
	cr_assert_eq(pipe(pipe_fds), 0);
	ibv_context device{};
	device.async_fd = pipe_fds[0];
	const int before = epoll_create1(0);
	cr_assert_eq(async::watch(before), 0);
	cr_assert_eq(async::device_open(&device), 0);
	cr_assert_eq(async::device_open(&device), 0, "a second domain on the device");
	const int after = epoll_create1(0);
	cr_assert_eq(async::watch(after), 0);
	cr_assert_eq(write(pipe_fds[1], "x", 1), 1);
	epoll_event ev;
	cr_assert_eq(epoll_wait(before, &ev, 1, 0), 1, "watched before the device came");
	cr_assert_eq(ev.data.fd, pipe_fds[0]);
	cr_assert_eq(epoll_wait(after, &ev, 1, 0), 1, "watched after");
	async::device_close(&device);
	cr_assert_eq(epoll_wait(before, &ev, 1, 0), 1, "one domain still uses the device");
	async::device_close(&device);
	cr_assert_eq(epoll_wait(before, &ev, 1, 0), 0, "no domain uses it: not watched");
	cr_assert_eq(epoll_wait(after, &ev, 1, 0), 0);
	async::unwatch(before);
	async::unwatch(after);
	close(before);
	close(after);
	close(pipe_fds[0]);
	close(pipe_fds[1]);
}

/* The endpoint's own handler: one error entry naming the endpoint, the
 * event readable by fi_eq_strerror, however many events follow. */
Test(async, the_endpoint_handler_reports_once_on_its_eq)
{
	fi_eq_attr attr{};
	attr.wait_obj = FI_WAIT_FD;
	fid_eq *eq = nullptr;
	cr_assert_eq(EventQueue::open(FI_VERSION(1, 17), nullptr, &attr, nullptr, &eq), 0);
	Domain domain{};
	fi_tx_attr tx{};
	fi_rx_attr rx{};
	fi_info info{};
	info.tx_attr = &tx;
	info.rx_attr = &rx;
	Endpoint ep(&domain, info, cm::Side::active);
	ep.ep.fid.fclass = FI_CLASS_EP;
	ep.ep.fid.context = &domain;
	ep.eq = from_fid<EventQueue>(eq);
	async::add_qp(&device_a, fake_qp(0), ep_async_event, &ep);
	async::route(&device_a, IBV_EVENT_QP_FATAL, fake_qp(0));
	async::route(&device_a, IBV_EVENT_DEVICE_FATAL, nullptr);
	async::remove_qp(fake_qp(0));

	fi_eq_err_entry err{};
	uint32_t event;
	char buf[64];
	cr_assert_eq(fi_eq_read(eq, &event, buf, sizeof(buf), 0), -FI_EAVAIL);
	cr_assert_eq(fi_eq_readerr(eq, &err, 0), (ssize_t)sizeof(err));
	cr_assert_eq(err.fid, &ep.ep.fid);
	cr_assert_eq(err.context, &domain);
	cr_assert_eq(err.err, FI_ECONNABORTED);
	cr_assert_eq(err.prov_errno, cm::kAsyncEventBase + IBV_EVENT_QP_FATAL);
	cr_assert_str_eq(fi_eq_strerror(eq, err.prov_errno, nullptr, nullptr, 0),
			 ibv_event_type_str(IBV_EVENT_QP_FATAL));
	cr_assert_eq(fi_eq_read(eq, &event, buf, sizeof(buf), 0), -FI_EAGAIN,
		     "the device failure that followed is not reported twice");
	cr_assert_eq(ep.data.link.state(), LinkState::broken, "transfers fail with -FI_ECONNABORTED");
	cr_assert_eq(fi_close(&eq->fid), 0);
}
