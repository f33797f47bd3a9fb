/*
 * guest_retry.cpp: what a sender sees when its peer does not take a message
 * (FI_ND_RNR_RETRY, FI_ND_MIN_RNR_TIMER) on a real device. Every wait is
 * bounded, and the times measured are printed for the record.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "data_fixture.h"

#include <cstdlib>
#include <cstring>

#include <chrono>

using namespace nd::test;

TestSuite(retry, .timeout = 120);

namespace {

long long ms_since(std::chrono::steady_clock::time_point start)
{
	return std::chrono::duration_cast<std::chrono::milliseconds>(
		       std::chrono::steady_clock::now() - start)
		.count();
}

/* A send to a peer that posted no receive; returns the error completion
 * and how long it took to arrive. */
fi_cq_err_entry send_into_the_void(DataFixture &f, Side c, int *context, long long *took_ms)
{
	Buffer &src = f.buffer(64, 0x5a);
	auto start = std::chrono::steady_clock::now();
	cr_assert_eq(fi_send(c.ep, src.data(), 64, src.desc(), 0, context), 0);
	fi_cq_err_entry err = wait_cq_error(c.cq, 20000);
	*took_ms = ms_since(start);
	return err;
}

void check_enorx(DataFixture &f, Side c, const fi_cq_err_entry &err, int *context)
{
	cr_assert_eq(err.op_context, context);
	cr_assert_eq(err.err, FI_ENORX, "err %d (%s)", err.err, fi_strerror(err.err));
	const char *text = fi_cq_strerror(c.cq, err.prov_errno, nullptr, nullptr, 0);
	cr_assert(text && std::strstr(text, "RNR"), "prov_errno %d: %s", err.prov_errno,
		  text ? text : "(null)");
	/* The queue pair is in error now: the connection carries nothing more. */
	Buffer &more = f.buffer(8);
	ssize_t rc = fi_send(c.ep, more.data(), 8, more.desc(), 0, nullptr);
	cr_assert_eq(rc, -FI_ECONNABORTED, "later sends report the broken link (rc %zd)", rc);
}

/* Retries exhausted end the connection (fi_nd(7)): FI_SHUTDOWN once for
 * the sender, whose queue pair is in error, and once for the receiver,
 * which hears the sender's disconnect; nothing more. */
void check_both_shut_down(DataFixture &f, Side c, Side s)
{
	expect_shutdown_of_both(f.eq, &c.ep->fid, &s.ep->fid);
	expect_quiet(f.eq, 500);
}

/* A send with no receive posted fails with FI_ENORX, checked: after how
 * long. */
long long send_fails_with_enorx(DataFixture &f, Side c, const char *settings)
{
	int ctx;
	long long took;
	fi_cq_err_entry err = send_into_the_void(f, c, &ctx, &took);
	cr_log_info("%s: FI_ENORX after %lld ms\n", settings, took);
	check_enorx(f, c, err, &ctx);
	return took;
}

/* Both endpoints, then the fixture: every close 0. */
void close_connection(DataFixture &f, Side c, Side s)
{
	cr_assert_eq(fi_close(&c.ep->fid), 0);
	cr_assert_eq(fi_close(&s.ep->fid), 0);
	f.close_data();
}

/* A send posted `late_ms` before its receive: the client's CQ is read empty
 * all that time (as nd's stall watch needs to look), then the message
 * arrives whole and both sides complete. */
void send_completes_for_a_late_receive(DataFixture &f, Side c, Side s, int late_ms, const char *what)
{
	Buffer &src = f.buffer(64);
	Buffer &dst = f.buffer(64, 0xee);
	auto want = pattern(64, 7);
	src.fill(want);
	int send_ctx, recv_ctx;
	cr_assert_eq(fi_send(c.ep, src.data(), 64, src.desc(), 0, &send_ctx), 0);
	expect_cq_empty(c.cq, late_ms);
	cr_assert_eq(fi_recv(s.ep, dst.data(), 64, dst.desc(), 0, &recv_ctx), 0);
	auto start = std::chrono::steady_clock::now();
	fi_cq_data_entry r = wait_cq(s.cq);
	fi_cq_data_entry done = wait_cq(c.cq);
	cr_log_info("%s: send completed %lld ms after the receive, posted %d ms late\n", what, ms_since(start),
		    late_ms);
	cr_assert_eq(r.op_context, &recv_ctx);
	cr_assert_eq(r.len, 64u);
	cr_assert(dst.holds(want));
	cr_assert_eq(done.op_context, &send_ctx);
}

} // namespace

Test(retry, rnr_retry_0_fails_a_send_without_a_receive_at_once_with_enorx)
{
	setenv("FI_ND_RNR_RETRY", "0", 1);
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const long long took = send_fails_with_enorx(f, c, "FI_ND_RNR_RETRY=0");
	cr_assert_lt(took, 10000, "no retries: the first receiver-not-ready answer ends it");
	check_both_shut_down(f, c, s);
	close_connection(f, c, s);
}

/* One retry, and the responder asks for the longest RNR delay (IB encoding
 * 0: 655.36 ms): the error cannot come before that delay has passed, so the
 * count and the timer both reach the queue pairs. */
Test(retry, rnr_retry_1_waits_one_rnr_delay_then_fails_with_enorx)
{
	setenv("FI_ND_RNR_RETRY", "1", 1);
	setenv("FI_ND_MIN_RNR_TIMER", "0", 1);
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	const long long took = send_fails_with_enorx(f, c, "FI_ND_RNR_RETRY=1, FI_ND_MIN_RNR_TIMER=0");
	cr_assert_geq(took, 600, "one retry after the 655 ms RNR delay, took %lld ms", took);
	cr_assert_lt(took, 10000);
	close_connection(f, c, s);
}

/* The default (7: retry for ever) waits for a receiver that is late. */
Test(retry, by_default_a_send_waits_for_a_receive_posted_late)
{
	unsetenv("FI_ND_RNR_RETRY");
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	send_completes_for_a_late_receive(f, c, s, 1500, "default RNR retry");
	close_connection(f, c, s);
}

/* Out-of-range values are logged and replaced by the defaults: the
 * connection works as with none set. */
Test(retry, out_of_range_values_keep_the_defaults)
{
	setenv("FI_ND_RNR_RETRY", "8", 1);
	setenv("FI_ND_RETRY_COUNT", "-1", 1);
	setenv("FI_ND_ACK_TIMEOUT", "32", 1);
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	Buffer &src = f.buffer(16);
	Buffer &dst = f.buffer(16);
	int send_ctx;
	cr_assert_eq(fi_send(c.ep, src.data(), 16, src.desc(), 0, &send_ctx), 0);
	expect_cq_empty(c.cq, 300);
	cr_assert_eq(fi_recv(s.ep, dst.data(), 16, dst.desc(), 0, nullptr), 0);
	wait_cq(s.cq);
	cr_assert_eq(wait_cq(c.cq).op_context, &send_ctx, "RNR retries stayed infinite");
	close_connection(f, c, s);
}

/* A receiver late past FI_ND_PEER_TIMEOUT is still a live peer: its device
 * answers each retry with a not-ready NAK, which the sender's device
 * counts (hw_counters/rcvd_rnr_err), so nd's watch (StallWatch) waits 30
 * timeouts instead of one, and the send completes once the receive is
 * posted. The sender's CQ is read empty throughout, as the watch needs to
 * look. */
Test(retry, a_receiver_late_past_the_peer_timeout_is_waited_for_while_it_answers)
{
	unsetenv("FI_ND_RNR_RETRY");
	unsetenv("FI_ND_RETRY_COUNT");
	setenv("FI_ND_PEER_TIMEOUT", "2", 1);
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	/* Twice the timeout and the watch's look, plus its 2 s of quiet. */
	send_completes_for_a_late_receive(f, c, s, 6000, "FI_ND_PEER_TIMEOUT=2");
	close_connection(f, c, s);
}

/* A peer whose queue pair is gone answers nothing: Soft-RoCE drops packets
 * for a queue pair number it does not know, as a dead host would. The
 * client does not read its EQ, so it never learns of the disconnect and its
 * queue pair keeps sending: only the transport retry count ends that, with
 * FI_ETIMEDOUT after retry_count + 1 ACK timeouts. Unset, the ACK timeout
 * is Soft-RoCE's default 14 (kSoftRoceAckTimeout): 4.096 us * 2^14 = 67 ms. */
Test(retry, a_vanished_peer_is_detected_after_the_transport_retries)
{
	unsetenv("FI_ND_ACK_TIMEOUT");
	/* Soft-RoCE's default, 7, retransmits for ever (nd_params.h). */
	setenv("FI_ND_RETRY_COUNT", "6", 1);
	DataFixture f;
	f.open();
	auto [c, s] = f.connect_data();
	cr_assert_eq(fi_close(&s.ep->fid), 0);
	Buffer &src = f.buffer(64);
	int ctx;
	auto start = std::chrono::steady_clock::now();
	cr_assert_eq(fi_send(c.ep, src.data(), 64, src.desc(), 0, &ctx), 0);
	fi_cq_err_entry err = wait_cq_error(c.cq, 60000);
	const long long took = ms_since(start);
	cr_log_info("FI_ND_RETRY_COUNT=6, default FI_ND_ACK_TIMEOUT (Soft-RoCE: 14): %s after %lld ms\n",
		    fi_strerror(err.err), took);
	cr_assert_eq(err.op_context, &ctx);
	cr_assert_eq(err.err, FI_ETIMEDOUT, "err %d (%s)", err.err, fi_strerror(err.err));
	/* 7 timeouts of 67 ms (measured: 470-480 ms; retry count 0: 60 ms). */
	cr_assert_geq(took, 300, "the sender retried before giving up, took %lld ms", took);
	cr_assert_lt(took, 5000, "rdma_cm's 2.1 s timeout would take 16 s: took %lld ms", took);
	cr_assert_eq(fi_close(&c.ep->fid), 0);
	f.close_data();
}

/* The same vanished peer with the transport's retries left alone:
 * Soft-RoCE's retry count 7 retransmits for ever, so nd's own watch
 * (StallWatch) ends the connection after FI_ND_PEER_TIMEOUT: the request
 * that stood still reports FI_ETIMEDOUT from CQ reads alone (no EQ read
 * needed), the one behind it FI_ECANCELED, and the EQ then says
 * FI_SHUTDOWN once. On a transport that gives up by itself (retry count
 * below 7) nd keeps out of it. The client sleeps in fi_cq_sread, which must
 * look for stalls as polling does. The bound is set to 4 s here so that
 * the check does not wait out the default 20 s (unit_params checks that
 * default; the watch reads the bound from the domain either way). */
Test(retry, a_vanished_peer_is_found_within_fi_nd_peer_timeout)
{
	unsetenv("FI_ND_ACK_TIMEOUT");
	unsetenv("FI_ND_RETRY_COUNT");
	setenv("FI_ND_PEER_TIMEOUT", "4", 1);
	DataFixture f;
	f.open();
	DataOptions o;
	o.cq_wait = FI_WAIT_FD;
	auto [c, s] = f.connect_data(o);
	cr_assert_eq(fi_close(&s.ep->fid), 0);
	Buffer &src = f.buffer(64);
	int first, second;
	const auto start = std::chrono::steady_clock::now();
	cr_assert_eq(fi_send(c.ep, src.data(), 64, src.desc(), 0, &first), 0);
	cr_assert_eq(fi_send(c.ep, src.data(), 64, src.desc(), 0, &second), 0);
	ssize_t rc;
	fi_cq_data_entry entry{};
	while ((rc = fi_cq_sread(c.cq, &entry, 1, nullptr, 60000)) == -FI_EAGAIN)
		cr_assert_lt(ms_since(start), 60000, "fi_cq_sread: no error in 60 s");
	cr_assert_eq(rc, -FI_EAVAIL, "fi_cq_sread: %zd", rc);
	fi_cq_err_entry err{};
	cr_assert_eq(fi_cq_readerr(c.cq, &err, 0), 1);
	const long long took = ms_since(start);
	cr_log_info("FI_ND_PEER_TIMEOUT=4: %s after %lld ms\n", fi_strerror(err.err), took);
	cr_assert_eq(err.op_context, &first);
	cr_assert_eq(err.err, FI_ETIMEDOUT, "err %d (%s)", err.err, fi_strerror(err.err));
	/* The bound, 4 s, and the watch's once-a-second look. */
	cr_assert_geq(took, 3000, "a late receiver would not have been waited for: %lld ms", took);
	cr_assert_lt(took, 7000, "took %lld ms", took);
	err = wait_cq_error(c.cq, 5000);
	cr_assert_eq(err.op_context, &second);
	cr_assert_eq(err.err, FI_ECANCELED, "err %d (%s)", err.err, fi_strerror(err.err));
	expect_event(f.eq, FI_SHUTDOWN, &c.ep->fid);
	Event more = next_event(f.eq, 500);
	cr_assert_eq(more.rc, -FI_EAGAIN, "one FI_SHUTDOWN, then nothing");
	cr_assert_lt(fi_send(c.ep, src.data(), 64, src.desc(), 0, nullptr), 0);
	cr_assert_eq(fi_close(&c.ep->fid), 0);
	f.close_data();
}

/* ND Connect: after CONNECTION_REFUSED "the connection attempt may be
 * retried", and "if the connection fails, the queue pair is not affected".
 * One endpoint, bound to an address of its own, is refused twice (no
 * listener, then the listener's fi_reject) and connects at the third
 * attempt: the receive posted before the first attempt takes the first
 * message, and the peer sees the address the endpoint was bound to. */
Test(retry, a_refused_connector_connects_again_and_keeps_its_receives)
{
	DataFixture f;
	f.open();
	/* Nobody listens here any more. */
	sockaddr_storage nobody = f.listen_addr;
	cr_assert_eq(fi_close(&f.pep->fid), 0);
	f.pep = nullptr;

	DataOptions o;
	Side c, s;
	c.ep = f.make_ep(f.info.get(), o, &c.cq);
	sockaddr_storage mine{};
	std::memcpy(&mine, f.info->src_addr, f.info->src_addrlen);
	reinterpret_cast<sockaddr_in &>(mine).sin_port = 0;
	cr_assert_eq(fi_setname(&c.ep->fid, &mine, f.info->src_addrlen), 0);
	size_t len = sizeof(mine);
	cr_assert_eq(fi_getname(&c.ep->fid, &mine, &len), 0);
	const uint16_t my_port = CmFixture::port_of(mine);
	cr_assert_neq(my_port, 0);
	cr_assert_eq(fi_enable(c.ep), 0);
	Buffer &first = f.buffer(64, 0xee);
	int recv_ctx;
	cr_assert_eq(fi_recv(c.ep, first.data(), 64, first.desc(), 0, &recv_ctx), 0);

	cr_assert_eq(fi_connect(c.ep, &nobody, nullptr, 0), 0);
	Event refused = expect_error(f.eq, &c.ep->fid);
	cr_assert_eq(refused.err.err, FI_ECONNREFUSED, "got %s", fi_strerror(refused.err.err));
	cr_assert_gt(refused.err.prov_errno, 0, "rdma_cm's reject reason");
	const char *why_refused = fi_eq_strerror(f.eq, refused.err.prov_errno, nullptr, nullptr, 0);
	cr_assert(std::strstr(why_refused, "listen"), "fi_eq_strerror: %s", why_refused);
	expect_cq_empty(c.cq, 200); /* the receive was not flushed */
	len = sizeof(mine);
	cr_assert_eq(fi_getname(&c.ep->fid, &mine, &len), 0);
	cr_assert_eq(CmFixture::port_of(mine), my_port, "the endpoint keeps its address");

	f.pep = f.listen(f.eq);
	auto why = pattern(20, 3);
	cr_assert_eq(fi_connect(c.ep, &f.listen_addr, nullptr, 0), 0);
	Event req = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
	cr_assert_eq(fi_reject(f.pep, req.info->handle, why.data(), why.size()), 0);
	fi_freeinfo(req.info);
	Event rejected = expect_error(f.eq, &c.ep->fid);
	cr_assert_eq(rejected.err.err, FI_ECONNREFUSED);
	cr_assert(rejected.err_data == why, "reject data: %zu bytes", rejected.err_data.size());
	const char *text = fi_eq_strerror(f.eq, rejected.err.prov_errno, nullptr, nullptr, 0);
	cr_assert(std::strstr(text, "application"), "fi_eq_strerror: %s", text);
	expect_cq_empty(c.cq, 200);

	cr_assert_eq(fi_connect(c.ep, &f.listen_addr, nullptr, 0), 0);
	req = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
	s.ep = f.make_ep(req.info, o, &s.cq);
	fi_freeinfo(req.info);
	cr_assert_eq(fi_enable(s.ep), 0);
	cr_assert_eq(fi_accept(s.ep, nullptr, 0), 0);
	for (int i = 0; i < 2; i++)
		expect_event(f.eq, FI_CONNECTED, nullptr);
	cr_assert_eq(fi_connect(c.ep, &f.listen_addr, nullptr, 0), -FI_EISCONN);
	sockaddr_storage peer{};
	len = sizeof(peer);
	cr_assert_eq(fi_getpeer(s.ep, &peer, &len), 0);
	cr_assert_eq(CmFixture::port_of(peer), my_port, "connected from the bound port");

	Buffer &src = f.buffer(64);
	auto want = pattern(64, 9);
	src.fill(want);
	cr_assert_eq(fi_send(s.ep, src.data(), 64, src.desc(), 0, nullptr), 0);
	fi_cq_data_entry r = wait_cq(c.cq);
	cr_assert_eq(r.op_context, &recv_ctx, "the receive posted before the first attempt");
	cr_assert_eq(r.len, 64u);
	cr_assert(first.holds(want));
	wait_cq(s.cq);
	close_connection(f, c, s);
}
