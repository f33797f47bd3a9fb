/*
 * guest_data.cpp: the data path on a real device: memory registration,
 * CQs, counters, messages, RMA, shared receive contexts, flush on
 * shutdown/close, remote errors and bad input. Every test checks the bytes
 * that arrived and the completions that were (and were not) seen.
 */
#include <criterion/criterion.h>

#include "data_fixture.h"

#include <rdma/fi_ext_nd.h>
#include <rdma/fi_tagged.h>
#include <rdma/rdma_cma.h>
#include <infiniband/verbs.h>

#include <dlfcn.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>

using namespace nd::test;

TestSuite(data, .timeout = 120);

namespace {

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

/* An fi_msg_rma of one iov and one remote range. */
fi_msg_rma one_iov_rma_msg(iovec *iov, void **desc, fi_rma_iov *rma, void *context)
{
	fi_msg_rma msg{};
	msg.msg_iov = iov;
	msg.desc = desc;
	msg.iov_count = 1;
	msg.rma_iov = rma;
	msg.rma_iov_count = 1;
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

} // namespace

Test(data, memory_registration_checks_arguments)
{
	DataFixture f;
	f.open();
	char buf[64];
	fid_mr *mr = nullptr;
	cr_assert_eq(fi_mr_reg(f.domain, nullptr, 64, 0, 0, 0, 0, &mr, nullptr), -FI_EINVAL);
	cr_assert_eq(fi_mr_reg(f.domain, buf, sizeof(buf), 1ULL << 60, 0, 0, 0, &mr, nullptr), -FI_EINVAL);
	cr_assert_eq(fi_mr_reg(f.domain, buf, sizeof(buf), 0, 0, 0, 0, nullptr, nullptr), -FI_EINVAL);
	iovec two[2] = {{buf, 32}, {buf + 32, 32}};
	cr_assert_eq(fi_mr_regv(f.domain, two, 2, 0, 0, 0, 0, &mr, nullptr), -FI_EINVAL,
		     "mr_iov_limit is 1");
	cr_assert_null(mr);
	cr_assert_eq(fi_mr_regv(f.domain, two, 1, FI_SEND, 0, 0, 0, &mr, nullptr), 0);
	cr_assert_neq(fi_mr_desc(mr), nullptr);
	cr_assert_eq(fi_close(&f.domain->fid), -FI_EBUSY, "a region is open");
	cr_assert_eq(fi_close(&mr->fid), 0);
	fi_mr_attr attr{};
	attr.mr_iov = two;
	attr.iov_count = 1;
	attr.access = FI_REMOTE_READ | FI_REMOTE_WRITE;
	attr.context = buf;
	cr_assert_eq(fi_mr_regattr(f.domain, &attr, 0, &mr), 0);
	cr_assert_eq(mr->fid.context, buf);
	cr_assert_eq(fi_close(&mr->fid), 0);
	f.close_data();
}

Test(data, cq_checks_arguments)
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

Test(data, send_recv_every_size_class)
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

Test(data, receives_posted_before_the_connection_are_kept)
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

Test(data, scatter_gather_up_to_the_iov_limit)
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

Test(data, remote_cq_data_on_send_and_write)
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
Test(data, remote_cq_data_many_times_round_the_receive_ring)
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

Test(data, rma_write_and_read_move_the_bytes)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const size_t big = 1 << 20;
	Buffer &local = f.buffer(big);
	Buffer &remote = f.buffer(big, 0, FI_REMOTE_READ | FI_REMOTE_WRITE);
	for (size_t len : {size_t(1), size_t(100), size_t(4096), big}) {
		auto want = pattern(len, static_cast<uint8_t>(len));
		local.fill(want);
		int ctx;
		cr_assert_eq(fi_write(c.ep, local.data(), len, local.desc(), 0, remote.addr(),
				      remote.key(), &ctx), 0);
		fi_cq_data_entry e = wait_cq(c.cq);
		cr_assert_eq(e.op_context, &ctx);
		cr_assert_eq(e.flags, FI_RMA | FI_WRITE);
		cr_assert(remote.holds(want), "write of %zu bytes", len);
		auto back = pattern(len, static_cast<uint8_t>(len + 1));
		std::copy(back.begin(), back.end(), remote.bytes.begin());
		cr_assert_eq(fi_read(c.ep, local.data(), len, local.desc(), 0, remote.addr(),
				     remote.key(), &ctx), 0);
		e = wait_cq(c.cq);
		cr_assert_eq(e.flags, FI_RMA | FI_READ);
		cr_assert(local.holds(back), "read of %zu bytes", len);
	}
	/* Inject write: no completion, the buffer is free at once. */
	std::vector<uint8_t> small = pattern(f.info->tx_attr->inject_size, 3);
	cr_assert_eq(fi_inject_write(c.ep, small.data(), small.size(), 0, remote.addr(8), remote.key()), 0);
	std::fill(small.begin(), small.end(), 0);
	auto expect = pattern(f.info->tx_attr->inject_size, 3);
	/* A signaled read after it completes after it (RC order). */
	cr_assert_eq(fi_read(c.ep, local.data(), expect.size(), local.desc(), 0, remote.addr(8),
			     remote.key(), nullptr), 0);
	wait_cq(c.cq);
	cr_assert(local.holds(expect));
	cr_assert(remote.holds(expect, 8));
	expect_cq_empty(c.cq);
	expect_cq_empty(s.cq, 50);
	close_side(c);
	close_side(s);
	f.close_data();
}

/* FI_ORDER_WAR and FI_ORDER_SAR, asked for: a write, an injected write or
 * a send that follows a read of the same bytes never reaches them before
 * the read has its data (nd fences it, IBV_SEND_FENCE). Reads of 256 KiB,
 * many packets each, with the later request posted at once behind. */
Test(data, writes_and_sends_after_a_read_wait_for_it_when_asked)
{
	DataFixture f;
	f.open();
	DataOptions o;
	o.msg_order = FI_ORDER_WAR | FI_ORDER_SAR;
	auto [c, s] = f.connect_data(o);
	const size_t len = 256 * 1024;
	Buffer &target = f.buffer(len, 0, FI_REMOTE_READ | FI_REMOTE_WRITE);
	Buffer &readback = f.buffer(len);
	Buffer &source = f.buffer(len, 0xbb);
	const std::vector<uint8_t> old_bytes(len, 0xaa);
	const size_t inject = std::min<size_t>(f.info->tx_attr->inject_size, 64);
	for (int round = 0; round < 60; round++) {
		const int how = round % 3; /* write, inject write, send */
		std::fill(target.bytes.begin(), target.bytes.end(), 0xaa);
		std::fill(readback.bytes.begin(), readback.bytes.end(), 0);
		int read_ctx, later_ctx;
		if (how == 2)
			cr_assert_eq(fi_recv(s.ep, target.data(), len, target.desc(), 0, nullptr), 0);
		cr_assert_eq(fi_read(c.ep, readback.data(), len, readback.desc(), 0, target.addr(),
				     target.key(), &read_ctx), 0);
		if (how == 0)
			cr_assert_eq(fi_write(c.ep, source.data(), len, source.desc(), 0, target.addr(),
					      target.key(), &later_ctx), 0);
		else if (how == 1)
			cr_assert_eq(fi_inject_write(c.ep, source.data(), inject, 0, target.addr(),
						     target.key()), 0);
		else
			cr_assert_eq(fi_send(c.ep, source.data(), len, source.desc(), 0, &later_ctx), 0);
		wait_cq(c.cq);
		if (how != 1)
			wait_cq(c.cq);
		if (how == 2)
			wait_cq(s.cq);
		/* The injected write completes nothing, and on iWARP a write
		 * completes at the writer once sent, not once placed: a read
		 * behind it (RAW, in order) shows it has landed. */
		if (how != 2) {
			uint8_t probe[64];
			fid_mr *probe_mr = nullptr;
			cr_assert_eq(fi_mr_reg(f.domain, probe, sizeof(probe), FI_READ, 0, 0, 0, &probe_mr, nullptr), 0);
			cr_assert_eq(fi_read(c.ep, probe, inject, fi_mr_desc(probe_mr), 0, target.addr(),
					     target.key(), nullptr), 0);
			wait_cq(c.cq);
			cr_assert_eq(fi_close(&probe_mr->fid), 0);
		}
		cr_assert(readback.holds(old_bytes), "round %d (%s): the read saw the later request's bytes",
			  round, how == 0 ? "write" : how == 1 ? "inject write" : "send");
		const std::vector<uint8_t> new_bytes(how == 1 ? inject : len, 0xbb);
		cr_assert(target.holds(new_bytes), "round %d: the later request did not land", round);
	}
	expect_cq_empty(c.cq, 50);
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(data, inject_generates_no_completion_and_checks_its_size)
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

/* Reads the application asks no completion for still give their budget
 * back: the provider signals enough of them that a connection with a small
 * read limit never stalls, and the bytes are right. */
Test(data, unsignaled_reads_return_their_budget)
{
	DataFixture f;
	f.open();
	DataOptions o;
	o.selective = true;
	o.tx_size = 64;
	o.before_connect = [](fid_ep *ep) {
		uint32_t four = 4;
		cr_assert_eq(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_ND_OUTBOUND_READ_LIMIT, &four,
				       sizeof(four)), 0);
	};
	auto [c, s] = f.connect_data(o);
	uint32_t outbound = 0;
	size_t len = sizeof(outbound);
	cr_assert_eq(fi_getopt(&c.ep->fid, FI_OPT_ENDPOINT, FI_OPT_ND_OUTBOUND_READ_LIMIT, &outbound, &len), 0);
	cr_assert_eq(outbound, 4u);
	const int n = 200; /* many times the limit and several times the queue */
	Buffer &local = f.buffer(8 * n);
	Buffer &remote = f.buffer(8 * n, 0, FI_REMOTE_READ);
	for (int i = 0; i < 8 * n; i++)
		remote.data()[i] = static_cast<uint8_t>(i * 7 + 1);
	/* Were the budget not given back, this would stall at the fifth read. */
	const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
	int posted = 0;
	while (posted < n) {
		ssize_t rc = fi_read(c.ep, local.data() + 8 * posted, 8, local.desc(), 0,
				     remote.addr() + 8 * posted, remote.key(), nullptr);
		if (rc == -FI_EAGAIN) {
			cr_assert(std::chrono::steady_clock::now() < deadline, "reads stalled after %d of %d",
				  posted, n);
			fi_cq_data_entry none;
			cr_assert_eq(fi_cq_read(c.cq, &none, 1), -FI_EAGAIN, "unsignaled reads report nothing");
			continue;
		}
		cr_assert_eq(rc, 0);
		posted++;
	}
	/* One read asks for its completion; it completes after all the others. */
	iovec iov{local.data(), 8};
	void *d = local.desc();
	fi_rma_iov rma{remote.addr(), 8, remote.key()};
	int ctx;
	fi_msg_rma m = one_iov_rma_msg(&iov, &d, &rma, &ctx);
	cr_assert_eq(fi_readmsg(c.ep, &m, FI_COMPLETION), 0);
	fi_cq_data_entry e = wait_cq(c.cq);
	cr_assert_eq(e.op_context, &ctx);
	expect_cq_empty(c.cq);
	cr_assert_eq(std::memcmp(local.data(), remote.data(), 8 * n), 0, "every read brought its bytes");
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(data, selective_completion_reports_only_what_was_asked)
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

Test(data, full_queues_say_eagain_and_lose_nothing)
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

namespace {

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

/* FI_MORE: requests wait for the next call without it and then go with one
 * doorbell, in order; injected data is taken at the call. */
Test(data, fi_more_holds_requests_until_the_next_call)
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
Test(data, fi_more_requests_complete_once_on_shutdown)
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

Test(data, shutdown_flushes_every_receive_exactly_once)
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

Test(data, close_flushes_outstanding_receives)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const int k = 8;
	Buffer &dst = f.buffer(64 * k);
	for (int i = 0; i < k; i++)
		cr_assert_eq(fi_recv(s.ep, dst.data() + 64 * i, 64, dst.desc(), 0, dst.data() + i), 0);
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

Test(data, remote_access_errors_break_the_connection_visibly)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	Buffer &local = f.buffer(64);
	Buffer &remote = f.buffer(64, 0, FI_REMOTE_READ);
	int ctx;
	/* The region allows remote reads only: a write is refused by the peer. */
	cr_assert_eq(fi_write(c.ep, local.data(), 64, local.desc(), 0, remote.addr(), remote.key(), &ctx), 0);
	fi_cq_err_entry err = wait_cq_error(c.cq);
	cr_assert_eq(err.op_context, &ctx);
	cr_assert(err.err == FI_EACCES || err.err == FI_EIO, "err %d (%s)", err.err, fi_strerror(err.err));
	cr_assert_neq(err.prov_errno, 0);
	cr_assert_str_not_empty(fi_cq_strerror(c.cq, err.prov_errno, nullptr, nullptr, 0));
	ssize_t rc = fi_send(c.ep, local.data(), 8, local.desc(), 0, nullptr);
	cr_assert_eq(rc, -FI_ECONNABORTED, "later calls report the broken connection (rc %zd)", rc);
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(data, bad_keys_and_bounds_fail_as_errors)
{
	DataFixture f;
	f.open();
	for (int variant = 0; variant < 2; variant++) {
		auto [c, s] = f.connect_data();
		Buffer &local = f.buffer(128);
		Buffer &remote = f.buffer(64, 0, FI_REMOTE_READ | FI_REMOTE_WRITE);
		if (variant == 0)
			cr_assert_eq(fi_read(c.ep, local.data(), 64, local.desc(), 0, remote.addr(),
					     remote.key() ^ 0x5a5a00, nullptr), 0);
		else
			cr_assert_eq(fi_write(c.ep, local.data(), 128, local.desc(), 0, remote.addr(),
					      remote.key(), nullptr), 0, "128 bytes into 64");
		fi_cq_err_entry err = wait_cq_error(c.cq);
		cr_assert(err.err == FI_EACCES || err.err == FI_EIO, "variant %d: err %d", variant, err.err);
		close_side(c);
		close_side(s);
		/* Events of the broken connections. */
		while (next_event(f.eq, 300).rc != -FI_EAGAIN) {
		}
	}
	f.close_data();
}

Test(data, bad_input_is_refused_at_the_call)
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
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(data, reads_stay_within_the_negotiated_limit)
{
	DataFixture f;
	f.open();
	/* Client offers one outstanding read. */
	DataOptions o;
	o.before_enable = [](fid_ep *ep, bool client) {
		uint32_t one = 1;
		if (client)
			cr_assert_eq(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_ND_OUTBOUND_READ_LIMIT, &one,
					       sizeof(one)), 0);
	};
	auto [c, s] = f.connect_data(o);
	fid_ep *cep = c.ep, *sep = s.ep;
	fid_cq *ccq = c.cq;
	Buffer &local = f.buffer(1 << 16);
	Buffer &remote = f.buffer(1 << 16, 0, FI_REMOTE_READ);
	int first, second;
	cr_assert_eq(fi_read(cep, local.data(), 1 << 16, local.desc(), 0, remote.addr(), remote.key(), &first), 0);
	ssize_t rc = fi_read(cep, local.data(), 1 << 16, local.desc(), 0, remote.addr(), remote.key(), &second);
	if (rc == -FI_EAGAIN) {
		cr_assert_eq(wait_cq(ccq).op_context, &first);
		cr_assert_eq(fi_read(cep, local.data(), 1 << 16, local.desc(), 0, remote.addr(), remote.key(), &second), 0);
	} else {
		/* Only possible when the first had already completed. */
		cr_assert_eq(rc, 0);
		fi_cq_data_entry e{};
		cr_assert_eq(fi_cq_read(ccq, &e, 1), 1, "the first read was done before the second went");
		cr_assert_eq(e.op_context, &first);
	}
	cr_assert_eq(wait_cq(ccq).op_context, &second);
	cr_assert_eq(fi_close(&cep->fid), 0);
	cr_assert_eq(fi_close(&sep->fid), 0);
	f.close_data();
}

Test(data, cq_wait_fd_sread_and_signal)
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

Test(data, counters_count_completions_and_errors)
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

Test(data, counters_with_selective_completion)
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

Test(data, shared_receive_context_serves_several_connections)
{
	DataFixture f;
	f.open();
	fi_rx_attr rx = *f.info->rx_attr;
	rx.size = 64;
	fid_ep *srx = nullptr;
	cr_assert_eq(fi_srx_context(f.domain, &rx, &srx, nullptr), 0);
	DataOptions o;
	o.srx = srx;
	auto [c1, s1] = f.connect_data(o);
	auto [c2, s2] = f.connect_data(o);
	Buffer &pool = f.buffer(64 * 8);
	Buffer &src = f.buffer(64);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(fi_recv(srx, pool.data() + 64 * i, 64, pool.desc(), 0,
				     reinterpret_cast<void *>(uintptr_t(100 + i))), 0);
	cr_assert_eq(fi_recv(s1.ep, pool.data(), 64, pool.desc(), 0, nullptr), -FI_EOPNOTSUPP,
		     "receives go to the shared context");
	std::set<void *> contexts;
	for (int i = 0; i < 4; i++) {
		src.data()[0] = static_cast<uint8_t>(i);
		cr_assert_eq(fi_send(c1.ep, src.data(), 64, src.desc(), 0, nullptr), 0);
		wait_cq(c1.cq);
		contexts.insert(wait_cq(s1.cq).op_context);
		src.data()[0] = static_cast<uint8_t>(0x80 | i);
		cr_assert_eq(fi_send(c2.ep, src.data(), 64, src.desc(), 0, nullptr), 0);
		wait_cq(c2.cq);
		contexts.insert(wait_cq(s2.cq).op_context);
	}
	cr_assert_eq(contexts.size(), 8u, "every pooled buffer used once");
	std::multiset<uint8_t> firsts;
	for (int i = 0; i < 8; i++)
		firsts.insert(pool.bytes[64 * i]);
	cr_assert_eq(firsts.count(0x80), 1u);
	cr_assert_eq(firsts.count(3), 1u);
	cr_assert_eq(fi_close(&srx->fid), -FI_EBUSY);
	for (Side x : {c1, s1, c2, s2})
		close_side(x);
	cr_assert_eq(fi_close(&srx->fid), 0);
	f.close_data();
}

/* fabtests shared_ctx -e msg: a shared transmit context is one budget of
 * requests in flight across its endpoints (nd_stx.h), and its attributes. */
Test(data, shared_transmit_context_is_one_budget_for_its_endpoints)
{
	DataFixture f;
	f.open();
	fi_tx_attr tx = *f.info->tx_attr;
	tx.inject_size = f.info->tx_attr->inject_size + 1;
	fid_stx *stx = nullptr;
	cr_assert_eq(fi_stx_context(f.domain, &tx, &stx, nullptr), -FI_EINVAL,
		     "an inject size beyond the device's");
	cr_assert_null(stx);
	tx.inject_size = f.info->tx_attr->inject_size;
	tx.size = 8;
	cr_assert_eq(fi_stx_context(f.domain, &tx, &stx, nullptr), 0);
	cr_assert_eq(stx->fid.fclass, static_cast<size_t>(FI_CLASS_STX_CTX));

	/* Binding follows tx_ctx_cnt, both ways. */
	fid_ep *own = nullptr;
	cr_assert_eq(fi_endpoint(f.domain, f.info.get(), &own, nullptr), 0);
	cr_assert_eq(fi_ep_bind(own, &stx->fid, 0), -FI_EINVAL, "opened with its own context");
	cr_assert_eq(fi_close(&own->fid), 0);
	InfoPtr shared(fi_dupinfo(f.info.get()));
	shared->ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT;
	fid_ep *unbound = nullptr;
	cr_assert_eq(fi_endpoint(f.domain, shared.get(), &unbound, nullptr), 0);
	cr_assert_eq(fi_ep_bind(unbound, &f.eq->fid, 0), 0);
	cr_assert_eq(fi_enable(unbound), -FI_ENOENT, "no context bound");
	cr_assert_eq(fi_close(&unbound->fid), 0);

	DataOptions o;
	o.client_stx = stx;
	auto [c1, s1] = f.connect_data(o);
	auto [c2, s2] = f.connect_data(o);
	cr_assert_eq(fi_close(&stx->fid), -FI_EBUSY);
	Buffer &src = f.buffer(64 * 8, 0x5a);	/* a slot per send in flight */
	Buffer &dst = f.buffer(64 * 8);
	/* No receive is posted yet: the sends wait at the receiver (RNR), so
	 * all eight stay in flight, five on one connection, three on the other. */
	for (int i = 0; i < 8; i++) {
		Side &c = i < 5 ? c1 : c2;
		src.data()[64 * i] = static_cast<uint8_t>(i);
		cr_assert_eq(fi_send(c.ep, src.data() + 64 * i, 64, src.desc(), 0,
				     reinterpret_cast<void *>(uintptr_t(i + 1))),
			     0, "send %d within the budget", i);
	}
	for (fid_ep *ep : {c1.ep, c2.ep}) {
		cr_assert_eq(fi_send(ep, src.data(), 64, src.desc(), 0, nullptr), -FI_EAGAIN,
			     "the budget is spent across both endpoints");
		cr_assert_eq(fi_inject(ep, src.data(), 8, 0), -FI_EAGAIN);
	}
	for (int i = 0; i < 8; i++) {
		Side &s = i < 5 ? s1 : s2;
		cr_assert_eq(fi_recv(s.ep, dst.data() + 64 * i, 64, dst.desc(), 0, nullptr), 0);
	}
	std::set<uintptr_t> done;
	for (int i = 0; i < 8; i++) {
		done.insert(reinterpret_cast<uintptr_t>(wait_cq((i < 5 ? c1 : c2).cq).op_context));
		wait_cq((i < 5 ? s1 : s2).cq);
	}
	cr_assert_eq(done.size(), 8u);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(dst.bytes[64 * i], i, "message %d arrived in order, whole", i);
	cr_assert_eq(dst.bytes[64 * 7 + 63], 0x5a);
	/* Retired, the budget is whole again. */
	cr_assert_eq(fi_recv(s2.ep, dst.data(), 64, dst.desc(), 0, nullptr), 0);
	cr_assert_eq(fi_send(c2.ep, src.data(), 64, src.desc(), 0, nullptr), 0);
	wait_cq(c2.cq);
	wait_cq(s2.cq);
	for (Side x : {c1, s1, c2, s2})
		close_side(x);
	cr_assert_eq(fi_close(&stx->fid), 0);
	f.close_data();
}

/* fabtests multi_recv: one buffer takes message after message, packed, and
 * is released (FI_MULTI_RECV) when less than the minimum is left; a receive
 * posted behind it takes the message after that. */
Test(data, multi_receive_buffer_packs_messages_until_released)
{
	DataFixture f;
	f.open();
	{
		/* The flag needs the capability, asked when the endpoint opens. */
		fid_ep *plain = nullptr;
		cr_assert_eq(fi_endpoint(f.domain, f.info.get(), &plain, nullptr), 0);
		fid_cq *cq = f.open_cq();
		cr_assert_eq(fi_ep_bind(plain, &f.eq->fid, 0), 0);
		cr_assert_eq(fi_ep_bind(plain, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
		cr_assert_eq(fi_enable(plain), 0);
		Buffer &b = f.buffer(64);
		iovec iov{b.data(), 64};
		void *desc = b.desc();
		fi_msg msg{};
		msg.msg_iov = &iov;
		msg.desc = &desc;
		msg.iov_count = 1;
		cr_assert_eq(fi_recvmsg(plain, &msg, FI_MULTI_RECV), -FI_EBADFLAGS);
		cr_assert_eq(fi_close(&plain->fid), 0);
	}
	DataOptions o;
	o.rx_caps = FI_MULTI_RECV;
	auto [c, s] = f.connect_data(o);
	size_t min = 64, got = 0, len = sizeof(got);
	cr_assert_eq(fi_setopt(&s.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)), 0);
	cr_assert_eq(fi_getopt(&s.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &got, &len), 0);
	cr_assert_eq(got, 64u);

	Buffer &pool = f.buffer(256, 0xee);
	Buffer &after = f.buffer(64, 0xee);
	iovec iov[2] = {{pool.data(), 128}, {pool.data() + 128, 128}};
	void *descs[2] = {pool.desc(), pool.desc()};
	fi_msg msg{};
	msg.msg_iov = iov;
	msg.desc = descs;
	msg.iov_count = 2;
	msg.context = &pool;
	cr_assert_eq(fi_recvmsg(s.ep, &msg, FI_MULTI_RECV), -FI_EINVAL, "one iov per buffer");
	iov[0].iov_len = 256;
	msg.iov_count = 1;
	cr_assert_eq(fi_recvmsg(s.ep, &msg, FI_MULTI_RECV), 0);
	cr_assert_eq(fi_recv(s.ep, after.data(), 64, after.desc(), 0, &after), 0);

	/* Three messages back to back: 100 and 100 bytes fill the buffer to
	 * 56 free bytes (< 64: released), and 30 go to the receive behind it. */
	Buffer &src = f.buffer(230);
	for (size_t i = 0; i < 230; i++)
		src.data()[i] = static_cast<uint8_t>(i);
	cr_assert_eq(fi_send(c.ep, src.data(), 100, src.desc(), 0, nullptr), 0);
	cr_assert_eq(fi_send(c.ep, src.data() + 100, 100, src.desc(), 0, nullptr), 0);
	cr_assert_eq(fi_send(c.ep, src.data() + 200, 30, src.desc(), 0, nullptr), 0);
	fi_cq_data_entry first = wait_cq(s.cq);
	fi_cq_data_entry second = wait_cq(s.cq);
	fi_cq_data_entry third = wait_cq(s.cq);
	for (int i = 0; i < 3; i++)
		wait_cq(c.cq);
	cr_assert_eq(first.op_context, &pool);
	cr_assert_eq(first.buf, pool.data());
	cr_assert_eq(first.len, 100u);
	cr_assert_eq(first.flags, FI_RECV | FI_MSG, "not released yet");
	cr_assert_eq(second.op_context, &pool);
	cr_assert_eq(second.buf, pool.data() + 100, "packed right after the first");
	cr_assert_eq(second.len, 100u);
	cr_assert_eq(second.flags, FI_RECV | FI_MSG | FI_MULTI_RECV, "56 bytes left: released");
	cr_assert_eq(third.op_context, &after);
	cr_assert_eq(third.len, 30u);
	cr_assert_not(third.flags & FI_MULTI_RECV);
	cr_assert_eq(std::memcmp(pool.data(), src.data(), 200), 0, "both messages whole, in order");
	cr_assert_eq(pool.bytes[200], 0xee, "nothing beyond them");
	cr_assert_eq(std::memcmp(after.data(), src.data() + 200, 30), 0);
	close_side(c);
	close_side(s);
	f.close_data();
}

/* The same through a shared receive context, fed by two connections. */
Test(data, multi_receive_buffer_on_a_shared_receive_context)
{
	DataFixture f;
	f.open();
	fi_rx_attr rx = *f.info->rx_attr;
	rx.size = 64;
	fid_ep *srx = nullptr;
	cr_assert_eq(fi_srx_context(f.domain, &rx, &srx, nullptr), 0);
	size_t min = 64;
	cr_assert_eq(fi_setopt(&srx->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)), 0);
	DataOptions o;
	o.srx = srx;
	auto [c1, s1] = f.connect_data(o);
	auto [c2, s2] = f.connect_data(o);
	Buffer &pool = f.buffer(256, 0xee);
	Buffer &after = f.buffer(64, 0xee);
	iovec iov{pool.data(), 256};
	void *desc = pool.desc();
	fi_msg msg{};
	msg.msg_iov = &iov;
	msg.desc = &desc;
	msg.iov_count = 1;
	msg.context = &pool;
	cr_assert_eq(fi_recvmsg(srx, &msg, FI_MULTI_RECV), 0);
	cr_assert_eq(fi_recv(srx, after.data(), 64, after.desc(), 0, &after), 0);
	cr_assert_eq(fi_cancel(&srx->fid, &after), -FI_ENOENT, "no CQ to report it on");
	Buffer &src = f.buffer(230);
	std::memset(src.data(), 1, 100);
	std::memset(src.data() + 100, 2, 100);
	std::memset(src.data() + 200, 3, 30);
	cr_assert_eq(fi_send(c1.ep, src.data(), 100, src.desc(), 0, nullptr), 0);
	fi_cq_data_entry one = wait_cq(s1.cq);
	cr_assert_eq(fi_send(c2.ep, src.data() + 100, 100, src.desc(), 0, nullptr), 0);
	fi_cq_data_entry two = wait_cq(s2.cq);
	cr_assert_eq(fi_send(c1.ep, src.data() + 200, 30, src.desc(), 0, nullptr), 0);
	fi_cq_data_entry three = wait_cq(s1.cq);
	cr_assert_eq(one.buf, pool.data());
	cr_assert_eq(one.flags, FI_RECV | FI_MSG);
	cr_assert_eq(two.buf, pool.data() + 100);
	cr_assert_eq(two.flags, FI_RECV | FI_MSG | FI_MULTI_RECV);
	cr_assert_eq(three.op_context, &after);
	cr_assert_eq(pool.bytes[0], 1);
	cr_assert_eq(pool.bytes[199], 2);
	cr_assert_eq(after.bytes[29], 3);
	for (Side x : {c1, s1, c2, s2})
		close_side(x);
	cr_assert_eq(fi_close(&srx->fid), 0);
	f.close_data();
}

/* fi_cancel takes back what nd still holds (receives posted before the
 * connection, or behind a multi-receive buffer), each completing with
 * FI_ECANCELED, and says -FI_ENOENT for what the adapter holds. */
Test(data, cancel_takes_back_receives_nd_still_holds)
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

Test(data, the_accepting_side_reads_and_writes_too)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	Buffer &local = f.buffer(1 << 18);
	Buffer &remote = f.buffer(1 << 18, 0, FI_REMOTE_READ | FI_REMOTE_WRITE);
	auto want = pattern(1 << 18, 21);
	remote.fill(want);
	int ctx;
	cr_assert_eq(fi_read(s.ep, local.data(), 1 << 18, local.desc(), 0, remote.addr(), remote.key(), &ctx), 0);
	fi_cq_data_entry e = wait_cq(s.cq);
	cr_assert_eq(e.op_context, &ctx);
	cr_assert(local.holds(want));
	auto back = pattern(1 << 18, 22);
	local.fill(back);
	cr_assert_eq(fi_write(s.ep, local.data(), 1 << 18, local.desc(), 0, remote.addr(), remote.key(), &ctx), 0);
	wait_cq(s.cq);
	cr_assert(remote.holds(back));
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(data, thread_safe_endpoints_take_sends_from_many_threads)
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

Test(data, every_cq_format_reports_its_fields)
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

Test(data, a_failed_enable_keeps_the_bindings_balanced)
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

/* Poll sets are deprecated in libfabric 2.x's headers, still part of its
 * API (fabtests' fi_poll uses them): this test calls them as they are. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* fi_poll_open (fabtests fi_poll): a poll set reports each CQ that holds an
 * entry, once per call until it is read, and each counter whose count moved
 * since the set last reported it; members cannot close while in the set. */
Test(data, poll_set_reports_cqs_with_entries_and_counters_that_moved)
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

/* A wait set sleeps until one of its CQs or EQs has something, says so
 * through fi_wait and through its fd, and outlives none of its members. */
Test(data, wait_set_wakes_for_its_cqs_and_eqs)
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

/*
 * The registration cache on the device: reuse makes no new registration,
 * and memory that was unmapped and mapped again (munmap, free, realloc,
 * madvise) is registered anew, so that a peer's RDMA write lands in the
 * memory the application now has at that address. Under AddressSanitizer,
 * ThreadSanitizer and valgrind the provider keeps no cache (their
 * allocators unmap where no hook sees it): the tests then check that, and
 * still check the bytes.
 */
TestSuite(mr_cache, .timeout = 120);

namespace {

bool allocator_hides_unmaps()
{
	const char *preload = std::getenv("LD_PRELOAD");
	return dlsym(RTLD_DEFAULT, "__asan_init") || dlsym(RTLD_DEFAULT, "__tsan_init") ||
	       (preload && std::strstr(preload, "vgpreload"));
}

/* The domain's cache statistics; false when it has none (which only the
 * sanitizers and valgrind may cause). */
bool cache_stats(fid_domain *domain, fi_nd_mr_cache_stats *stats)
{
	int rc = fi_nd_get_mr_cache_stats(domain, stats);
	if (rc == -FI_ENOSYS) {
		cr_assert(allocator_hides_unmaps(), "no registration cache outside the sanitizers and valgrind");
		return false;
	}
	cr_assert_eq(rc, 0);
	return true;
}

/* Registers [addr, addr + len) for remote writes, has the client write a
 * pattern there, checks the bytes in that memory, and closes the region. */
void write_lands_in(DataFixture &f, Side c, void *addr, size_t len, uint8_t seed)
{
	fid_mr *mr = nullptr;
	cr_assert_eq(fi_mr_reg(f.domain, addr, len, FI_REMOTE_WRITE, 0, 0, 0, &mr, nullptr), 0);
	Buffer &src = f.buffer(len);
	auto want = pattern(len, seed);
	src.fill(want);
	cr_assert_eq(fi_write(c.ep, src.data(), len, src.desc(), 0, reinterpret_cast<uintptr_t>(addr),
			      fi_mr_key(mr), nullptr), 0);
	wait_cq(c.cq);
	cr_assert(std::equal(want.begin(), want.end(), static_cast<uint8_t *>(addr)),
		  "the write landed in the memory now at %p", addr);
	cr_assert_eq(fi_close(&mr->fid), 0);
}

void *map_anonymous(size_t len, void *at = nullptr)
{
	void *p = mmap(at, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);
	cr_assert_neq(p, MAP_FAILED);
	return p;
}

} // namespace

Test(mr_cache, reuse_of_a_buffer_registers_once)
{
	DataFixture f;
	f.open();
	std::vector<uint8_t> bytes(1 << 20);
	fi_nd_mr_cache_stats before{}, after{};
	const bool cached = cache_stats(f.domain, &before);
	for (int i = 0; i < 100; i++) {
		fid_mr *mr = nullptr;
		/* The whole buffer, then a part of it: both are covered. (Regions
		 * that peers may reach: regions_for_peers_reuse_one_registration.) */
		cr_assert_eq(fi_mr_reg(f.domain, bytes.data() + (i % 2) * 4096, bytes.size() / (1 + i % 2),
				       FI_SEND | FI_RECV, 0, 0, 0, &mr, nullptr), 0);
		cr_assert_eq(fi_close(&mr->fid), 0);
	}
	if (cached) {
		cache_stats(f.domain, &after);
		cr_assert_eq(after.misses - before.misses, 1u);
		cr_assert_eq(after.hits - before.hits, 99u);
		cr_assert_eq(after.in_use, 0u);
	}
	f.close_data();
}

Test(mr_cache, ofi_rxm_pools_flagged_nocache_bypass_it)
{
	DataFixture f;
	f.open();
	fi_nd_mr_cache_stats before{}, after{};
	if (!cache_stats(f.domain, &before))
		return f.close_data();
	std::vector<uint8_t> bytes(8192);
	for (int i = 0; i < 3; i++) {
		fid_mr *mr = nullptr;
		cr_assert_eq(fi_mr_reg(f.domain, bytes.data(), bytes.size(), 0, 0, 0, 1ULL << 60 /* OFI_MR_NOCACHE */,
				       &mr, nullptr), 0);
		cr_assert_eq(fi_close(&mr->fid), 0);
	}
	cache_stats(f.domain, &after);
	cr_assert_eq(after.misses, before.misses);
	cr_assert_eq(after.hits, before.hits);
	f.close_data();
}

Test(mr_cache, munmap_then_mmap_at_the_same_address_registers_the_new_memory)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const size_t len = 1 << 16;
	void *p = map_anonymous(len);
	write_lands_in(f, c, p, len, 1); /* cached (idle) after the close */
	fi_nd_mr_cache_stats before{}, after{};
	/* Not on soft-iWARP, which has no memory windows: a region that peers
	 * may reach is not cached there (the bytes are still checked). */
	const bool cached = cache_stats(f.domain, &before) && !f.iwarp();
	cr_assert_eq(munmap(p, len), 0);
	cr_assert_eq(map_anonymous(len, p), p);
	write_lands_in(f, c, p, len, 2);
	if (cached) {
		cache_stats(f.domain, &after);
		cr_assert_geq(after.invalidations - before.invalidations, 1u);
		cr_assert_eq(after.hits, before.hits, "the old registration was not reused");
	}
	munmap(p, len);
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(mr_cache, madvise_dontneed_drops_the_registration)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const size_t len = 1 << 16;
	void *p = map_anonymous(len);
	write_lands_in(f, c, p, len, 3);
	/* The pages go; the next touch maps fresh zero pages at the same
	 * addresses, which a stale registration would not reach. */
	cr_assert_eq(madvise(p, len, MADV_DONTNEED), 0);
	write_lands_in(f, c, p, len, 4);
	munmap(p, len);
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(mr_cache, free_and_realloc_of_large_blocks_register_the_new_memory)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const size_t len = 8 << 20; /* above glibc's mmap threshold: free unmaps it */
	fi_nd_mr_cache_stats before{}, after{};
	for (int round = 0; round < 4; round++) {
		auto *block = static_cast<uint8_t *>(std::malloc(len));
		cr_assert_not_null(block);
		write_lands_in(f, c, block, 4096, static_cast<uint8_t>(10 + round));
		if (round % 2) {
			/* realloc: moved or grown in place, the memory at the old
			 * address may be new. */
			auto *grown = static_cast<uint8_t *>(std::realloc(block, 4 * len));
			cr_assert_not_null(grown);
			write_lands_in(f, c, grown, 4096, static_cast<uint8_t>(20 + round));
			block = grown;
		}
		/* Regions peers may reach are not cached on soft-iWARP (no
		 * memory windows). */
		const bool cached = cache_stats(f.domain, &before) && !f.iwarp();
		std::free(block);
		/* Whatever malloc hands out now, at the old address or not. */
		auto *next = static_cast<uint8_t *>(std::malloc(len));
		cr_assert_not_null(next);
		write_lands_in(f, c, next, 4096, static_cast<uint8_t>(30 + round));
		if (cached && round == 0) {
			cache_stats(f.domain, &after);
			cr_assert_geq(after.invalidations - before.invalidations, 1u,
				      "free of an mmapped block is seen");
		}
		std::free(next);
	}
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(mr_cache, a_shrinking_brk_drops_the_registration)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const long page = sysconf(_SC_PAGESIZE);
	const size_t len = 16 * page;
	Buffer &src = f.buffer(len);
	const std::vector<uint8_t> wants[2] = {pattern(len, 7), pattern(len, 8)};
	/* Pages above the break: given back by a shrinking brk, and new ones at
	 * the same addresses when it grows again. Nothing is allocated between
	 * the sbrk calls but the registration's own small objects, so malloc
	 * does not move the break meanwhile. */
	auto *top = static_cast<uint8_t *>(sbrk(0));
	auto *start = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(top) + page - 1) &
						  ~static_cast<uintptr_t>(page - 1));
	const intptr_t grow = (start - top) + static_cast<intptr_t>(len);
	cr_assert_neq(sbrk(grow), reinterpret_cast<void *>(-1));
	for (int round = 0; round < 2; round++) {
		const std::vector<uint8_t> &want = wants[round];
		src.fill(want);
		fid_mr *mr = nullptr;
		cr_assert_eq(fi_mr_reg(f.domain, start, len, FI_REMOTE_WRITE, 0, 0, 0, &mr, nullptr), 0);
		cr_assert_eq(fi_write(c.ep, src.data(), len, src.desc(), 0, reinterpret_cast<uintptr_t>(start),
				      fi_mr_key(mr), nullptr), 0);
		wait_cq(c.cq);
		cr_assert(std::equal(want.begin(), want.end(), start), "the write landed above the break");
		cr_assert_eq(fi_close(&mr->fid), 0);
		if (round == 0) { /* shrink and grow: the same addresses, new pages */
			cr_assert_neq(sbrk(-static_cast<intptr_t>(len)), reinterpret_cast<void *>(-1));
			cr_assert_neq(sbrk(static_cast<intptr_t>(len)), reinterpret_cast<void *>(-1));
		}
	}
	cr_assert_eq(sbrk(0), start + len, "nothing else moved the break");
	cr_assert_neq(sbrk(-grow), reinterpret_cast<void *>(-1));
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(mr_cache, threads_register_while_memory_comes_and_goes)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	std::vector<uint8_t> shared(1 << 20);
	std::atomic<bool> failed{false};
	std::vector<std::thread> threads;
	for (int t = 0; t < 4; t++) {
		threads.emplace_back([&, t] {
			for (int i = 0; i < 300 && !failed; i++) {
				fid_mr *mr = nullptr;
				/* Local regions, and regions for peers (memory
				 * windows bound and invalidated from four threads). */
				const uint64_t access = i % 2 ? FI_REMOTE_WRITE : FI_RECV;
				if (t % 2) {
					size_t off = (i * 4096) % (shared.size() / 2);
					if (fi_mr_reg(f.domain, shared.data() + off, 65536, access, 0, 0, 0, &mr,
						      nullptr) || fi_close(&mr->fid))
						failed = true;
				} else {
					void *p = mmap(nullptr, 65536, PROT_READ | PROT_WRITE,
						       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
					if (p == MAP_FAILED ||
					    fi_mr_reg(f.domain, p, 65536, access, 0, 0, 0, &mr, nullptr) ||
					    fi_close(&mr->fid) || munmap(p, 65536))
						failed = true;
				}
			}
		});
	}
	for (auto &thread : threads)
		thread.join();
	cr_assert_not(failed.load(), "a registration or close failed");
	fi_nd_mr_cache_stats stats{};
	if (cache_stats(f.domain, &stats)) {
		cr_assert_eq(stats.in_use, 0u, "every region's use was returned");
		cr_assert_geq(stats.invalidations, 1u);
	}
	/* The cache still serves correct registrations afterwards. */
	void *p = map_anonymous(65536);
	write_lands_in(f, c, p, 65536, 5);
	munmap(p, 65536);
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(mr_cache, fi_nd_mr_cache_enable_0_turns_it_off)
{
	setenv("FI_ND_MR_CACHE_ENABLE", "0", 1);
	DataFixture f;
	f.open();
	fi_nd_mr_cache_stats stats{};
	cr_assert_eq(fi_nd_get_mr_cache_stats(f.domain, &stats), -FI_ENOSYS);
	cr_assert_eq(fi_nd_get_mr_cache_stats(f.domain, nullptr), -FI_EINVAL);
	auto [c, s] = f.connect_data();
	void *p = map_anonymous(4096);
	write_lands_in(f, c, p, 4096, 6);
	munmap(p, 4096);
	close_side(c);
	close_side(s);
	f.close_data();
}

/*
 * Remote access ends at fi_close (issue 26). A region is registered the
 * three ways libfabric has, a peer writes it with its key, the application
 * closes it and puts new bytes there (as it would after freeing and reusing
 * the memory); the peer's write or read with the old key then fails at the
 * peer, and neither the memory nor the peer's buffer changes. The same
 * buffer is registered again each round, so that with the cache on the
 * rounds reuse one cached registration: its key must not serve peers. A
 * region served from a larger cached registration is reachable in its own
 * bytes only.
 */
namespace {

enum class RegisterWay { reg, regv, regattr };

fid_mr *register_remote(fid_domain *domain, void *addr, size_t len, RegisterWay way)
{
	const uint64_t access = FI_REMOTE_READ | FI_REMOTE_WRITE;
	fid_mr *mr = nullptr;
	iovec iov = {addr, len};
	fi_mr_attr attr{};
	attr.mr_iov = &iov;
	attr.iov_count = 1;
	attr.access = access;
	attr.iface = FI_HMEM_SYSTEM;
	int rc = -FI_EOTHER;
	switch (way) {
	case RegisterWay::reg:
		rc = fi_mr_reg(domain, addr, len, access, 0, 0, 0, &mr, nullptr);
		break;
	case RegisterWay::regv:
		rc = fi_mr_regv(domain, &iov, 1, access, 0, 0, 0, &mr, nullptr);
		break;
	case RegisterWay::regattr:
		rc = fi_mr_regattr(domain, &attr, 0, &mr);
		break;
	}
	cr_assert_eq(rc, 0, "registration way %d: %s", static_cast<int>(way), fi_strerror(-rc));
	return mr;
}

/* A request whose key reaches no memory completes in error at the
 * requester; on iWARP a refused read completes flushed (FI_ECANCELED) and a
 * refused write may complete, since iWARP reports write errors at the
 * responder only (fi_nd(7), iWARP). The caller then checks the bytes, after
 * a pause that lets a write in flight land if it were to. */
void expect_refused(DataFixture &f, fid_cq *cq, bool write, const char *what)
{
	const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
	for (;;) {
		fi_cq_data_entry entry{};
		ssize_t rc = fi_cq_read(cq, &entry, 1);
		if (rc == 1) {
			cr_assert(f.iwarp() && write, "%s completed without error", what);
			break;
		}
		if (rc == -FI_EAVAIL) {
			fi_cq_err_entry err{};
			cr_assert_eq(fi_cq_readerr(cq, &err, 0), 1);
			cr_assert(err.err == FI_EACCES || err.err == FI_EIO || (f.iwarp() && err.err == FI_ECANCELED),
				  "%s: err %d (%s)", what, err.err, fi_strerror(err.err));
			break;
		}
		cr_assert_eq(rc, -FI_EAGAIN, "%s: fi_cq_read: %zd", what, rc);
		cr_assert(std::chrono::steady_clock::now() < end, "%s: no completion in 10 s", what);
		std::this_thread::yield();
	}
	std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

void drain_events(DataFixture &f)
{
	while (next_event(f.eq, 300).rc != -FI_EAGAIN) {
	}
}

void closed_regions_are_out_of_reach()
{
	DataFixture f;
	f.open();
	const size_t len = 8192;
	uint8_t *target = static_cast<uint8_t *>(map_anonymous(len));
	const std::vector<uint8_t> reused(len, 0x5a);
	for (RegisterWay way : {RegisterWay::reg, RegisterWay::regv, RegisterWay::regattr}) {
		for (bool write : {true, false}) {
			auto [c, s] = f.connect_data();
			Buffer &local = f.buffer(len);
			fid_mr *mr = register_remote(f.domain, target, len, way);
			const uint64_t key = fi_mr_key(mr);
			auto want = pattern(len, static_cast<uint8_t>(static_cast<int>(way) * 2 + write));
			local.fill(want);
			cr_assert_eq(fi_write(c.ep, local.data(), len, local.desc(), 0,
					      reinterpret_cast<uintptr_t>(target), key, nullptr), 0);
			wait_cq(c.cq);
			cr_assert(std::equal(want.begin(), want.end(), target), "the write with the live key landed");
			cr_assert_eq(fi_close(&mr->fid), 0);
			std::copy(reused.begin(), reused.end(), target);
			std::fill(local.bytes.begin(), local.bytes.end(), 0);
			if (write) {
				local.fill(want);
				cr_assert_eq(fi_write(c.ep, local.data(), len, local.desc(), 0,
						      reinterpret_cast<uintptr_t>(target), key, nullptr), 0);
				expect_refused(f, c.cq, true, "a write with a closed region's key");
			} else {
				cr_assert_eq(fi_read(c.ep, local.data(), len, local.desc(), 0,
						     reinterpret_cast<uintptr_t>(target), key, nullptr), 0);
				expect_refused(f, c.cq, false, "a read with a closed region's key");
				cr_assert(local.holds(std::vector<uint8_t>(len, 0)), "the read brought nothing back");
			}
			cr_assert(std::equal(reused.begin(), reused.end(), target),
				  "way %d, %s: the closed region's memory is untouched", static_cast<int>(way),
				  write ? "write" : "read");
			close_side(c);
			close_side(s);
			drain_events(f);
		}
	}
	/* The whole buffer, then its second half: with the cache the half is
	 * served by the whole one's registration, and still its key reaches
	 * the half only. */
	fid_mr *whole = register_remote(f.domain, target, len, RegisterWay::reg);
	cr_assert_eq(fi_close(&whole->fid), 0);
	fid_mr *half = register_remote(f.domain, target + len / 2, len / 2, RegisterWay::reg);
	auto [c, s] = f.connect_data();
	Buffer &local = f.buffer(64, 0x11);
	cr_assert_eq(fi_write(c.ep, local.data(), 64, local.desc(), 0, reinterpret_cast<uintptr_t>(target),
			      fi_mr_key(half), nullptr), 0);
	expect_refused(f, c.cq, true, "a write below the region");
	cr_assert(std::equal(reused.begin(), reused.end(), target), "the bytes below the region are untouched");
	cr_assert_eq(fi_close(&half->fid), 0);
	close_side(c);
	close_side(s);
	drain_events(f);
	munmap(target, len);
	f.close_data();
}

} // namespace

Test(mr_cache, a_closed_region_is_out_of_reach_of_its_old_key)
{
	closed_regions_are_out_of_reach();
}

Test(mr_cache, without_the_cache_a_closed_region_is_out_of_reach_too)
{
	setenv("FI_ND_MR_CACHE_ENABLE", "0", 1);
	closed_regions_are_out_of_reach();
}

/* The cache keeps its gain with windows: a buffer registered for peers
 * again and again is registered with the device once, and each region's
 * key works while it is open. */
Test(mr_cache, regions_for_peers_reuse_one_registration)
{
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const size_t len = 1 << 16;
	uint8_t *target = static_cast<uint8_t *>(map_anonymous(len));
	Buffer &local = f.buffer(len);
	fi_nd_mr_cache_stats before{}, after{};
	const bool cached = cache_stats(f.domain, &before);
	uint64_t previous_key = 0;
	for (int round = 0; round < 50; round++) {
		fid_mr *mr = register_remote(f.domain, target, len, RegisterWay::reg);
		cr_assert_neq(fi_mr_key(mr), previous_key, "round %d: a new key each time", round);
		previous_key = fi_mr_key(mr);
		auto want = pattern(len, static_cast<uint8_t>(round));
		local.fill(want);
		cr_assert_eq(fi_write(c.ep, local.data(), len, local.desc(), 0, reinterpret_cast<uintptr_t>(target),
				      fi_mr_key(mr), nullptr), 0);
		wait_cq(c.cq);
		cr_assert(std::equal(want.begin(), want.end(), target), "round %d", round);
		cr_assert_eq(fi_close(&mr->fid), 0);
	}
	if (cached) {
		cache_stats(f.domain, &after);
		cr_assert_leq(after.misses - before.misses, 1u, "one registration with the device at most");
		cr_assert_geq(after.hits - before.hits, 49u);
	}
	close_side(c);
	close_side(s);
	munmap(target, len);
	f.close_data();
}

/* Wait sets are deprecated in libfabric 2.x's headers, still in its API. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* Counters with wait objects: FI_WAIT_FD gives an fd that polls readable
 * when a completion feeds the counter, fi_cntr_wait sleeps until the
 * threshold (woken by completions and by fi_cntr_add), FI_WAIT_SET counters
 * wake their set, and a CQ that has no wait object cannot feed one. */
Test(data, counter_wait_objects_wake_for_completions_and_adds)
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

/* ---- FI_TAGGED on connected endpoints (nd_framing.h) ---- */

TestSuite(tagged, .timeout = 120);

namespace {

fi_cq_tagged_entry wait_tagged(fid_cq *cq)
{
	return wait_cq<fi_cq_tagged_entry>(cq);
}

struct TaggedPair {
	DataFixture f;
	Side c, s;
	TaggedPair()
	{
		f.hint_caps = FI_TAGGED;
		f.open();
		cr_assert(f.info->caps & FI_TAGGED, "asked for: offered");
		DataOptions o;
		o.cq_format = FI_CQ_FORMAT_TAGGED;
		std::tie(c, s) = f.connect_data(o);
	}
	~TaggedPair()
	{
		close_side(c);
		close_side(s);
		f.close_data();
	}
};

} // namespace

Test(tagged, messages_sent_before_their_receives_match_by_tag_in_any_order)
{
	TaggedPair p;
	Buffer &src = p.f.buffer(4 * 4096);
	Buffer &dst = p.f.buffer(4 * 4096, 0xee);
	const size_t sizes[4] = {1, 100, 1000, 3000};
	for (int i = 0; i < 4; i++) {
		std::vector<uint8_t> bytes = pattern(sizes[i], static_cast<uint8_t>(i + 1));
		std::copy(bytes.begin(), bytes.end(), src.data() + 4096 * i);
		cr_assert_eq(fi_tsend(p.c.ep, src.data() + 4096 * i, sizes[i], src.desc(), 0, 0x100 + i, nullptr), 0);
	}
	for (int i = 0; i < 4; i++)
		cr_assert(wait_tagged(p.c.cq).flags & FI_TAGGED);
	/* Every message is unexpected now: receives posted in reverse order
	 * each complete at once with their own message. */
	int ctx[4];
	for (int i = 3; i >= 0; i--) {
		cr_assert_eq(fi_trecv(p.s.ep, dst.data() + 4096 * i, 4096, dst.desc(), 0, 0x100 + i, 0, &ctx[i]), 0);
		fi_cq_tagged_entry e = wait_tagged(p.s.cq);
		cr_assert_eq(e.op_context, &ctx[i]);
		cr_assert_eq(e.tag, 0x100u + i);
		cr_assert_eq(e.len, sizes[i]);
		cr_assert_eq(e.flags, FI_RECV | FI_TAGGED);
		cr_assert(dst.holds(pattern(sizes[i], static_cast<uint8_t>(i + 1)), 4096 * i));
	}
	/* Expected: the receive waits first; ignore bits widen the match. */
	cr_assert_eq(fi_trecv(p.s.ep, dst.data(), 1024, dst.desc(), 0, 0x200, 0xff, &ctx[0]), 0);
	expect_cq_empty(p.s.cq, 50);
	cr_assert_eq(fi_tsend(p.c.ep, src.data(), 10, src.desc(), 0, 0x2ab, nullptr), 0);
	fi_cq_tagged_entry e = wait_tagged(p.s.cq);
	cr_assert_eq(e.op_context, &ctx[0]);
	cr_assert_eq(e.tag, 0x2abu);
	wait_tagged(p.c.cq);
}

Test(tagged, untagged_data_inject_and_zero_bytes_keep_their_kinds)
{
	TaggedPair p;
	Buffer &src = p.f.buffer(256);
	Buffer &dst = p.f.buffer(1024, 0xee);
	int untagged, tagged;
	/* A plain receive never takes a tagged message, nor the reverse. */
	cr_assert_eq(fi_recv(p.s.ep, dst.data(), 512, dst.desc(), 0, &untagged), 0);
	cr_assert_eq(fi_trecv(p.s.ep, dst.data() + 512, 512, dst.desc(), 0, 7, 0, &tagged), 0);
	/* As much as inject_size allows, up to 64 (soft-iWARP's is 40 once
	 * the frame header is inline too). */
	const size_t injected = std::min<size_t>(64, p.f.info->tx_attr->inject_size);
	std::vector<uint8_t> a = pattern(injected, 3), b = pattern(32, 9);
	std::copy(b.begin(), b.end(), src.data() + 128);
	cr_assert_eq(fi_tinject(p.c.ep, a.data(), a.size(), 0, 7), 0, "inject: the buffer is ours again at once");
	std::fill(a.begin(), a.end(), 0);
	cr_assert_eq(fi_senddata(p.c.ep, src.data() + 128, b.size(), src.desc(), 0xfeedbeefcafeull, 0, nullptr), 0);
	fi_cq_tagged_entry first = wait_tagged(p.s.cq), second = wait_tagged(p.s.cq);
	cr_assert_eq(first.op_context, &tagged);
	cr_assert_eq(first.len, injected);
	cr_assert(dst.holds(pattern(injected, 3), 512));
	cr_assert_eq(second.op_context, &untagged);
	cr_assert_eq(second.flags, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
	cr_assert_eq(second.data, 0xfeedbeefcafeull, "all 64 bits of the data travel in the header");
	cr_assert(dst.holds(b));
	wait_tagged(p.c.cq); /* the senddata; the inject reports nothing */
	expect_cq_empty(p.c.cq, 50);
	/* Zero bytes, with a NULL buffer on both sides. */
	cr_assert_eq(fi_trecv(p.s.ep, nullptr, 0, nullptr, 0, 1, 0, &tagged), 0);
	cr_assert_eq(fi_tsend(p.c.ep, nullptr, 0, nullptr, 0, 1, nullptr), 0);
	fi_cq_tagged_entry zero = wait_tagged(p.s.cq);
	cr_assert_eq(zero.op_context, &tagged);
	cr_assert_eq(zero.len, 0u);
	wait_tagged(p.c.cq);
}

Test(tagged, short_buffers_sizes_and_cancel_fail_as_the_man_pages_say)
{
	TaggedPair p;
	const size_t max = p.f.info->ep_attr->max_msg_size;
	Buffer &src = p.f.buffer(max + 1);
	Buffer &dst = p.f.buffer(max, 0xee);
	std::vector<uint8_t> bytes = pattern(100, 5);
	std::copy(bytes.begin(), bytes.end(), src.data());
	int ctx;
	cr_assert_eq(fi_trecv(p.s.ep, dst.data(), 8, dst.desc(), 0, 3, 0, &ctx), 0);
	cr_assert_eq(fi_tsend(p.c.ep, src.data(), 100, src.desc(), 0, 3, nullptr), 0);
	fi_cq_err_entry err = wait_cq_error(p.s.cq);
	cr_assert_eq(err.err, FI_ETRUNC);
	cr_assert_eq(err.op_context, &ctx);
	cr_assert_eq(err.len, 8u);
	cr_assert_eq(err.olen, 92u);
	cr_assert_eq(err.tag, 3u);
	cr_assert(dst.holds(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 8)));
	cr_assert_eq(dst.bytes[8], 0xee, "nothing past the buffer");
	wait_tagged(p.c.cq);

	/* max_msg_size is a receive buffer's payload: exactly that fits. */
	cr_assert_eq(fi_tsend(p.c.ep, src.data(), max + 1, src.desc(), 0, 4, nullptr), -FI_EMSGSIZE);
	cr_assert_eq(fi_tsend(p.c.ep, src.data(), max, src.desc(), 0, 4, nullptr), 0);
	cr_assert_eq(fi_trecv(p.s.ep, dst.data(), max, dst.desc(), 0, 4, 0, &ctx), 0);
	cr_assert_eq(wait_tagged(p.s.cq).len, max);
	wait_tagged(p.c.cq);

	/* A waiting receive can be cancelled; a completed one cannot. */
	cr_assert_eq(fi_trecv(p.s.ep, dst.data(), 64, dst.desc(), 0, 9, 0, &ctx), 0);
	cr_assert_eq(fi_cancel(&p.s.ep->fid, &ctx), 0);
	err = wait_cq_error(p.s.cq);
	cr_assert_eq(err.err, FI_ECANCELED);
	cr_assert_eq(err.op_context, &ctx);
	cr_assert(err.flags & FI_TAGGED);
	cr_assert_eq(fi_cancel(&p.s.ep->fid, &ctx), -FI_ENOENT);
	cr_assert_eq(fi_trecvmsg(p.s.ep, nullptr, 0), -FI_EINVAL);
	/* A receive still waiting when the endpoint closes completes then. */
	cr_assert_eq(fi_trecv(p.s.ep, dst.data(), 64, dst.desc(), 0, 10, 0, &ctx), 0);
}

Test(tagged, a_burst_beyond_the_receive_buffers_arrives_whole_and_in_order)
{
	TaggedPair p;
	constexpr int kMessages = 300; /* more than nd's 64 buffers */
	Buffer &src = p.f.buffer(kMessages * 16);
	Buffer &dst = p.f.buffer(kMessages * 16, 0xee);
	for (int i = 0; i < kMessages; i++) {
		std::memset(src.data() + 16 * i, i & 0xff, 16);
		ssize_t rc;
		while ((rc = fi_tsend(p.c.ep, src.data() + 16 * i, 16, src.desc(), 0, 0x5000 + i, nullptr)) == -FI_EAGAIN) {
			fi_cq_tagged_entry e;
			while (fi_cq_read(p.c.cq, &e, 1) == 1) {
			}
			while (fi_cq_read(p.s.cq, &e, 1) == 1) { /* progress the receiver too */
			}
		}
		cr_assert_eq(rc, 0);
		fi_cq_tagged_entry e;
		(void)fi_cq_read(p.s.cq, &e, 1); /* nothing is posted: keeps nd's buffers flowing */
	}
	for (int i = kMessages - 1; i >= 0; i--) {
		int ctx;
		ssize_t rc;
		while ((rc = fi_trecv(p.s.ep, dst.data() + 16 * i, 16, dst.desc(), 0, 0x5000 + i, 0, &ctx)) == -FI_EAGAIN) {
			fi_cq_tagged_entry e;
			(void)fi_cq_read(p.c.cq, &e, 1);
		}
		cr_assert_eq(rc, 0);
		fi_cq_tagged_entry e{};
		const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
		while (fi_cq_read(p.s.cq, &e, 1) != 1) {
			cr_assert(std::chrono::steady_clock::now() < end, "message %d never matched", i);
			fi_cq_tagged_entry t;
			(void)fi_cq_read(p.c.cq, &t, 1);
		}
		cr_assert_eq(e.tag, 0x5000u + i);
		cr_assert_eq(dst.bytes[16 * i], i & 0xff);
		cr_assert_eq(dst.bytes[16 * i + 15], i & 0xff);
	}
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
Test(data, endpoints_past_the_device_cq_limit_share_one_cq, .timeout = 300)
{
	DataFixture f;
	f.open();
	connections_on_one_cq(f, 64, 0);
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
Test(data, a_verbs_cq_shrinks_as_endpoints_close_and_loses_nothing, .timeout = 300)
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

/* Endpoints whose rings hold their whole depth from fi_enable (FI_TAGGED's
 * framing) at 8,000 requests each way reserve 16,001 entries each: two
 * fill Soft-RoCE's largest verbs CQ, so the CQ chains a verbs CQ for every
 * second endpoint, on one completion channel, and reads take them in turn. */
Test(data, endpoints_reserving_past_the_device_cq_limit_chain_verbs_cqs, .timeout = 300)
{
	DataFixture f;
	f.hint_caps = FI_TAGGED;
	f.open();
	connections_on_one_cq(f, 4, 8000);
	f.close_data();
}

namespace {

/* A peer that speaks raw verbs (librdmacm and an RC queue pair of its own)
 * to a framed endpoint, as a foreign or hostile host would. */
struct RawVerbsPeer {
	rdma_event_channel *channel = nullptr;
	rdma_cm_id *id = nullptr;
	ibv_cq *cq = nullptr;
	ibv_mr *mr = nullptr;
	uint8_t buf[256] = {};

	rdma_cm_event_type next_event(int timeout_ms = 10000)
	{
		pollfd pfd{channel->fd, POLLIN, 0};
		cr_assert_eq(poll(&pfd, 1, timeout_ms), 1, "raw peer: no CM event in %d ms", timeout_ms);
		rdma_cm_event *e = nullptr;
		cr_assert_eq(rdma_get_cm_event(channel, &e), 0);
		const rdma_cm_event_type type = e->event;
		rdma_ack_cm_event(e);
		return type;
	}
	/* Resolves, makes its queue pair and sends the connection request
	 * (nd's private data framing: a length byte, 0). */
	void connect(const sockaddr_storage &to)
	{
		channel = rdma_create_event_channel();
		cr_assert_not_null(channel);
		cr_assert_eq(rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP), 0);
		sockaddr_storage dest = to;
		cr_assert_eq(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr *>(&dest), 2000), 0);
		cr_assert_eq(next_event(), RDMA_CM_EVENT_ADDR_RESOLVED);
		cr_assert_eq(rdma_resolve_route(id, 2000), 0);
		cr_assert_eq(next_event(), RDMA_CM_EVENT_ROUTE_RESOLVED);
		cq = ibv_create_cq(id->verbs, 8, nullptr, nullptr, 0);
		cr_assert_not_null(cq);
		ibv_qp_init_attr attr{};
		attr.send_cq = attr.recv_cq = cq;
		attr.qp_type = IBV_QPT_RC;
		attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
		attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
		cr_assert_eq(rdma_create_qp(id, nullptr, &attr), 0, "rdma_create_qp: %s", strerror(errno));
		mr = ibv_reg_mr(id->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
		cr_assert_not_null(mr);
		static const uint8_t no_data[1] = {0};
		rdma_conn_param param{};
		param.private_data = no_data;
		param.private_data_len = sizeof(no_data);
		param.responder_resources = param.initiator_depth = 1;
		param.retry_count = 7;
		param.rnr_retry_count = 7;
		cr_assert_eq(rdma_connect(id, &param), 0);
	}
	/* `len` bytes of buf as one message; waits for its completion. */
	void send(size_t len)
	{
		ibv_sge sge{reinterpret_cast<uintptr_t>(buf), static_cast<uint32_t>(len), mr->lkey};
		ibv_send_wr wr{}, *bad = nullptr;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_SIGNALED;
		cr_assert_eq(ibv_post_send(id->qp, &wr, &bad), 0);
		ibv_wc wc{};
		const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
		while (ibv_poll_cq(cq, 1, &wc) == 0)
			cr_assert(std::chrono::steady_clock::now() < end, "raw peer: its send never completed");
		cr_assert_eq(wc.status, IBV_WC_SUCCESS, "raw peer: send %s", ibv_wc_status_str(wc.status));
	}
	~RawVerbsPeer()
	{
		if (id && id->qp)
			rdma_disconnect(id);
		if (mr)
			ibv_dereg_mr(mr);
		if (id && id->qp)
			rdma_destroy_qp(id);
		if (cq)
			ibv_destroy_cq(cq);
		if (id)
			rdma_destroy_id(id);
		if (channel)
			rdma_destroy_event_channel(channel);
	}
};

} // namespace

/* Bytes from the wire that are not nd's frame: a foreign magic, fewer bytes
 * than a header, a kind nd never sends. Each ends the connection
 * (FI_SHUTDOWN once, the posted receive flushed), delivers nothing into the
 * application's buffer and leaves the endpoint closable; the ASan build
 * checks that nothing was read or written outside nd's buffers. */
Test(tagged, a_peer_that_lies_in_its_frames_loses_the_connection)
{
	DataFixture f;
	f.hint_caps = FI_TAGGED;
	f.open();
	struct Lie {
		const char *what;
		size_t len;
		void (*write)(uint8_t *buf);
	};
	static const Lie lies[] = {
		{"a foreign magic", 64, [](uint8_t *b) { std::memset(b, 0x5a, 64); }},
		{"three bytes", 3, [](uint8_t *b) { b[0] = 0x44; b[1] = 0x4e; b[2] = 2; }},
		{"an unknown kind", 48, [](uint8_t *b) {
			 std::memset(b, 0, 48);
			 b[0] = 0x44; /* "ND", little-endian */
			 b[1] = 0x4e;
			 b[2] = 9;
		 }},
	};
	for (const Lie &lie : lies) {
		RawVerbsPeer peer;
		peer.connect(f.listen_addr);
		Event req = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
		DataOptions o;
		o.cq_format = FI_CQ_FORMAT_TAGGED;
		Side s;
		s.ep = f.make_ep(req.info, o, &s.cq);
		fi_freeinfo(req.info);
		cr_assert_eq(fi_enable(s.ep), 0);
		cr_assert_eq(fi_accept(s.ep, nullptr, 0), 0);
		cr_assert_eq(peer.next_event(), RDMA_CM_EVENT_ESTABLISHED, "%s", lie.what);
		expect_event(f.eq, FI_CONNECTED, &s.ep->fid);

		Buffer &dst = f.buffer(256, 0xee);
		int ctx;
		cr_assert_eq(fi_trecv(s.ep, dst.data(), 256, dst.desc(), 0, 0, ~0ull, &ctx), 0);
		lie.write(peer.buf);
		peer.send(lie.len);

		/* The message is looked at by the CQ read that finds it (framed
		 * endpoints match in software); the end of the connection comes
		 * through the EQ. An application reads both, as here. */
		bool shutdown_seen = false, receive_ended = false;
		const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
		while (!shutdown_seen || !receive_ended) {
			cr_assert(std::chrono::steady_clock::now() < end, "%s: FI_SHUTDOWN %s, the receive %s",
				  lie.what, shutdown_seen ? "seen" : "missing", receive_ended ? "ended" : "still waits");
			fi_cq_tagged_entry entry{};
			const ssize_t rc = fi_cq_read(s.cq, &entry, 1);
			cr_assert(rc == -FI_EAGAIN || rc == -FI_EAVAIL, "%s: the receive completed (%zd)", lie.what, rc);
			if (rc == -FI_EAVAIL) {
				cr_assert_not(receive_ended, "%s: two error entries", lie.what);
				fi_cq_err_entry err{};
				cr_assert_eq(fi_cq_readerr(s.cq, &err, 0), 1);
				cr_assert_eq(err.op_context, &ctx);
				cr_assert_eq(err.err, FI_ECANCELED, "%s: %s", lie.what, fi_strerror(err.err));
				receive_ended = true;
			}
			Event ev = next_event(f.eq, 0);
			if (ev.rc == -FI_EAGAIN)
				continue;
			cr_assert_geq(ev.rc, 0, "%s: an EQ error entry (%s)", lie.what, fi_strerror(ev.err.err));
			cr_assert_eq(ev.type, FI_SHUTDOWN, "%s: event %u", lie.what, ev.type);
			cr_assert_eq(ev.fid, &s.ep->fid);
			cr_assert_not(shutdown_seen, "%s: FI_SHUTDOWN twice", lie.what);
			shutdown_seen = true;
		}
		cr_assert(std::all_of(dst.bytes.begin(), dst.bytes.end(), [](uint8_t b) { return b == 0xee; }),
			  "%s: bytes reached the application's buffer", lie.what);
		cr_assert_lt(fi_tsend(s.ep, dst.data(), 8, dst.desc(), 0, 1, nullptr), 0, "%s: still sends", lie.what);
		close_side(s);
	}
	f.close_data();
}
