/*
 * guest_wait.cpp: the wait set on a real device (suite wait): it sleeps
 * until one of its CQs or EQs has something, through fi_wait and through
 * its fd. (Counters in a wait set: guest_cntr.cpp.)
 */
#include <criterion/criterion.h>

#include "data_fixture.h"

#include <poll.h>

#include <chrono>
#include <thread>

using namespace nd::test;

TestSuite(wait, .timeout = 120);

/* Wait sets are deprecated in libfabric 2.x's headers, still in its API. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* A wait set sleeps until one of its CQs or EQs has something, says so
 * through fi_wait and through its fd, and outlives none of its members. */
Test(wait, wait_set_wakes_for_its_cqs_and_eqs)
{
	DataFixture f;
	f.open();
	fid_wait *ws = nullptr;
	fi_wait_attr wattr{};
	wattr.wait_obj = FI_WAIT_UNSPEC;
	cr_assert_eq(fi_wait_open(f.fabric, &wattr, &ws), 0);
	cr_assert_eq(wattr.wait_obj, FI_WAIT_FD);

	fi_cq_attr cq_attr{};
	cq_attr.format = FI_CQ_FORMAT_DATA;
	cq_attr.wait_obj = FI_WAIT_SET;
	fid_cq *cq = nullptr;
	cr_assert_eq(fi_cq_open(f.domain, &cq_attr, &cq, nullptr), -FI_EINVAL, "FI_WAIT_SET without a set");
	cq_attr.wait_set = ws;
	cr_assert_eq(fi_cq_open(f.domain, &cq_attr, &cq, nullptr), 0);
	fi_eq_attr eq_attr{};
	eq_attr.wait_obj = FI_WAIT_SET;
	eq_attr.flags = FI_WRITE;
	eq_attr.wait_set = ws;
	fid_eq *eq = nullptr;
	cr_assert_eq(fi_eq_open(f.fabric, &eq_attr, &eq, nullptr), 0);
	cr_assert_eq(fi_close(&ws->fid), -FI_EBUSY, "the CQ and the EQ use it");

	DataOptions o;
	o.bind_cq = false;
	fid_cq *client_cq = f.open_cq();
	o.before_enable = [&](fid_ep *ep, bool client) {
		cr_assert_eq(fi_ep_bind(ep, &(client ? client_cq : cq)->fid, FI_TRANSMIT | FI_RECV), 0);
	};
	/* Named, not bound: a lambda captures no structured binding before C++20. */
	const auto sides = f.connect_data(o);
	const Side c = sides.first, s = sides.second;

	const auto t0 = std::chrono::steady_clock::now();
	cr_assert_eq(fi_wait(ws, 100), -FI_ETIMEDOUT, "nothing to wait for");
	cr_assert_geq(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(90));

	/* A message the server's CQ (in the set) completes wakes fi_wait. */
	Buffer &src = f.buffer(32, 9);
	Buffer &dst = f.buffer(32, 0);
	cr_assert_eq(fi_recv(s.ep, dst.data(), 32, dst.desc(), 0, &dst), 0);
	ssize_t sent = -1;
	std::thread sender([&] {
		std::this_thread::sleep_for(std::chrono::milliseconds(100));
		sent = fi_send(c.ep, src.data(), 32, src.desc(), 0, nullptr);
	});
	cr_assert_eq(fi_wait(ws, 10000), 0);
	sender.join();
	cr_assert_eq(sent, 0);
	fi_cq_data_entry entry{};
	cr_assert_eq(fi_cq_read(cq, &entry, 1), 1, "woken with the completion there");
	cr_assert_eq(entry.op_context, &dst);
	cr_assert(dst.bytes == src.bytes);
	wait_cq(client_cq);

	/* An event written to the EQ wakes the set's fd, after fi_trywait. */
	int fd = -1;
	cr_assert_eq(fi_control(&ws->fid, FI_GETWAIT, &fd), 0);
	fid *members[] = {&cq->fid, &eq->fid};
	cr_assert_eq(fi_trywait(f.fabric, members, 2), 0);
	pollfd pfd{fd, POLLIN, 0};
	cr_assert_eq(poll(&pfd, 1, 0), 0, "nothing yet");
	fi_eq_entry written{};
	written.context = &written;
	cr_assert_eq(fi_eq_write(eq, FI_NOTIFY, &written, sizeof(written), 0),
		     static_cast<ssize_t>(sizeof(written)));
	cr_assert_eq(poll(&pfd, 1, 5000), 1, "the EQ's event makes the set readable");
	cr_assert_eq(fi_wait(ws, 0), 0);
	uint32_t event = 0;
	fi_eq_entry got{};
	cr_assert_eq(fi_eq_read(eq, &event, &got, sizeof(got), 0), static_cast<ssize_t>(sizeof(got)));
	cr_assert_eq(got.context, &written);
	cr_assert_eq(fi_wait(ws, 0), -FI_ETIMEDOUT, "read: nothing left");

	f.close_pair(c.ep, s.ep);
	cr_assert_eq(fi_close(&cq->fid), 0);
	cr_assert_eq(fi_close(&eq->fid), 0);
	cr_assert_eq(fi_close(&ws->fid), 0);
	f.close_data();
}

#pragma GCC diagnostic pop
