/*
 * guest_poll.cpp: the poll set on a real device (suite poll): what fi_poll
 * reports of its CQs and counters, and that its members cannot close while
 * in it.
 */
#include <criterion/criterion.h>

#include "data_fixture.h"

#include <unistd.h>

using namespace nd::test;

TestSuite(poll, .timeout = 120);

/* Poll sets are deprecated in libfabric 2.x's headers, still part of its
 * API (fabtests' fi_poll uses them): this test calls them as they are. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* fi_poll_open (fabtests fi_poll): a poll set reports each CQ that holds an
 * entry, once per call until it is read, and each counter whose count moved
 * since the set last reported it; members cannot close while in the set. */
Test(poll, poll_set_reports_cqs_with_entries_and_counters_that_moved)
{
	DataFixture f;
	f.open();
	fid_cntr *recvs = nullptr;
	cr_assert_eq(fi_cntr_open(f.domain, nullptr, &recvs, nullptr), 0);
	DataOptions o;
	o.before_enable = [&](fid_ep *ep, bool client) {
		if (!client)
			cr_assert_eq(fi_ep_bind(ep, &recvs->fid, FI_RECV), 0);
	};
	auto [c, s] = f.connect_data(o);
	int cq_context = 0, counter_context = 0;
	c.cq->fid.context = &cq_context;
	recvs->fid.context = &counter_context;

	fid_poll *set = nullptr;
	fi_poll_attr attr{};
	cr_assert_eq(fi_poll_open(f.domain, &attr, &set), 0);
	cr_assert_eq(fi_poll_add(set, &c.cq->fid, 0), 0);
	cr_assert_eq(fi_poll_add(set, &recvs->fid, 0), 0);
	cr_assert_eq(fi_poll_add(set, &recvs->fid, 0), -FI_EALREADY);
	cr_assert_eq(fi_poll_add(set, &f.eq->fid, 0), -FI_EINVAL, "CQs and counters only");
	void *found[4] = {};
	cr_assert_eq(fi_poll(set, found, 4), 0, "nothing happened yet");

	Buffer &src = f.buffer(32, 7);
	Buffer &dst = f.buffer(32, 0);
	cr_assert_eq(fi_recv(s.ep, dst.data(), 32, dst.desc(), 0, nullptr), 0);
	cr_assert_eq(fi_send(c.ep, src.data(), 32, src.desc(), 0, nullptr), 0);
	bool saw_cq = false, saw_counter = false;
	for (int tries = 0; tries < 10000 && !(saw_cq && saw_counter); tries++) {
		int n = fi_poll(set, found, 4);
		cr_assert_geq(n, 0);
		for (int i = 0; i < n; i++) {
			cr_assert(found[i] == &cq_context || found[i] == &counter_context);
			if (found[i] == &counter_context) {
				cr_assert_not(saw_counter, "a counter is reported once per change");
				saw_counter = true;
			} else {
				saw_cq = true;
			}
		}
		if (!(saw_cq && saw_counter))
			usleep(100);
	}
	cr_assert(saw_cq && saw_counter, "cq %d counter %d", saw_cq, saw_counter);
	cr_assert_eq(fi_cntr_read(recvs), 1u);
	cr_assert(dst.bytes == src.bytes, "the message arrived");
	cr_assert_eq(fi_poll(set, found, 4), 1, "the CQ still holds its entry");
	cr_assert_eq(found[0], &cq_context);
	cr_assert_eq(fi_close(&recvs->fid), -FI_EBUSY, "in a poll set and bound");
	fi_cq_data_entry entry;
	cr_assert_eq(fi_cq_read(c.cq, &entry, 1), 1);
	cr_assert_eq(fi_poll(set, found, 4), 0, "read: nothing left to report");

	cr_assert_eq(fi_poll_del(set, &recvs->fid, 0), 0);
	cr_assert_eq(fi_poll_del(set, &recvs->fid, 0), -FI_ENOENT);
	cr_assert_eq(fi_close(&set->fid), 0);
	f.close_pair(c.ep, s.ep);
	cr_assert_eq(fi_close(&recvs->fid), 0);
	f.close_data();
}

#pragma GCC diagnostic pop
