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

namespace {

/* One side of requests_behind_reads_complete_once_each_with_the_bytes_there:
 * reads of the peer's source into its landing slots, each followed by a
 * small write into the peer's target, kWindow requests posted and not yet
 * read back, of them at most kSlots reads (what the two sides register
 * stays within a user's 8 MiB of locked memory). */
struct ReadsAndWrites {
	static constexpr size_t kReadLen = 64 * 1024;
	/* Four times the ring: a ring that retired slots early let requests
	 * into slots still in flight ("completed twice" within a few
	 * hundred). */
	static constexpr int kWindow = 64;
	static constexpr int kSlots = 16;
	static constexpr int kRequests = 400;

	Side side;
	Buffer &source, &landing, &small, &target; /* source, target: the peer reads and writes them */
	ReadsAndWrites *peer = nullptr;
	std::vector<int> done = std::vector<int>(kRequests, 0);
	std::vector<char> contexts = std::vector<char>(kRequests);
	int posted = 0, completed = 0, reads_completed = 0;

	ReadsAndWrites(DataFixture &f, Side s, uint8_t seed)
		: side(s), source(f.buffer(kReadLen, 0, FI_REMOTE_READ)), landing(f.buffer(kReadLen * kSlots)),
		  small(f.buffer(8, 0x5c)), target(f.buffer(8 * kRequests, 0, FI_REMOTE_WRITE))
	{
		for (size_t i = 0; i < kReadLen; i++)
			source.data()[i] = static_cast<uint8_t>(i * 31 + seed);
	}
	bool finished() const { return completed == kRequests; }
	/* Posts one request if the window has room, else reads one
	 * completion, checking it. */
	void step()
	{
		const bool is_read = posted % 2 == 0;
		/* Reads complete in order among themselves: read r's slot is
		 * free once read r - kSlots has completed. */
		if (posted < kRequests && posted - completed < kWindow && (!is_read || posted / 2 - reads_completed < kSlots)) {
			uint8_t *slot = landing.data() + kReadLen * static_cast<size_t>((posted / 2) % kSlots);
			if (is_read)
				std::memset(slot, 0, kReadLen);
			const ssize_t rc =
				is_read ? fi_read(side.ep, slot, kReadLen, landing.desc(), 0, peer->source.addr(),
						  peer->source.key(), &contexts[posted])
					: fi_write(side.ep, small.data(), 8, small.desc(), 0, peer->target.addr(8 * posted),
						   peer->target.key(), &contexts[posted]);
			cr_assert(rc == 0 || rc == -FI_EAGAIN, "request %d: %zd (%s)", posted, rc,
				  fi_strerror(static_cast<int>(-rc)));
			if (rc == 0) {
				posted++;
				return;
			}
		}
		fi_cq_data_entry e{};
		const ssize_t rc = fi_cq_read(side.cq, &e, 1);
		if (rc == -FI_EAGAIN)
			return;
		if (rc == -FI_EAVAIL) {
			fi_cq_err_entry err{};
			fi_cq_readerr(side.cq, &err, 0);
			cr_assert_fail("error completion after %d: %s", completed, fi_strerror(err.err));
		}
		cr_assert_eq(rc, 1);
		const char *ctx = static_cast<const char *>(e.op_context);
		cr_assert(ctx >= contexts.data() && ctx < contexts.data() + kRequests, "a context never posted: %p",
			  e.op_context);
		const int i = static_cast<int>(ctx - contexts.data());
		cr_assert_lt(i, posted, "request %d completed before it was posted", i);
		cr_assert_eq(++done[i], 1, "request %d (a %s) completed twice", i, i % 2 == 0 ? "read" : "write");
		cr_assert_eq(e.flags, i % 2 == 0 ? (FI_RMA | FI_READ) : (FI_RMA | FI_WRITE));
		if (i % 2 == 0) {
			cr_assert_eq(i / 2, reads_completed, "read %d completed where read %d was next", i / 2,
				     reads_completed);
			cr_assert(landing.holds(peer->source.bytes, kReadLen * static_cast<size_t>((i / 2) % kSlots)),
				  "read %d completed without its bytes", i);
			reads_completed++;
		}
		completed++;
	}
};

} // namespace

/* Reads with writes posted right behind them, many in flight, from both
 * sides at once, no order asked for: every request completes once, with
 * its own context, and each read with the bytes there. soft-iWARP
 * completes a write once transmitted, before the read ahead of it has its
 * response. Retired in posting order, the write's completion freed the
 * read's ring slot, and the read's late completion then freed requests
 * still in flight, whose slots were taken again and reported twice:
 * MPICH's reads of a huge message crashed in its completion handler
 * (docs/mpi.md). Reads of 64 KiB, long enough on the wire for a write
 * behind to be sent first; both sides read, as MPICH's ranks do, so that a
 * side waiting for its reads while the peer waits for its own would
 * show. */
Test(rma, requests_behind_reads_complete_once_each_with_the_bytes_there)
{
	DataFixture f;
	f.open();
	DataOptions o;
	o.tx_size = 16;
	o.cq_size = 256;
	auto [c, s] = f.connect_data(o);
	ReadsAndWrites client(f, c, 7), server(f, s, 11);
	client.peer = &server;
	server.peer = &client;
	const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
	while (!client.finished() || !server.finished()) {
		cr_assert(std::chrono::steady_clock::now() < deadline, "completed %d and %d of %d", client.completed,
			  server.completed, ReadsAndWrites::kRequests);
		client.step();
		server.step();
	}
	expect_cq_empty(c.cq);
	expect_cq_empty(s.cq);
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
