/*
 * guest_cq.cpp: the completion queue on a real device (suite cq): its
 * arguments, every entry format, its wait fd (fi_cq_sread, fi_cq_signal,
 * epoll), the bindings a failed fi_enable leaves, and many endpoints on one
 * CQ past what one verbs CQ of the device holds: shared, chained, grown and
 * shrunk again, with every completion and byte checked. Those open up to
 * 200 connections, or queues 8,000 deep: they have a longer timeout.
 */
#include <criterion/criterion.h>

#include "data_fixture.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <chrono>
#include <string>
#include <thread>

using namespace nd::test;

TestSuite(cq, .timeout = 120);

Test(cq, cq_checks_arguments)
{
	DataFixture f;
	f.open();
	fid_cq *cq = nullptr;
	cr_assert_eq(fi_cq_open(f.domain, nullptr, &cq, nullptr), -FI_EINVAL);
	fi_cq_attr attr{};
	attr.wait_obj = FI_WAIT_MUTEX_COND;
	cr_assert_eq(fi_cq_open(f.domain, &attr, &cq, nullptr), -FI_ENOSYS);
	attr.wait_obj = FI_WAIT_NONE;
	attr.size = 1u << 30;
	cr_assert_eq(fi_cq_open(f.domain, &attr, &cq, nullptr), 0,
		     "beyond the device: opened at the device's size, room is reserved at fi_enable");
	cr_assert_eq(fi_close(&cq->fid), 0);
	cq = nullptr;
	attr.size = 0;
	cr_assert_eq(fi_cq_open(f.domain, &attr, &cq, nullptr), 0);
	int fd = -1;
	cr_assert_eq(fi_control(&cq->fid, FI_GETWAIT, &fd), -FI_ENODATA, "FI_WAIT_NONE has no fd");
	cr_assert_eq(fi_cq_sread(cq, nullptr, 0, nullptr, 0), -FI_EINVAL);
	fi_cq_err_entry err{};
	cr_assert_eq(fi_cq_readerr(cq, &err, 0), -FI_EAGAIN);
	fi_cq_entry entry;
	cr_assert_eq(fi_cq_read(cq, &entry, 1), -FI_EAGAIN);
	cr_assert_eq(fi_close(&cq->fid), 0);
	f.close_data();
}

Test(cq, every_cq_format_reports_its_fields)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	for (fi_cq_format format : {FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_DATA, FI_CQ_FORMAT_TAGGED}) {
		/* A pair whose server reports in `format`. */
		fi_cq_attr attr{};
		attr.format = format;
		fid_cq *cq = nullptr;
		cr_assert_eq(fi_cq_open(f.domain, &attr, &cq, nullptr), 0);
		fid_ep *cep = f.client();
		fid_cq *ccq = f.open_cq();
		cr_assert_eq(fi_ep_bind(cep, &ccq->fid, FI_TRANSMIT | FI_RECV), 0);
		cr_assert_eq(fi_enable(cep), 0);
		cr_assert_eq(fi_connect(cep, &f.listen_addr, nullptr, 0), 0);
		Event req = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
		fid_ep *sep = nullptr;
		cr_assert_eq(fi_endpoint(f.domain, req.info, &sep, nullptr), 0);
		fi_freeinfo(req.info);
		cr_assert_eq(fi_ep_bind(sep, &f.eq->fid, 0), 0);
		cr_assert_eq(fi_ep_bind(sep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
		cr_assert_eq(fi_enable(sep), 0);
		cr_assert_eq(fi_accept(sep, nullptr, 0), 0);
		expect_event(f.eq, FI_CONNECTED, nullptr);
		expect_event(f.eq, FI_CONNECTED, nullptr);
		Buffer &buf = f.buffer(64);
		int ctx;
		cr_assert_eq(fi_recv(sep, buf.data(), 64, buf.desc(), 0, &ctx), 0);
		cr_assert_eq(fi_senddata(cep, buf.data(), 40, buf.desc(), 99, 0, nullptr), 0);
		/* Room for the largest format, with a guard after the entry. */
		uint8_t raw[sizeof(fi_cq_tagged_entry) + 8];
		std::memset(raw, 0xab, sizeof(raw));
		ssize_t n;
		while ((n = fi_cq_read(cq, raw, 1)) == -FI_EAGAIN) {
		}
		cr_assert_eq(n, 1);
		size_t size = format == FI_CQ_FORMAT_CONTEXT ? sizeof(fi_cq_entry)
			      : format == FI_CQ_FORMAT_MSG   ? sizeof(fi_cq_msg_entry)
			      : format == FI_CQ_FORMAT_DATA  ? sizeof(fi_cq_data_entry)
							       : sizeof(fi_cq_tagged_entry);
		cr_assert_eq(reinterpret_cast<fi_cq_entry *>(raw)->op_context, &ctx);
		if (format != FI_CQ_FORMAT_CONTEXT) {
			auto *m = reinterpret_cast<fi_cq_msg_entry *>(raw);
			cr_assert_eq(m->len, 40u);
			cr_assert_eq(m->flags, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
		}
		if (format == FI_CQ_FORMAT_DATA || format == FI_CQ_FORMAT_TAGGED)
			cr_assert_eq(reinterpret_cast<fi_cq_data_entry *>(raw)->data, 99u);
		if (format == FI_CQ_FORMAT_TAGGED)
			cr_assert_eq(reinterpret_cast<fi_cq_tagged_entry *>(raw)->tag, 0u, "an untagged message");
		cr_assert_eq(raw[size], 0xab, "format %d wrote past its entry", format);
		wait_cq(ccq);
		cr_assert_eq(fi_close(&cep->fid), 0);
		cr_assert_eq(fi_close(&sep->fid), 0);
		cr_assert_eq(fi_close(&cq->fid), 0);
	}
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(cq, cq_wait_fd_sread_and_signal)
{
	DataFixture f;
	f.open();
	fid_cq *cq = f.open_cq(0, FI_WAIT_FD);
	fi_cq_data_entry e;
	auto t0 = std::chrono::steady_clock::now();
	cr_assert_eq(fi_cq_sread(cq, &e, 1, nullptr, 200), -FI_EAGAIN);
	auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
	cr_assert_geq(waited, 190, "sread waited its timeout (%lld ms)", (long long)waited);
	std::thread waker([&] {
		std::this_thread::sleep_for(std::chrono::milliseconds(100));
		fi_cq_signal(cq);
	});
	cr_assert_eq(fi_cq_sread(cq, &e, 1, nullptr, 10000), -FI_EAGAIN, "fi_cq_signal wakes sread");
	waker.join();

	/* A connection on this CQ: the wait fd turns readable on completion. */
	fid_ep *cep = nullptr;
	cr_assert_eq(fi_endpoint(f.domain, f.info.get(), &cep, nullptr), 0);
	cr_assert_eq(fi_ep_bind(cep, &f.eq->fid, 0), 0);
	cr_assert_eq(fi_ep_bind(cep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	cr_assert_eq(fi_enable(cep), 0);
	cr_assert_eq(fi_connect(cep, &f.listen_addr, nullptr, 0), 0);
	Event req = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
	fid_cq *scq = nullptr;
	fid_ep *sep = f.make_ep(req.info, {}, &scq);
	fi_freeinfo(req.info);
	cr_assert_eq(fi_enable(sep), 0);
	cr_assert_eq(fi_accept(sep, nullptr, 0), 0);
	expect_event(f.eq, FI_CONNECTED, nullptr);
	expect_event(f.eq, FI_CONNECTED, nullptr);
	int fd = -1;
	cr_assert_eq(fi_control(&cq->fid, FI_GETWAIT, &fd), 0);
	int ep_fd = epoll_create1(0);
	epoll_event ev{};
	ev.events = EPOLLIN;
	cr_assert_eq(epoll_ctl(ep_fd, EPOLL_CTL_ADD, fd, &ev), 0);
	fid *fids[] = {&cq->fid};
	cr_assert_eq(fi_trywait(f.fabric, fids, 1), 0, "empty CQ: safe to wait");
	Buffer &dst = f.buffer(64);
	Buffer &src = f.buffer(64);
	cr_assert_eq(fi_recv(cep, dst.data(), 64, dst.desc(), 0, &ev), 0);
	cr_assert_eq(fi_send(sep, src.data(), 64, src.desc(), 0, nullptr), 0);
	cr_assert_eq(epoll_wait(ep_fd, &ev, 1, 10000), 1, "the wait fd turned readable");
	cr_assert_eq(fi_cq_sread(cq, &e, 1, nullptr, 10000), 1);
	close(ep_fd);
	cr_assert_eq(fi_close(&cep->fid), 0);
	cr_assert_eq(fi_close(&sep->fid), 0);
	f.close_data();
}

Test(cq, a_failed_enable_keeps_the_bindings_balanced)
{
	DataFixture f;
	f.open();
	fid_cq *cq = f.open_cq(16);
	InfoPtr big(fi_dupinfo(f.info.get()));
	big->tx_attr->size = 1u << 24; /* more than any CQ can hold */
	fid_ep *ep = nullptr;
	cr_assert_eq(fi_endpoint(f.domain, big.get(), &ep, nullptr), 0);
	cr_assert_eq(fi_ep_bind(ep, &f.eq->fid, 0), 0);
	cr_assert_eq(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	int rc = fi_enable(ep);
	cr_assert_lt(rc, 0, "fi_enable with a %zu-deep send queue", big->tx_attr->size);
	cr_assert_eq(fi_close(&cq->fid), -FI_EBUSY, "the endpoint is still bound to the CQ");
	cr_assert_eq(fi_close(&ep->fid), 0);
	f.close_data(); /* closes the CQ: the binding was released exactly once */
}

/* A connection whose two endpoints complete on `cq` (size: their queue
 * sizes; 0, the default): {client, server}. */
static std::pair<fid_ep *, fid_ep *> connect_on(DataFixture &f, fid_cq *cq, size_t size = 0)
{
	DataOptions o;
	o.bind_cq = false;
	o.tx_size = o.rx_size = size;
	auto open_ep = [&](fi_info *info) {
		fid_ep *ep = f.make_ep(info, o, nullptr);
		cr_assert_eq(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
		int rc = fi_enable(ep);
		cr_assert_eq(rc, 0, "fi_enable: %s", fi_strerror(-rc));
		return ep;
	};
	fid_ep *c = open_ep(f.info.get());
	cr_assert_eq(fi_connect(c, &f.listen_addr, nullptr, 0), 0);
	Event req = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
	fid_ep *s = open_ep(req.info);
	fi_freeinfo(req.info);
	cr_assert_eq(fi_accept(s, nullptr, 0), 0);
	for (int k = 0; k < 2; k++)
		expect_event(f.eq, FI_CONNECTED, nullptr);
	return {c, s};
}

/* n connections, every endpoint on one CQ, a checked message each way
 * (size: the endpoints' queue sizes; 0, the default). Every message's
 * completion arrives on the one CQ, read by a waiter that sleeps on it
 * (fi_cq_sread), and every byte is checked. */
static void connections_on_one_cq(DataFixture &f, size_t n, size_t size)
{
	constexpr size_t kLen = 64;
	fid_cq *cq = f.open_cq(0, FI_WAIT_FD);
	std::vector<fid_ep *> clients, servers;
	for (size_t i = 0; i < n; i++) {
		auto [c, s] = connect_on(f, cq, size);
		clients.push_back(c);
		servers.push_back(s);
	}
	Buffer &out = f.buffer(n * kLen);
	Buffer &in = f.buffer(n * kLen);
	for (size_t i = 0; i < n; i++) {
		std::vector<uint8_t> p = pattern(kLen, static_cast<uint8_t>(i));
		std::copy(p.begin(), p.end(), out.data() + i * kLen);
		cr_assert_eq(fi_recv(servers[i], in.data() + i * kLen, kLen, in.desc(), 0,
				     reinterpret_cast<void *>(0x10000 + i)), 0);
	}
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(fi_send(clients[i], out.data() + i * kLen, kLen, out.desc(), 0,
				     reinterpret_cast<void *>(0x20000 + i)), 0);
	std::vector<int> sends(n), recvs(n);
	for (size_t got = 0; got < 2 * n;) {
		fi_cq_data_entry entries[16];
		ssize_t rc = fi_cq_sread(cq, entries, 16, nullptr, 10000);
		cr_assert_gt(rc, 0, "fi_cq_sread after %zu of %zu completions: %zd", got, 2 * n, rc);
		for (ssize_t k = 0; k < rc; k++) {
			const uintptr_t ctx = reinterpret_cast<uintptr_t>(entries[k].op_context);
			const size_t i = ctx & 0xffff;
			cr_assert_lt(i, n, "context %p", entries[k].op_context);
			if (ctx & 0x10000) {
				cr_assert_eq(entries[k].len, kLen);
				recvs[i]++;
			} else {
				sends[i]++;
			}
		}
		got += static_cast<size_t>(rc);
	}
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(sends[i], 1, "connection %zu: send completions", i);
		cr_assert_eq(recvs[i], 1, "connection %zu: receive completions", i);
		cr_assert(in.holds(pattern(kLen, static_cast<uint8_t>(i)), i * kLen),
			  "connection %zu: the bytes", i);
	}
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(fi_close(&clients[i]->fid), 0);
		cr_assert_eq(fi_close(&servers[i]->fid), 0);
	}
}

/* One CQ for every endpoint at the default queue depth, as ofi_rxm and MPI
 * use nd: each endpoint's rings start with room for one request and grow
 * with what is in flight. Past what Soft-RoCE's largest CQ (32,767 entries)
 * holds of the endpoints' depths (42 endpoints at the default 384), they
 * still share one verbs CQ while half of it is free for their rings to
 * grow into (takes_endpoint), so that a read polls one verbs CQ. */
Test(cq, endpoints_past_the_device_cq_limit_share_one_cq, .timeout = 300)
{
	DataFixture f;
	f.open();
	connections_on_one_cq(f, 64, 0);
	f.close_data();
}

/* Endpoints whose rings hold their whole depth from fi_enable (FI_TAGGED's
 * framing) at 8,000 requests each way reserve 16,001 entries each: two
 * fill Soft-RoCE's largest verbs CQ, so the CQ chains a verbs CQ for every
 * second endpoint, on one completion channel, and reads take them in turn.
 * Two connections (four endpoints, two verbs CQs): each FI_TAGGED endpoint
 * pins its receive buffers, about 1.2 MiB here, and the test runs under a
 * user's 8 MiB memory-lock limit. */
Test(cq, endpoints_reserving_past_the_device_cq_limit_chain_verbs_cqs, .timeout = 300)
{
	DataFixture f;
	f.hint_caps = FI_TAGGED;
	f.open();
	connections_on_one_cq(f, 2, 8000);
	f.close_data();
}

/* The sizes (KiB) of this process's mappings of device queues (the verbs
 * library maps a queue pair's and a CQ's rings from /dev/infiniband). */
static std::vector<long> device_mapping_kib()
{
	std::vector<long> sizes;
	FILE *smaps = fopen("/proc/self/smaps", "r");
	cr_assert(smaps, "/proc/self/smaps: %s", strerror(errno));
	char line[512];
	bool device = false;
	long kib;
	while (fgets(line, sizeof(line), smaps)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
			device = strstr(line, "/dev/infiniband/") != nullptr;
		else if (device && sscanf(line, "Size: %ld kB", &kib) == 1)
			sizes.push_back(kib);
	}
	fclose(smaps);
	return sizes;
}

/* A verbs CQ grown for 200 connections gives its memory back as they close
 * (CompletionQueue::shrink halves it once a quarter is reserved), down to
 * the size it was made with, and loses nothing on the way: the
 * completions of the connection left open, unread while the others
 * closed, arrive after, and it carries more. (Asked for 16 entries, so
 * that the connections outgrow it; 200: on Soft-RoCE their 800 entries
 * make a 1,023-entry verbs CQ, whose 132 KiB mapping is the size of no
 * queue pair's at the default depth, as 100's 68 KiB would be.) */
Test(cq, a_verbs_cq_shrinks_as_endpoints_close_and_loses_nothing, .timeout = 300)
{
	constexpr size_t kConnections = 200, kLen = 64;
	std::vector<long> at_one;
	DataFixture f;
	f.open();
	fid_cq *cq = f.open_cq(16, FI_WAIT_NONE);
	/* Registered first: what the domain maps for them is there at one
	 * connection too. */
	Buffer &out = f.buffer(2 * kLen);
	Buffer &in = f.buffer(2 * kLen);
	std::vector<fid_ep *> clients, servers;
	for (size_t i = 0; i < kConnections; i++) {
		auto [c, s] = connect_on(f, cq);
		clients.push_back(c);
		servers.push_back(s);
		if (i == 0)
			at_one = device_mapping_kib();
	}
	/* The CQ grew: a mapping of a size none had with one connection. */
	const std::vector<long> at_all = device_mapping_kib();
	cr_assert(std::any_of(at_all.begin(), at_all.end(),
			      [&](long kib) { return std::find(at_one.begin(), at_one.end(), kib) == at_one.end(); }),
		  "with %zu connections open the verbs CQ did not grow", kConnections);
	for (int round = 0; round < 2; round++) {
		std::vector<uint8_t> p = pattern(kLen, static_cast<uint8_t>(0x40 + round));
		std::copy(p.begin(), p.end(), out.data() + round * kLen);
		cr_assert_eq(fi_recv(servers[0], in.data() + round * kLen, kLen, in.desc(), 0,
				     reinterpret_cast<void *>(0x100 + round)), 0);
		cr_assert_eq(fi_send(clients[0], out.data() + round * kLen, kLen, out.desc(), 0,
				     reinterpret_cast<void *>(0x200 + round)), 0);
		if (round == 0) {
			/* Unread while the other 199 close, each close
			 * shrinking what it can. */
			std::this_thread::sleep_for(std::chrono::milliseconds(100));
			for (size_t i = 1; i < kConnections; i++) {
				cr_assert_eq(fi_close(&clients[i]->fid), 0);
				cr_assert_eq(fi_close(&servers[i]->fid), 0);
			}
		}
		bool sent = false, received = false;
		const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
		while (!sent || !received) {
			cr_assert(std::chrono::steady_clock::now() < end, "round %d: send %d, receive %d", round, sent,
				  received);
			fi_cq_data_entry e{};
			ssize_t rc = fi_cq_read(cq, &e, 1);
			if (rc == -FI_EAGAIN)
				continue;
			cr_assert_eq(rc, 1, "round %d: fi_cq_read %zd", round, rc);
			const uintptr_t ctx = reinterpret_cast<uintptr_t>(e.op_context);
			if (ctx == 0x200u + round) {
				cr_assert_not(sent, "round %d: the send completed twice", round);
				sent = true;
			} else {
				cr_assert_eq(ctx, 0x100u + round, "round %d: context %p", round, e.op_context);
				cr_assert_not(received, "round %d: the receive completed twice", round);
				cr_assert_eq(e.len, kLen);
				received = true;
			}
		}
		cr_assert(in.holds(p, round * kLen), "round %d: the bytes", round);
	}
	expect_cq_empty(cq, 200);
	cr_assert_eq(fi_close(&clients[0]->fid), 0);
	cr_assert_eq(fi_close(&servers[0]->fid), 0);
	/* What stays mapped is the CQ's first verbs CQ, at a size it had with
	 * one connection open, not at the size 100 made it grow to. */
	const std::vector<long> at_end = device_mapping_kib();
	cr_assert(!at_end.empty(), "the CQ's first verbs CQ stays until the CQ closes");
	std::string sizes;
	for (long kib : at_one)
		sizes += " " + std::to_string(kib);
	for (long kib : at_end)
		cr_assert(std::find(at_one.begin(), at_one.end(), kib) != at_one.end(),
			  "a device mapping of %ld KiB stays after all closed; with one connection they were (KiB):%s",
			  kib, sizes.c_str());
	f.close_data();
}
