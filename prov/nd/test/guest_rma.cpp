/*
 * guest_rma.cpp: RMA on a real device (suite rma): writes and reads of every
 * size from either side, the order of a write or send behind a read when
 * the application asks for it, the read limit negotiated at connection and
 * the budget unsignaled reads give back, and remote access errors, which
 * fail the request and break the connection. The bytes at both ends are
 * checked, since a completion alone does not show where a write landed.
 */
#include <criterion/criterion.h>

#include "data_fixture.h"

#include <algorithm>
#include <cstring>

#include <chrono>

using namespace nd::test;

TestSuite(rma, .timeout = 120);

Test(rma, rma_write_and_read_move_the_bytes)
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
Test(rma, writes_and_sends_after_a_read_wait_for_it_when_asked)
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

/* Reads the application asks no completion for still give their budget
 * back: the provider signals enough of them that a connection with a small
 * read limit never stalls, and the bytes are right. */
Test(rma, unsignaled_reads_return_their_budget)
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
	/* The last reads may still hold the whole budget: -FI_EAGAIN until
	 * one completes, as for the reads above. */
	ssize_t rc;
	while ((rc = fi_readmsg(c.ep, &m, FI_COMPLETION)) == -FI_EAGAIN) {
		cr_assert(std::chrono::steady_clock::now() < deadline, "the last read stalled");
		fi_cq_data_entry none;
		cr_assert_eq(fi_cq_read(c.cq, &none, 1), -FI_EAGAIN, "unsignaled reads report nothing");
	}
	cr_assert_eq(rc, 0);
	fi_cq_data_entry e = wait_cq(c.cq);
	cr_assert_eq(e.op_context, &ctx);
	expect_cq_empty(c.cq);
	cr_assert_eq(std::memcmp(local.data(), remote.data(), 8 * n), 0, "every read brought its bytes");
	close_side(c);
	close_side(s);
	f.close_data();
}

Test(rma, reads_stay_within_the_negotiated_limit)
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

Test(rma, the_accepting_side_reads_and_writes_too)
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

Test(rma, remote_access_errors_break_the_connection_visibly)
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

Test(rma, bad_keys_and_bounds_fail_as_errors)
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
