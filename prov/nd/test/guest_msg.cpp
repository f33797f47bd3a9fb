/*
 * guest_msg.cpp: messages on a real device (suite msg): fi_send and fi_recv
 * in every size class and form (scatter-gather, remote CQ data, inject,
 * FI_MORE, selective completion), full queues, receives flushed at shutdown
 * and close or taken back by fi_cancel, bad input, and sends from many
 * threads. Every test checks the bytes that arrived and the completions
 * that were (and were not) seen: a message that arrives with the wrong
 * bytes, or a completion seen twice or never, is what the device tests are
 * here to catch.
 */
#include <criterion/criterion.h>

#include "data_fixture.h"

#include <algorithm>
#include <cstring>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <tuple>

using namespace nd::test;

TestSuite(msg, .timeout = 120);

namespace {

/* k receives of `each` bytes on `side`, one after another in a new buffer,
 * the i-th with the buffer's address plus i as its context. */
Buffer &post_receives(DataFixture &f, Side side, int k, size_t each)
{
	Buffer &dst = f.buffer(each * k);
	for (int i = 0; i < k; i++)
		cr_assert_eq(fi_recv(side.ep, dst.data() + each * i, each, dst.desc(), 0, dst.data() + i), 0);
	return dst;
}

/* An fi_msg of one iov. */
fi_msg one_iov_msg(iovec *iov, void **desc, void *context)
{
	fi_msg msg{};
	msg.msg_iov = iov;
	msg.desc = desc;
	msg.iov_count = 1;
	msg.context = context;
	return msg;
}

/* fi_recvmsg with FI_COMPLETION into dst[offset, offset + len). */
ssize_t recv_with_completion(fid_ep *ep, Buffer &dst, size_t offset, size_t len, void *context)
{
	iovec iov{dst.data() + offset, len};
	void *desc = dst.desc();
	fi_msg msg = one_iov_msg(&iov, &desc, context);
	return fi_recvmsg(ep, &msg, FI_COMPLETION);
}

/* fi_sendmsg of src[offset, offset + len) with the given flags. */
ssize_t send_flags(fid_ep *ep, Buffer &src, size_t offset, size_t len, void *context, uint64_t flags)
{
	iovec iov{src.data() + offset, len};
	void *desc = src.desc();
	fi_msg msg = one_iov_msg(&iov, &desc, context);
	return fi_sendmsg(ep, &msg, flags);
}

/* fi_writemsg of one buffer, with the given flags. */
ssize_t write_flags(fid_ep *ep, Buffer &src, size_t len, uint64_t raddr, uint64_t key, void *context,
		    uint64_t flags)
{
	iovec iov{src.data(), len};
	void *desc = src.desc();
	fi_rma_iov rma{raddr, len, key};
	fi_msg_rma msg = one_iov_rma_msg(&iov, &desc, &rma, context);
	return fi_writemsg(ep, &msg, flags);
}

void *ctx_of(int i)
{
	return reinterpret_cast<void *>(uintptr_t(i + 1));
}

} // namespace

Test(msg, send_recv_every_size_class)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	size_t inject = f.info->tx_attr->inject_size;
	for (size_t len : {size_t(0), size_t(1), size_t(63), inject, inject + 1, size_t(4096),
			   size_t(65536), size_t(1) << 20}) {
		send_and_check(f, c, s, len, static_cast<uint8_t>(len));
		send_and_check(f, s, c, len, static_cast<uint8_t>(len + 7));
	}
	expect_cq_empty(c.cq);
	expect_cq_empty(s.cq);
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(msg, receives_posted_before_the_connection_are_kept)
{
	DataFixture f;
	f.open();
	std::vector<Buffer *> bufs;
	int contexts[4];
	int next = 0;
	DataOptions o;
	o.before_connect = [&](fid_ep *ep) {
		bufs.push_back(&f.buffer(256));
		bufs.push_back(&f.buffer(256));
		for (int i = 0; i < 2; i++, next++)
			cr_assert_eq(fi_recv(ep, bufs[next]->data(), 256, bufs[next]->desc(), 0,
					     &contexts[next]), 0);
	};
	auto [c, s] = f.connect_data(o);
	Buffer &src = f.buffer(256);
	for (int i = 0; i < 2; i++) {
		auto want = pattern(100 + i, static_cast<uint8_t>(i));
		src.fill(want);
		cr_assert_eq(fi_send(c.ep, src.data(), want.size(), src.desc(), 0, nullptr), 0);
		wait_cq(c.cq);
		fi_cq_data_entry r = wait_cq(s.cq);
		cr_assert_eq(r.op_context, &contexts[2 + i], "server receives in posting order");
		cr_assert_eq(r.len, want.size());
		cr_assert(bufs[2 + i]->holds(want));
	}
	cr_assert_eq(fi_send(s.ep, src.data(), 8, src.desc(), 0, nullptr), 0);
	fi_cq_data_entry r = wait_cq(c.cq);
	if (r.op_context == nullptr) /* the send completion may come first */
		r = wait_cq(c.cq);
	cr_assert_eq(r.op_context, &contexts[0]);
	close_side(c);
	close_side(s);
	f.close_data();
}

/*
 * Who sends first (nd_credits.h): on iWARP the accepter is connected once
 * its reply is sent, before the connector has read it, and a message of
 * the accepter's that reaches the connector first ends the connection
 * there (MPA). So the accepter's sends wait for the connector's first
 * write, which it makes when it completes: with the connector completing
 * by hand, the accepter's send is -FI_EAGAIN until it does, and then
 * arrives. Elsewhere the accepter's queue pair is in RTS from its accept
 * and its connection is reported when the connector's RTU comes; its
 * first message, sent then, arrives as on iWARP.
 */
Test(msg, the_accepter_sends_once_the_connector_has_completed)
{
	DataFixture f;
	f.open();
	DataOptions o;
	Side c, s;
	c.ep = f.make_ep(f.info.get(), o, &c.cq);
	int manual = 1;
	cr_assert_eq(fi_setopt(&c.ep->fid, FI_OPT_ENDPOINT, FI_OPT_ND_MANUAL_COMPLETE, &manual, sizeof(manual)), 0);
	cr_assert_eq(fi_enable(c.ep), 0);
	Buffer &dst = f.buffer(64, 0xee);
	int recv_ctx;
	cr_assert_eq(fi_recv(c.ep, dst.data(), 64, dst.desc(), 0, &recv_ctx), 0);
	cr_assert_eq(fi_connect(c.ep, &f.listen_addr, nullptr, 0), 0);
	Event req = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
	s.ep = f.make_ep(req.info, o, &s.cq);
	fi_freeinfo(req.info);
	cr_assert_eq(fi_enable(s.ep), 0);
	cr_assert_eq(fi_accept(s.ep, nullptr, 0), 0);
	expect_response(f.eq, &c.ep->fid, &s.ep->fid, f.iwarp());

	Buffer &src = f.buffer(64);
	const auto want = pattern(48, 7);
	src.fill(want);
	int send_ctx;
	if (f.iwarp()) {
		const ssize_t early = fi_send(s.ep, src.data(), want.size(), src.desc(), 0, &send_ctx);
		cr_assert_eq(early, -FI_EAGAIN, "before the connector completes: %zd", early);
		expect_cq_empty(c.cq);
	}

	cr_assert_eq(fi_nd_complete_connect(c.ep), 0);
	for (int i = 0; i < (f.iwarp() ? 1 : 2); i++)
		expect_event(f.eq, FI_CONNECTED, nullptr);
	ssize_t ret;
	const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
	while ((ret = fi_send(s.ep, src.data(), want.size(), src.desc(), 0, &send_ctx)) == -FI_EAGAIN &&
	       std::chrono::steady_clock::now() < give_up) {
		fi_cq_data_entry e;
		fi_cq_read(s.cq, &e, 1);
	}
	cr_assert_eq(ret, 0, "once the connector has completed: %zd", ret);
	fi_cq_data_entry r = wait_cq(c.cq);
	cr_assert_eq(r.op_context, &recv_ctx);
	cr_assert_eq(r.len, want.size());
	cr_assert(dst.holds(want), "the accepter's message arrived whole");
	cr_assert_eq(wait_cq(s.cq).op_context, &send_ctx);
	send_and_check(f, c, s, 32, 3);
	send_and_check(f, s, c, 32, 4);
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(msg, scatter_gather_up_to_the_iov_limit)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const size_t limit = f.info->tx_attr->iov_limit;
	cr_assert_geq(limit, 2u);
	std::vector<Buffer *> pieces, slots;
	std::vector<iovec> src_iov, dst_iov;
	std::vector<void *> src_desc, dst_desc;
	std::vector<uint8_t> whole;
	for (size_t i = 0; i < limit; i++) {
		auto part = pattern(37 + i * 11, static_cast<uint8_t>(i * 3));
		whole.insert(whole.end(), part.begin(), part.end());
		pieces.push_back(&f.buffer(part.size()));
		pieces.back()->fill(part);
		src_iov.push_back({pieces.back()->data(), part.size()});
		src_desc.push_back(pieces.back()->desc());
		slots.push_back(&f.buffer(80));
		dst_iov.push_back({slots.back()->data(), 80});
		dst_desc.push_back(slots.back()->desc());
	}
	cr_assert_eq(fi_recvv(s.ep, dst_iov.data(), dst_desc.data(), limit, 0, nullptr), 0);
	cr_assert_eq(fi_sendv(c.ep, src_iov.data(), src_desc.data(), limit, 0, nullptr), 0);
	fi_cq_data_entry r = wait_cq(s.cq);
	cr_assert_eq(r.len, whole.size());
	std::vector<uint8_t> got;
	size_t left = whole.size();
	for (auto &slot : slots) {
		size_t take = std::min<size_t>(left, 80);
		got.insert(got.end(), slot->bytes.begin(), slot->bytes.begin() + take);
		left -= take;
	}
	cr_assert(got == whole, "the gathered message scattered intact");
	wait_cq(c.cq);
	/* One over the limit: refused at the call, nothing posted. */
	src_iov.push_back(src_iov[0]);
	src_desc.push_back(src_desc[0]);
	cr_assert_eq(fi_sendv(c.ep, src_iov.data(), src_desc.data(), limit + 1, 0, nullptr), -FI_EINVAL);
	cr_assert_eq(fi_recvv(s.ep, src_iov.data(), src_desc.data(), limit + 1, 0, nullptr), -FI_EINVAL);
	expect_cq_empty(c.cq);
	expect_cq_empty(s.cq);
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(msg, remote_cq_data_on_send_and_write)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	Buffer &src = f.buffer(64);
	Buffer &dst = f.buffer(64);
	Buffer &target = f.buffer(128, 0, FI_REMOTE_WRITE);
	auto want = pattern(64, 9);
	src.fill(want);
	int r1, r2, w;
	cr_assert_eq(fi_recv(s.ep, dst.data(), 64, dst.desc(), 0, &r1), 0);
	cr_assert_eq(fi_senddata(c.ep, src.data(), 64, src.desc(), 0xabcd1234, 0, nullptr), 0);
	fi_cq_data_entry e = wait_cq(s.cq);
	cr_assert_eq(e.op_context, &r1);
	cr_assert_eq(e.flags, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
	cr_assert_eq(e.data, 0xabcd1234u);
	cr_assert(dst.holds(want));
	wait_cq(c.cq);
	/* fi_writedata consumes a posted receive and reports the data there. */
	cr_assert_eq(fi_recv(s.ep, dst.data(), 64, dst.desc(), 0, &r2), 0);
	cr_assert_eq(fi_writedata(c.ep, src.data(), 64, src.desc(), 0x55667788, 0, target.addr(32),
				  target.key(), &w), 0);
	e = wait_cq(s.cq);
	cr_assert_eq(e.op_context, &r2);
	cr_assert_eq(e.flags, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
	cr_assert_eq(e.data, 0x55667788u);
	cr_assert(target.holds(want, 32));
	e = wait_cq(c.cq);
	cr_assert_eq(e.op_context, &w);
	cr_assert_eq(e.flags, FI_RMA | FI_WRITE);
	close_side(c);
	close_side(s);
	f.close_data();
}

/* Remote CQ data many times round a small receive ring: messages with and
 * without data, fi_writedata and fi_injectdata in turn, a window of
 * receives kept posted. Each receive completes in order with its own data,
 * flags and length, never a stale one. On iWARP the data travels through
 * the receiver's slots, one per receive-ring slot (fi_nd(7), iWARP), and
 * the sender's receive credits: a post may be -FI_EAGAIN until the peer's
 * count arrives, and is retried. */
Test(msg, remote_cq_data_many_times_round_the_receive_ring)
{
	DataFixture f;
	f.open();
	DataOptions o;
	o.rx_size = 8;
	o.tx_size = 8;
	Side c, s; /* not a structured binding: the lambdas below capture them */
	std::tie(c, s) = f.connect_data(o);
	constexpr size_t kWindow = 6, kMessages = 240, kLen = 32;
	Buffer &src = f.buffer(kLen * kMessages);
	Buffer &dst = f.buffer(kLen * kWindow, 0xee);
	Buffer &target = f.buffer(kLen * kMessages, 0, FI_REMOTE_WRITE);
	const size_t inject = std::min<size_t>(kLen, f.info->tx_attr->inject_size);
	for (size_t i = 0; i < kMessages; i++) {
		auto bytes = pattern(kLen, static_cast<uint8_t>(i));
		std::copy(bytes.begin(), bytes.end(), src.data() + i * kLen);
	}
	enum Kind { senddata, plain, writedata, injectdata };
	auto kind_of = [](size_t i) { return static_cast<Kind>(i % 4); };
	auto data_of = [](size_t i) { return static_cast<uint64_t>(0x5a000000u + i * 7919u); };
	int rctx[kWindow];
	size_t posted = 0, sent = 0, received = 0, tx_seen = 0, tx_wanted = 0;
	auto post_receive = [&] {
		const size_t at = posted % kWindow;
		cr_assert_eq(fi_recv(s.ep, dst.data() + at * kLen, kLen, dst.desc(), 0, &rctx[at]), 0);
		posted++;
	};
	auto drain_sender = [&] {
		fi_cq_data_entry e;
		while (fi_cq_read(c.cq, &e, 1) == 1)
			tx_seen++;
	};
	auto send_one = [&](size_t i) -> ssize_t {
		uint8_t *from = src.data() + i * kLen;
		switch (kind_of(i)) {
		case senddata:
			return fi_senddata(c.ep, from, kLen, src.desc(), data_of(i), 0, nullptr);
		case plain:
			return fi_send(c.ep, from, kLen, src.desc(), 0, nullptr);
		case writedata:
			return fi_writedata(c.ep, from, kLen, src.desc(), data_of(i), 0, target.addr(i * kLen),
					    target.key(), nullptr);
		case injectdata:
			return fi_injectdata(c.ep, from, inject, data_of(i), 0);
		}
		return -FI_EINVAL;
	};
	for (size_t i = 0; i < kWindow; i++)
		post_receive();
	while (received < kMessages) {
		while (sent < kMessages && sent < received + kWindow) {
			const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
			ssize_t rc;
			while ((rc = send_one(sent)) == -FI_EAGAIN && std::chrono::steady_clock::now() < until)
				drain_sender();
			cr_assert_eq(rc, 0, "message %zu: %s", sent, fi_strerror(static_cast<int>(-rc)));
			tx_wanted += kind_of(sent) != injectdata;
			sent++;
		}
		const size_t i = received;
		fi_cq_data_entry e = wait_cq(s.cq);
		cr_assert_eq(e.op_context, &rctx[i % kWindow], "message %zu completes the receive in order", i);
		switch (kind_of(i)) {
		case plain:
			cr_assert_eq(e.flags, FI_RECV | FI_MSG, "message %zu: no data, none reported (0x%llx)", i,
				     static_cast<unsigned long long>(e.flags));
			cr_assert_eq(e.len, kLen);
			break;
		case senddata:
		case injectdata:
			cr_assert_eq(e.flags, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA, "message %zu", i);
			cr_assert_eq(e.data, data_of(i), "message %zu: data 0x%llx", i,
				     static_cast<unsigned long long>(e.data));
			cr_assert_eq(e.len, kind_of(i) == senddata ? kLen : inject, "message %zu", i);
			cr_assert(dst.holds(pattern(kind_of(i) == senddata ? kLen : inject, static_cast<uint8_t>(i)),
					    (i % kWindow) * kLen),
				  "message %zu's bytes", i);
			break;
		case writedata:
			cr_assert_eq(e.flags, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, "message %zu", i);
			cr_assert_eq(e.data, data_of(i), "message %zu", i);
			cr_assert_eq(e.len, kLen, "message %zu: the write's length", i);
			cr_assert(target.holds(pattern(kLen, static_cast<uint8_t>(i)), i * kLen),
				  "message %zu: the write landed before its data was reported", i);
			break;
		}
		received++;
		if (posted < kMessages)
			post_receive();
	}
	const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
	while (tx_seen < tx_wanted && std::chrono::steady_clock::now() < until)
		drain_sender();
	cr_assert_eq(tx_seen, tx_wanted, "one completion per request that asked for one");
	expect_cq_empty(c.cq, 50);
	expect_cq_empty(s.cq, 50);
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(msg, inject_generates_no_completion_and_checks_its_size)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const size_t inject = f.info->tx_attr->inject_size;
	Buffer &dst = f.buffer(inject + 64);
	std::vector<uint8_t> msg = pattern(inject, 5);
	cr_assert_eq(fi_recv(s.ep, dst.data(), dst.bytes.size(), dst.desc(), 0, nullptr), 0);
	cr_assert_eq(fi_inject(c.ep, msg.data(), msg.size(), 0), 0);
	auto want = msg;
	std::fill(msg.begin(), msg.end(), 0); /* the provider copied it */
	fi_cq_data_entry e = wait_cq(s.cq);
	cr_assert_eq(e.len, inject);
	cr_assert(dst.holds(want));
	cr_assert_eq(fi_recv(s.ep, dst.data(), dst.bytes.size(), dst.desc(), 0, nullptr), 0);
	cr_assert_eq(fi_injectdata(c.ep, msg.data(), 4, 77, 0), 0);
	e = wait_cq(s.cq);
	cr_assert_eq(e.data, 77u);
	std::vector<uint8_t> too_big(inject + 1);
	cr_assert_eq(fi_inject(c.ep, too_big.data(), too_big.size(), 0), -FI_EMSGSIZE);
	expect_cq_empty(c.cq);
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(msg, selective_completion_reports_only_what_was_asked)
{
	DataFixture f;
	f.open();
	DataOptions o;
	o.selective = true;
	o.tx_size = 16;
	auto [c, s] = f.connect_data(o);
	Buffer &src = f.buffer(64);
	Buffer &dst = f.buffer(64 * 100);
	const int n = 100; /* several times the send queue: unsignaled runs retire */
	for (int i = 0; i < n; i++)
		cr_assert_eq(recv_with_completion(s.ep, dst, 64 * i, 64,
						  reinterpret_cast<void *>(uintptr_t(i + 1))), 0);
	int sent = 0;
	while (sent < n) {
		src.data()[0] = static_cast<uint8_t>(sent);
		ssize_t rc = fi_send(c.ep, src.data(), 64, src.desc(), 0, nullptr);
		if (rc == -FI_EAGAIN) {
			fi_cq_data_entry none;
			cr_assert_eq(fi_cq_read(c.cq, &none, 1), -FI_EAGAIN, "unsignaled sends report nothing");
			continue;
		}
		cr_assert_eq(rc, 0);
		sent++;
	}
	for (int i = 0; i < n; i++) {
		fi_cq_data_entry e = wait_cq(s.cq);
		cr_assert_eq(e.op_context, reinterpret_cast<void *>(uintptr_t(i + 1)));
		cr_assert_eq(dst.bytes[64 * i], static_cast<uint8_t>(i));
	}
	/* One send asks for its completion. */
	int ctx;
	cr_assert_eq(fi_recv(s.ep, dst.data(), 64, dst.desc(), 0, nullptr), 0);
	cr_assert_eq(send_flags(c.ep, src, 0, 8, &ctx, FI_COMPLETION), 0);
	fi_cq_data_entry e = wait_cq(c.cq);
	cr_assert_eq(e.op_context, &ctx);
	expect_cq_empty(c.cq);
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(msg, full_queues_say_eagain_and_lose_nothing)
{
	DataFixture f;
	f.open();
	DataOptions o;
	o.tx_size = 8;
	o.rx_size = 16;
	o.cq_size = 4; /* smaller than the queues: the provider grows it */
	auto [c, s] = f.connect_data(o);
	Buffer &src = f.buffer(32);
	Buffer &dst = f.buffer(32 * 16);
	for (int i = 0; i < 16; i++)
		cr_assert_eq(fi_recv(c.ep, dst.data() + 32 * i, 32, dst.desc(), 0, nullptr), 0);
	cr_assert_eq(fi_recv(c.ep, dst.data(), 32, dst.desc(), 0, nullptr), -FI_EAGAIN,
		     "the receive queue holds rx_size");
	/* The server has no receive posted: sends wait for one (RNR), so
	 * none completes and the send queue fills at exactly tx_size. */
	int posted = 0;
	ssize_t rc;
	while ((rc = fi_send(c.ep, src.data(), 32, src.desc(), 0, reinterpret_cast<void *>(uintptr_t(posted + 1)))) == 0)
		posted++;
	cr_assert_eq(rc, -FI_EAGAIN);
	cr_assert_eq(posted, 8, "the send queue holds tx_size (%d posted)", posted);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(fi_recv(s.ep, dst.data() + 32 * i, 32, dst.desc(), 0, nullptr), 0);
	for (int i = 0; i < 8; i++) {
		fi_cq_data_entry e = wait_cq(c.cq);
		cr_assert_eq(e.op_context, reinterpret_cast<void *>(uintptr_t(i + 1)), "in order, once each");
		wait_cq(s.cq);
	}
	expect_cq_empty(c.cq);
	expect_cq_empty(s.cq);
	close_side(c);
	close_side(s);
	f.close_data();
}

/* FI_MORE: requests wait for the next call without it and then go with one
 * doorbell, in order; injected data is taken at the call. */
Test(msg, fi_more_holds_requests_until_the_next_call)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const int n = 8;
	Buffer &src = f.buffer(16);
	Buffer &dst = f.buffer(16 * n);
	for (int i = 0; i < n; i++)
		cr_assert_eq(recv_with_completion(s.ep, dst, 16 * i, 16, ctx_of(i)), 0);
	for (int i = 0; i < n - 1; i++) {
		std::memset(src.data(), 'a' + i, 16);
		cr_assert_eq(send_flags(c.ep, src, 0, 16, ctx_of(i), FI_MORE | FI_INJECT | FI_COMPLETION), 0);
	}
	std::memset(src.data(), 'z', 16); /* the injected copies were taken already */
	expect_cq_empty(s.cq, 300);	   /* nothing went out yet */
	expect_cq_empty(c.cq, 1);
	std::memset(src.data(), 'a' + n - 1, 16);
	cr_assert_eq(send_flags(c.ep, src, 0, 16, ctx_of(n - 1), FI_COMPLETION), 0);
	for (int i = 0; i < n; i++) {
		cr_assert_eq(wait_cq(s.cq).op_context, ctx_of(i));
		cr_assert_eq(wait_cq(c.cq).op_context, ctx_of(i));
		cr_assert(dst.holds(std::vector<uint8_t>(16, uint8_t('a' + i)), 16 * i), "message %d", i);
	}
	/* Writes held back go out with the next fi_inject_write. */
	Buffer &target = f.buffer(64, 0, FI_REMOTE_WRITE);
	Buffer &wsrc = f.buffer(64, 'w');
	for (int i = 0; i < 3; i++)
		cr_assert_eq(write_flags(c.ep, wsrc, 64, target.addr(), target.key(), ctx_of(i),
					 FI_MORE | FI_COMPLETION), 0);
	expect_cq_empty(c.cq, 300);
	cr_assert(!target.holds(std::vector<uint8_t>(64, 'w')), "a held-back write arrived");
	uint8_t last = 'x';
	cr_assert_eq(fi_inject_write(c.ep, &last, 1, 0, target.addr(63), target.key()), 0);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(wait_cq(c.cq).op_context, ctx_of(i));
	const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
	while (target.bytes[63] != 'x' && std::chrono::steady_clock::now() < end)
		;
	cr_assert(target.holds(std::vector<uint8_t>(63, 'w')));
	cr_assert_eq(target.bytes[63], 'x');
	expect_cq_empty(c.cq);
	close_side(c);
	close_side(s);
	f.close_data();
}

/* Requests held back by FI_MORE are not lost when the connection ends:
 * each completes exactly once (sent, or cancelled by the flush). */
Test(msg, fi_more_requests_complete_once_on_shutdown)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	Buffer &src = f.buffer(16, 's');
	Buffer &dst = f.buffer(16 * 4);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(recv_with_completion(s.ep, dst, 16 * i, 16, ctx_of(i)), 0);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(send_flags(c.ep, src, 0, 16, ctx_of(i), FI_MORE | FI_COMPLETION), 0);
	cr_assert_eq(fi_shutdown(c.ep, 0), 0);
	std::set<void *> seen;
	for (int i = 0; i < 3; i++) {
		fi_cq_data_entry e{};
		ssize_t rc;
		const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
		while ((rc = fi_cq_read(c.cq, &e, 1)) == -FI_EAGAIN)
			cr_assert(std::chrono::steady_clock::now() < end, "held-back send %d never completed", i);
		if (rc == -FI_EAVAIL) {
			fi_cq_err_entry err{};
			cr_assert_eq(fi_cq_readerr(c.cq, &err, 0), 1);
			cr_assert_eq(err.err, FI_ECANCELED);
			e.op_context = err.op_context;
		} else {
			cr_assert_eq(rc, 1);
		}
		cr_assert(seen.insert(e.op_context).second, "completion %p reported twice", e.op_context);
	}
	expect_cq_empty(c.cq);
	cr_assert_eq(seen.size(), 3u);
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(msg, shutdown_flushes_every_receive_exactly_once)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const int k = 16;
	Buffer &dst = f.buffer(64 * k);
	int ctx[k];
	for (int i = 0; i < k; i++) {
		cr_assert_eq(fi_recv(s.ep, dst.data() + 64 * i, 64, dst.desc(), 0, &ctx[i]), 0);
		cr_assert_eq(fi_recv(c.ep, dst.data() + 64 * i, 64, dst.desc(), 0, &ctx[i]), 0);
	}
	cr_assert_eq(fi_shutdown(c.ep, 0), 0);
	expect_shutdown_of_both(f.eq, &c.ep->fid, &s.ep->fid);
	for (Side side : {s, c}) {
		std::set<void *> seen;
		for (int i = 0; i < k; i++) {
			fi_cq_err_entry err = wait_cq_error(side.cq);
			cr_assert_eq(err.err, FI_ECANCELED, "flushed: %s", fi_strerror(err.err));
			cr_assert_eq(err.flags, FI_RECV | FI_MSG);
			cr_assert(seen.insert(err.op_context).second, "context reported twice");
		}
		cr_assert_eq(seen.size(), (size_t)k);
		expect_cq_empty(side.cq);
	}
	Buffer &src = f.buffer(8);
	cr_assert_eq(fi_send(c.ep, src.data(), 8, src.desc(), 0, nullptr), -FI_ENOTCONN);
	cr_assert_eq(fi_recv(s.ep, dst.data(), 8, dst.desc(), 0, nullptr), -FI_ENOTCONN);
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(msg, close_flushes_outstanding_receives)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const int k = 8;
	post_receives(f, s, k, 64);
	close_side(s);
	std::set<void *> seen;
	for (int i = 0; i < k; i++) {
		fi_cq_err_entry err = wait_cq_error(s.cq);
		cr_assert_eq(err.err, FI_ECANCELED);
		seen.insert(err.op_context);
	}
	cr_assert_eq(seen.size(), (size_t)k);
	expect_cq_empty(s.cq);
	close_side(c);
	f.close_data();
}

/*
 * Sends that the queue pair finished unsignaled (injects) leave nothing
 * outstanding once the endpoint closes after its peer: no completion
 * retires them, so close must. On soft-iWARP a request posted after the
 * flush never completes, and a drain marker made close wait 2 s and leave
 * the records to the CQ ("not flushed yet"), once per such connection.
 */
Test(msg, close_after_the_peer_leaves_nothing_of_completed_injects)
{
	setenv("FI_LOG_LEVEL", "warn", 1); /* read when libfabric starts */
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const int k = 8;
	Buffer &dst = post_receives(f, s, k, 64);
	for (int i = 0; i < k; i++) {
		const std::vector<uint8_t> msg = pattern(64, static_cast<uint8_t>(i));
		cr_assert_eq(fi_inject(c.ep, msg.data(), msg.size(), 0), 0, "inject %d", i);
	}
	for (int i = 0; i < k; i++) {
		fi_cq_data_entry e = wait_cq(s.cq);
		cr_assert_eq(e.len, 64u);
	}
	for (int i = 0; i < k; i++)
		cr_assert(std::equal(dst.bytes.begin() + 64 * i, dst.bytes.begin() + 64 * (i + 1),
				     pattern(64, static_cast<uint8_t>(i)).begin()),
			  "message %d arrived whole", i);
	close_side(s);
	Event ev = next_event(f.eq);
	cr_assert_eq(ev.rc >= 0 ? ev.type : 0u, static_cast<uint32_t>(FI_SHUTDOWN), "the peer's close: rc %zd", ev.rc);
	cr_assert_eq(ev.fid, &c.ep->fid);
	StderrCapture capture;
	close_side(c);
	const std::string log = capture.text();
	cr_assert(log.find("not flushed") == std::string::npos, "close left requests to the CQ: %s", log.c_str());
	expect_cq_empty(c.cq);
	f.close_data();
}

/* fi_cancel takes back what nd still holds (receives posted before the
 * connection, or behind a multi-receive buffer), each completing with
 * FI_ECANCELED, and says -FI_ENOENT for what the adapter holds. */
Test(msg, cancel_takes_back_receives_nd_still_holds)
{
	DataFixture f;
	f.open();
	Buffer &rx = f.buffer(64 * 8, 0xee);
	int ctx[8];
	DataOptions o;
	o.rx_caps = FI_MULTI_RECV;
	int connect_calls = 0;
	o.before_connect = [&](fid_ep *ep) {
		if (connect_calls++ == 0)
			return; /* the client's; the server's comes second */
		for (int i = 0; i < 3; i++)
			cr_assert_eq(fi_recv(ep, rx.data() + 64 * i, 64, rx.desc(), 0, &ctx[i]), 0);
		cr_assert_eq(fi_cancel(&ep->fid, &ctx[1]), 0, "posted before the connection");
		cr_assert_eq(fi_cancel(&ep->fid, nullptr), -FI_EINVAL);
	};
	auto [c, s] = f.connect_data(o);
	fi_cq_err_entry err = wait_cq_error(s.cq);
	cr_assert_eq(err.err, FI_ECANCELED);
	cr_assert_eq(err.op_context, &ctx[1]);
	cr_assert(err.flags & FI_RECV);

	Buffer &src = f.buffer(64 * 4);
	for (int i = 0; i < 4; i++)
		std::memset(src.data() + 64 * i, 0x10 + i, 64);
	cr_assert_eq(fi_send(c.ep, src.data(), 64, src.desc(), 0, nullptr), 0);
	cr_assert_eq(fi_send(c.ep, src.data() + 64, 64, src.desc(), 0, nullptr), 0);
	cr_assert_eq(wait_cq(s.cq).op_context, &ctx[0]);
	cr_assert_eq(wait_cq(s.cq).op_context, &ctx[2], "the cancelled receive took nothing");
	cr_assert_eq(rx.bytes[64 * 1], 0xee);
	cr_assert_eq(rx.bytes[64 * 2], 0x11);
	cr_assert_eq(fi_cancel(&s.ep->fid, &ctx[0]), -FI_ENOENT, "completed already");

	/* Behind a multi-receive buffer: the buffer is the adapter's, what
	 * waits behind it is nd's. */
	size_t min = 64;
	cr_assert_eq(fi_setopt(&s.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)), 0);
	iovec iov{rx.data() + 64 * 4, 128};
	void *desc = rx.desc();
	fi_msg msg{};
	msg.msg_iov = &iov;
	msg.desc = &desc;
	msg.iov_count = 1;
	msg.context = &ctx[4];
	cr_assert_eq(fi_recvmsg(s.ep, &msg, FI_MULTI_RECV), 0);
	cr_assert_eq(fi_recv(s.ep, rx.data() + 64 * 6, 64, rx.desc(), 0, &ctx[6]), 0);
	cr_assert_eq(fi_recv(s.ep, rx.data() + 64 * 7, 64, rx.desc(), 0, &ctx[7]), 0);
	cr_assert_eq(fi_cancel(&s.ep->fid, &ctx[4]), -FI_ENOENT, "the adapter holds the buffer");
	cr_assert_eq(fi_cancel(&s.ep->fid, &ctx[6]), 0);
	err = wait_cq_error(s.cq);
	cr_assert_eq(err.op_context, &ctx[6]);
	cr_assert_eq(err.err, FI_ECANCELED);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(fi_send(c.ep, src.data() + 64 * (i + 1), 64, src.desc(), 0, nullptr), 0);
	fi_cq_data_entry first = wait_cq(s.cq), second = wait_cq(s.cq), third = wait_cq(s.cq);
	cr_assert_eq(first.op_context, &ctx[4]);
	cr_assert_eq(second.op_context, &ctx[4]);
	cr_assert(second.flags & FI_MULTI_RECV, "128 bytes: full");
	cr_assert_eq(third.op_context, &ctx[7], "the cancelled receive is skipped");
	cr_assert_eq(rx.bytes[64 * 7], 0x13);
	cr_assert_eq(rx.bytes[64 * 6], 0xee);
	for (int i = 0; i < 5; i++)
		wait_cq(c.cq);
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(msg, bad_input_is_refused_at_the_call)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	Buffer &buf = f.buffer(64);
	cr_assert_eq(fi_send(c.ep, nullptr, 16, buf.desc(), 0, nullptr), -FI_EINVAL);
	std::vector<uint8_t> big(f.info->tx_attr->inject_size + 100);
	cr_assert_eq(fi_send(c.ep, big.data(), big.size(), nullptr, 0, nullptr), -FI_EINVAL,
		     "FI_MR_LOCAL: a buffer beyond the inline size needs its descriptor");
	cr_assert_eq(fi_recv(s.ep, buf.data(), 64, nullptr, 0, nullptr), -FI_EINVAL);
	cr_assert_eq(fi_write(c.ep, buf.data(), 64, buf.desc(), 0, 0, 1ULL << 40, nullptr), -FI_EINVAL,
		     "keys are 4 bytes");
	iovec huge{buf.data(), f.info->ep_attr->max_msg_size + 1};
	void *d = buf.desc();
	cr_assert_eq(fi_sendv(c.ep, &huge, &d, 1, 0, nullptr), -FI_EMSGSIZE);
	fi_msg_rma rma{};
	cr_assert_eq(fi_readmsg(c.ep, &rma, 0), -FI_EINVAL, "no remote range");
	cr_assert_eq(fi_readmsg(c.ep, nullptr, 0), -FI_EINVAL);
	cr_assert_eq(fi_sendmsg(c.ep, nullptr, 0), -FI_EINVAL);
	expect_cq_empty(c.cq);
	expect_cq_empty(s.cq);
	send_and_check(f, c, s, 32, 1); /* the connection still works */
	/* A NULL receive buffer is no bad input: it takes no bytes, whatever
	 * its length (fabtests' fi_shared_ctx posts such receives for
	 * zero-byte messages), and needs no descriptor. */
	cr_assert_eq(fi_recv(s.ep, nullptr, 16, nullptr, 0, nullptr), 0);
	cr_assert_eq(fi_send(c.ep, nullptr, 0, nullptr, 0, nullptr), 0);
	fi_cq_data_entry got = wait_cq(s.cq);
	cr_assert_eq(got.len, 0u);
	cr_assert_eq(got.flags, FI_RECV | FI_MSG);
	wait_cq(c.cq);
	/* fi_inject alike: a null buffer with bytes is refused, a zero-byte
	 * inject with none arrives (its own path: the fast one always
	 * carries an inline entry). */
	cr_assert_eq(fi_inject(c.ep, nullptr, 8, 0), -FI_EINVAL);
	cr_assert_eq(fi_recv(s.ep, nullptr, 16, nullptr, 0, nullptr), 0);
	cr_assert_eq(fi_inject(c.ep, nullptr, 0, 0), 0);
	got = wait_cq(s.cq);
	cr_assert_eq(got.len, 0u);
	cr_assert_eq(got.flags, FI_RECV | FI_MSG);
	expect_cq_empty(c.cq);
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(msg, thread_safe_endpoints_take_sends_from_many_threads)
{
	DataFixture f;
	f.open();
	cr_assert_eq(f.info->domain_attr->threading, FI_THREAD_SAFE, "the default threading");
	DataOptions o;
	o.tx_size = 32;
	o.rx_size = 512;
	/* Named, not bound: a lambda captures no structured binding before C++20. */
	const auto sides = f.connect_data(o);
	const Side c = sides.first, s = sides.second;
	constexpr int kThreads = 4, kEach = 100;
	Buffer &dst = f.buffer(16 * kThreads * kEach);
	Buffer &src = f.buffer(16 * kThreads);
	for (int i = 0; i < kThreads * kEach; i++)
		cr_assert_eq(fi_recv(s.ep, dst.data() + 16 * i, 16, dst.desc(), 0, nullptr), 0);
	std::atomic<int> failures{0};
	std::atomic<int> completions{0};
	std::atomic<bool> done{false};
	/* One thread reads the client's CQ while the others post. */
	std::thread reaper([&] {
		fi_cq_data_entry e[8];
		while (!done.load() || completions.load() < kThreads * kEach) {
			ssize_t n = fi_cq_read(c.cq, e, 8);
			if (n > 0)
				completions += static_cast<int>(n);
			else if (n != -FI_EAGAIN)
				failures++;
		}
	});
	std::vector<std::thread> senders;
	for (int t = 0; t < kThreads; t++) {
		senders.emplace_back([&, t] {
			uint8_t *mine = src.data() + 16 * t;
			for (int i = 0; i < kEach;) {
				mine[0] = static_cast<uint8_t>(t);
				ssize_t rc = fi_send(c.ep, mine, 16, src.desc(), 0, nullptr);
				if (rc == 0)
					i++;
				else if (rc != -FI_EAGAIN)
					failures++, i++;
			}
		});
	}
	for (auto &th : senders)
		th.join();
	done = true;
	int received = 0;
	int per_thread[kThreads] = {};
	while (received < kThreads * kEach) {
		fi_cq_data_entry e = wait_cq(s.cq);
		cr_assert_eq(e.len, 16u);
		received++;
	}
	reaper.join();
	cr_assert_eq(failures.load(), 0);
	cr_assert_eq(completions.load(), kThreads * kEach, "every send completed once");
	for (int i = 0; i < kThreads * kEach; i++) {
		uint8_t who = dst.bytes[16 * i];
		cr_assert_lt(who, kThreads);
		per_thread[who]++;
	}
	for (int t = 0; t < kThreads; t++)
		cr_assert_eq(per_thread[t], kEach, "thread %d: %d messages arrived", t, per_thread[t]);
	expect_cq_empty(c.cq);
	close_side(c);
	close_side(s);
	f.close_data();
}
