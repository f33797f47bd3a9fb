/*
 * guest_cntr.cpp: counters on a real device (suite cntr): what each counts
 * (sends, receives, writes, injects that report to no CQ, errors), with and
 * without selective completion, and their wait objects: an fd that polls
 * readable, fi_cntr_wait woken by completions and by fi_cntr_add, and a
 * wait set.
 */
#include <criterion/criterion.h>

#include "data_fixture.h"

#include <poll.h>

#include <algorithm>

#include <chrono>
#include <thread>

using namespace nd::test;

TestSuite(cntr, .timeout = 120);

Test(cntr, counters_count_completions_and_errors)
{
	DataFixture f;
	f.open();
	fid_cntr *sends = nullptr, *recvs = nullptr, *writes = nullptr;
	fi_cntr_attr attr{};
	attr.events = FI_CNTR_EVENTS_COMP;
	cr_assert_eq(fi_cntr_open(f.domain, &attr, &sends, nullptr), 0);
	cr_assert_eq(fi_cntr_open(f.domain, &attr, &recvs, nullptr), 0);
	cr_assert_eq(fi_cntr_open(f.domain, &attr, &writes, nullptr), 0);
	/* Bind counters before enable: client counts sends and writes,
	 * server counts receives. No CQ is bound. */
	DataOptions o;
	o.bind_cq = false;
	o.before_enable = [&](fid_ep *ep, bool client) {
		if (client) {
			cr_assert_eq(fi_ep_bind(ep, &sends->fid, FI_SEND), 0);
			cr_assert_eq(fi_ep_bind(ep, &writes->fid, FI_WRITE), 0);
			cr_assert_eq(fi_ep_bind(ep, &sends->fid, FI_REMOTE_WRITE), -FI_ENOSYS);
		} else {
			cr_assert_eq(fi_ep_bind(ep, &recvs->fid, FI_RECV), 0);
		}
	};
	auto [c, s] = f.connect_data(o);
	fid_ep *cep = c.ep, *sep = s.ep;
	Buffer &src = f.buffer(64);
	Buffer &dst = f.buffer(64 * 10, 0, FI_REMOTE_WRITE | FI_RECV);
	for (int i = 0; i < 10; i++)
		cr_assert_eq(fi_recv(sep, dst.data() + 64 * i, 64, dst.desc(), 0, nullptr), -FI_ENOCQ,
			     "no CQ to report to without selective completion");
	cr_assert_eq(fi_send(cep, src.data(), 64, src.desc(), 0, nullptr), -FI_ENOCQ);
	cr_assert_eq(fi_close(&cep->fid), 0);
	cr_assert_eq(fi_close(&sep->fid), 0);
	cr_assert_eq(fi_cntr_read(sends), 0u);
	cr_assert_eq(fi_close(&sends->fid), 0);
	cr_assert_eq(fi_close(&recvs->fid), 0);
	cr_assert_eq(fi_close(&writes->fid), 0);
	f.close_data();
}

Test(cntr, counters_with_selective_completion)
{
	DataFixture f;
	f.open();
	fid_cntr *sends = nullptr, *recvs = nullptr, *writes = nullptr;
	cr_assert_eq(fi_cntr_open(f.domain, nullptr, &sends, nullptr), 0);
	cr_assert_eq(fi_cntr_open(f.domain, nullptr, &recvs, nullptr), 0);
	cr_assert_eq(fi_cntr_open(f.domain, nullptr, &writes, nullptr), 0);
	DataOptions o;
	o.selective = true;
	/* connect_data binds the CQ; counters are bound before enable. */
	o.before_enable = [&](fid_ep *ep, bool client) {
		if (client) {
			cr_assert_eq(fi_ep_bind(ep, &sends->fid, FI_SEND), 0);
			cr_assert_eq(fi_ep_bind(ep, &writes->fid, FI_WRITE), 0);
		} else {
			cr_assert_eq(fi_ep_bind(ep, &recvs->fid, FI_RECV), 0);
		}
	};
	auto [c, s] = f.connect_data(o);
	fid_ep *cep = c.ep, *sep = s.ep;
	Buffer &src = f.buffer(64);
	Buffer &dst = f.buffer(64 * 10, 0, FI_REMOTE_WRITE);
	for (int i = 0; i < 10; i++)
		cr_assert_eq(fi_recv(sep, dst.data() + 64 * i, 64, dst.desc(), 0, nullptr), 0);
	for (int i = 0; i < 10; i++)
		cr_assert_eq(fi_send(cep, src.data(), 64, src.desc(), 0, nullptr), 0);
	cr_assert_eq(fi_cntr_wait(sends, 10, 10000), 0);
	cr_assert_eq(fi_cntr_wait(recvs, 10, 10000), 0);
	cr_assert_eq(fi_cntr_read(sends), 10u);
	cr_assert_eq(fi_cntr_read(recvs), 10u);
	cr_assert_eq(fi_cntr_wait(sends, 11, 100), -FI_ETIMEDOUT);
	cr_assert_eq(fi_write(cep, src.data(), 64, src.desc(), 0, dst.addr(), dst.key(), nullptr), 0);
	cr_assert_eq(fi_cntr_wait(writes, 1, 10000), 0);
	/* Injects never report to a CQ, but a counter counts every one. */
	for (int i = 0; i < 5; i++)
		cr_assert_eq(fi_recv(sep, dst.data() + 64 * i, 64, dst.desc(), 0, nullptr), 0);
	for (int i = 0; i < 5; i++)
		cr_assert_eq(fi_inject(cep, src.data(), 8, 0), 0);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(fi_inject_write(cep, src.data(), 8, 0, dst.addr(64 * i), dst.key()), 0);
	cr_assert_eq(fi_cntr_wait(sends, 15, 10000), 0);
	cr_assert_eq(fi_cntr_wait(recvs, 15, 10000), 0);
	cr_assert_eq(fi_cntr_wait(writes, 4, 10000), 0);
	cr_assert_eq(fi_cntr_read(sends), 15u);
	cr_assert_eq(fi_cntr_read(writes), 4u);
	/* A write to a bad key counts as an error. */
	cr_assert_eq(fi_write(cep, src.data(), 64, src.desc(), 0, dst.addr(), dst.key() ^ 0x1100, nullptr), 0);
	cr_assert_eq(fi_cntr_wait(writes, 5, 10000), -FI_EAVAIL);
	cr_assert_eq(fi_cntr_readerr(writes), 1u);
	cr_assert_eq(fi_close(&sends->fid), -FI_EBUSY, "an endpoint is bound");
	cr_assert_eq(fi_close(&cep->fid), 0);
	cr_assert_eq(fi_close(&sep->fid), 0);
	cr_assert_eq(fi_cntr_set(sends, 3), 0);
	cr_assert_eq(fi_cntr_add(sends, 2), 0);
	cr_assert_eq(fi_cntr_read(sends), 5u);
	cr_assert_eq(fi_close(&sends->fid), 0);
	cr_assert_eq(fi_close(&recvs->fid), 0);
	cr_assert_eq(fi_close(&writes->fid), 0);
	f.close_data();
}

/* Wait sets are deprecated in libfabric 2.x's headers, still in its API. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* Counters with wait objects: FI_WAIT_FD gives an fd that polls readable
 * when a completion feeds the counter, fi_cntr_wait sleeps until the
 * threshold (woken by completions and by fi_cntr_add), FI_WAIT_SET counters
 * wake their set, and a CQ that has no wait object cannot feed one. */
Test(cntr, counter_wait_objects_wake_for_completions_and_adds)
{
	DataFixture f;
	f.open();
	fi_cntr_attr attr{};
	attr.events = FI_CNTR_EVENTS_COMP;
	attr.wait_obj = FI_WAIT_SET;
	fid_cntr *recvs = nullptr, *sends = nullptr, *polled = nullptr;
	cr_assert_eq(fi_cntr_open(f.domain, &attr, &sends, nullptr), -FI_EINVAL, "FI_WAIT_SET without a set");
	fid_wait *ws = nullptr;
	fi_wait_attr wattr{};
	wattr.wait_obj = FI_WAIT_FD;
	cr_assert_eq(fi_wait_open(f.fabric, &wattr, &ws), 0);
	attr.wait_set = ws;
	cr_assert_eq(fi_cntr_open(f.domain, &attr, &sends, nullptr), 0);
	attr.wait_set = nullptr;
	attr.wait_obj = FI_WAIT_FD;
	cr_assert_eq(fi_cntr_open(f.domain, &attr, &recvs, nullptr), 0);
	cr_assert_eq(fi_cntr_open(f.domain, nullptr, &polled, nullptr), 0);
	int fd = -1;
	cr_assert_eq(fi_control(&polled->fid, FI_GETWAIT, &fd), -FI_ENODATA, "FI_WAIT_UNSPEC promises no fd");
	cr_assert_eq(fi_control(&recvs->fid, FI_GETWAIT, &fd), 0);

	/* A CQ without a wait object cannot wake an FI_WAIT_FD counter. */
	{
		DataOptions plain;
		fid_cq *cq = nullptr;
		fid_ep *ep = f.make_ep(f.info.get(), plain, &cq);
		cr_assert_eq(fi_ep_bind(ep, &recvs->fid, FI_RECV), 0);
		cr_assert_eq(fi_enable(ep), -FI_EINVAL);
		cr_assert_eq(fi_close(&ep->fid), 0);
	}

	fid_cq *client_cq = f.open_cq();
	fid_cq *server_cq = f.open_cq(0, FI_WAIT_FD);
	DataOptions o;
	o.bind_cq = false;
	o.before_enable = [&](fid_ep *ep, bool client) {
		if (client) {
			cr_assert_eq(fi_ep_bind(ep, &client_cq->fid, FI_TRANSMIT | FI_RECV), 0);
			/* Fed by a CQ without a wait object: it waits by polling. */
			cr_assert_eq(fi_ep_bind(ep, &polled->fid, FI_SEND), 0);
			return;
		}
		/* Selective completion: the counters are the only signal. */
		cr_assert_eq(fi_ep_bind(ep, &server_cq->fid, FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION), 0);
		cr_assert_eq(fi_ep_bind(ep, &recvs->fid, FI_RECV), 0);
		cr_assert_eq(fi_ep_bind(ep, &sends->fid, FI_SEND), 0);
	};
	/* Named, not bound: a lambda captures no structured binding before C++20. */
	const auto sides = f.connect_data(o);
	const Side c = sides.first, s = sides.second;
	Buffer &src = f.buffer(64, 7);
	Buffer &dst = f.buffer(64 * 4, 0);

	/* The fd: quiet after fi_trywait, readable once a message lands. */
	fid *counter_fid[] = {&recvs->fid};
	cr_assert_eq(fi_trywait(f.fabric, counter_fid, 1), 0);
	pollfd pfd{fd, POLLIN, 0};
	cr_assert_eq(poll(&pfd, 1, 0), 0);
	cr_assert_eq(fi_recv(s.ep, dst.data(), 64, dst.desc(), 0, nullptr), 0);
	std::thread sender([&] {
		std::this_thread::sleep_for(std::chrono::milliseconds(100));
		cr_assert_eq(fi_send(c.ep, src.data(), 64, src.desc(), 0, nullptr), 0);
	});
	cr_assert_eq(poll(&pfd, 1, 10000), 1, "the counter's fd woke");
	sender.join();
	cr_assert_eq(fi_cntr_read(recvs), 1u);
	cr_assert(std::equal(src.bytes.begin(), src.bytes.end(), dst.bytes.begin()));
	wait_cq(client_cq);

	/* fi_cntr_wait sleeps: the timeout passes, an add or a message wakes it. */
	auto t0 = std::chrono::steady_clock::now();
	cr_assert_eq(fi_cntr_wait(recvs, 2, 100), -FI_ETIMEDOUT);
	cr_assert_geq(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(90));
	std::thread adder([&] {
		std::this_thread::sleep_for(std::chrono::milliseconds(100));
		fi_cntr_add(recvs, 1);
	});
	cr_assert_eq(fi_cntr_wait(recvs, 2, 10000), 0, "fi_cntr_add woke the waiter");
	adder.join();
	cr_assert_eq(fi_recv(s.ep, dst.data() + 64, 64, dst.desc(), 0, nullptr), 0);
	cr_assert_eq(fi_send(c.ep, src.data(), 64, src.desc(), 0, nullptr), 0);
	cr_assert_eq(fi_cntr_wait(recvs, 3, 10000), 0);
	cr_assert_eq(fi_cntr_wait(polled, 2, 10000), 0, "an FI_WAIT_UNSPEC counter counts the same");
	wait_cq(client_cq);

	/* The wait set wakes for its counter: the server's send. */
	cr_assert_eq(fi_wait(ws, 100), -FI_ETIMEDOUT);
	cr_assert_eq(fi_recv(c.ep, dst.data() + 128, 64, dst.desc(), 0, nullptr), 0);
	cr_assert_eq(fi_send(s.ep, src.data(), 64, src.desc(), 0, nullptr), 0);
	cr_assert_eq(fi_wait(ws, 10000), 0);
	cr_assert_eq(fi_cntr_wait(sends, 1, 10000), 0);
	wait_cq(client_cq);
	cr_assert_eq(fi_close(&ws->fid), -FI_EBUSY, "the counter is in the set");

	close_side(c);
	close_side(s);
	for (fid_cntr *counter : {recvs, sends, polled})
		cr_assert_eq(fi_close(&counter->fid), 0);
	cr_assert_eq(fi_close(&ws->fid), 0);
	f.close_data();
}

#pragma GCC diagnostic pop
