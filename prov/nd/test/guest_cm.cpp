/*
 * guest_cm.cpp: connection management on a real RDMA device, asserting the
 * events seen, the bytes of private data that arrived, the codes returned
 * and the read limits the queue pairs were given.
 */
#include "cm_fixture.h"
#include "nd_fds.h"

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <poll.h>
#include <thread>

using namespace nd::test;

namespace {

uint32_t get_u32(fid_ep *ep, int option)
{
	uint32_t value = 0;
	size_t len = sizeof(value);
	cr_assert_eq(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, option, &value, &len), 0);
	return value;
}

void set_u32(fid_ep *ep, int option, uint32_t value)
{
	cr_assert_eq(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, option, &value, sizeof(value)), 0);
}

void set_int(fid_ep *ep, int option, int value)
{
	cr_assert_eq(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, option, &value, sizeof(value)), 0);
}

sockaddr_in ipv4_addr(const char *ip, uint16_t port)
{
	sockaddr_in sin{};
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	inet_pton(AF_INET, ip, &sin.sin_addr);
	return sin;
}

} // namespace

Test(cm, connect_accept_shutdown)
{
	CmFixture f;
	f.open();
	auto [c, s] = f.connect_pair(pattern(10, 1), pattern(20, 2));
	sockaddr_storage peer{};
	size_t len = sizeof(peer);
	cr_assert_eq(fi_getpeer(c, &peer, &len), 0);
	cr_assert_eq(CmFixture::port_of(peer), CmFixture::port_of(f.listen_addr));
	cr_assert_eq(fi_shutdown(c, 0), 0);
	/* Each side learns exactly once. */
	expect_shutdown_of_both(f.eq, &c->fid, &s->fid);
	expect_quiet(f.eq, 300);
	cr_assert_eq(fi_shutdown(c, 0), -FI_ENOTCONN);
	cr_assert_eq(fi_connect(c, &f.listen_addr, nullptr, 0), -FI_EOPBADSTATE,
		     "a disconnected endpoint cannot be reused");
	f.close_pair(c, s);
	f.close();
}

Test(cm, connect_data_of_every_length_arrives_exactly, .timeout = 300)
{
	CmFixture f;
	f.open();
	size_t limit = 0, len = sizeof(limit);
	fid_ep *probe = f.client();
	cr_assert_eq(fi_getopt(&probe->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &limit, &len), 0);
	cr_assert_eq(limit, f.connect_limit());
	fi_close(&probe->fid);
	for (size_t n = 0; n <= limit; n++) {
		auto [c, s] = f.connect_pair(pattern(n, (uint8_t)n), pattern(n, (uint8_t)(n + 100)));
		f.close_pair(c, s);
	}
	f.close();
}

Test(cm, accept_data_of_every_length_arrives_exactly, .timeout = 300)
{
	CmFixture f;
	f.open();
	size_t limit = 0, len = sizeof(limit);
	cr_assert_eq(fi_getopt(&f.pep->fid, FI_OPT_ENDPOINT, FI_OPT_ND_ACCEPT_DATA_SIZE, &limit, &len), 0);
	cr_assert_eq(limit, f.accept_limit());
	for (size_t n = f.connect_limit() + 1; n <= limit; n++) {
		auto [c, s] = f.connect_pair({}, pattern(n, (uint8_t)n));
		f.close_pair(c, s);
	}
	f.close();
}

Test(cm, reject_data_of_every_length_arrives_exactly, .timeout = 300)
{
	CmFixture f;
	f.open();
	size_t limit = 0, len = sizeof(limit);
	cr_assert_eq(fi_getopt(&f.pep->fid, FI_OPT_ENDPOINT, FI_OPT_ND_REJECT_DATA_SIZE, &limit, &len), 0);
	cr_assert_eq(limit, f.reject_limit());
	for (size_t n = 0; n <= limit; n++) {
		fid_ep *c = f.client();
		CmFixture::enable(c);
		cr_assert_eq(fi_connect(c, &f.listen_addr, nullptr, 0), 0);
		Event req = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
		std::vector<uint8_t> data = pattern(n, (uint8_t)(n * 3));
		cr_assert_eq(fi_reject(f.pep, req.info->handle, data.data(), data.size()), 0);
		fi_freeinfo(req.info);
		Event err = expect_error(f.eq, &c->fid);
		cr_assert_eq(err.err.err, FI_ECONNREFUSED);
		cr_assert(err.err_data == data, "reject data: %zu bytes, sent %zu", err.err_data.size(), n);
		if (n == 0 && f.iwarp()) {
			/* iWARP: the refused attempt left the queue pair in error. */
			cr_assert_eq(fi_connect(c, &f.listen_addr, nullptr, 0), -FI_EOPBADSTATE);
		} else if (n == 0) {
			/* ND: a refused connection attempt may be retried. */
			cr_assert_eq(fi_connect(c, &f.listen_addr, nullptr, 0), 0);
			Event again = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
			cr_assert_eq(fi_reject(f.pep, again.info->handle, nullptr, 0), 0);
			fi_freeinfo(again.info);
			cr_assert_eq(expect_error(f.eq, &c->fid).err.err, FI_ECONNREFUSED);
		}
		cr_assert_eq(fi_close(&c->fid), 0);
	}
	f.close();
}

Test(cm, one_byte_over_each_limit_fails_at_the_call_and_sends_nothing)
{
	CmFixture f;
	f.open();
	std::vector<uint8_t> big(256, 7);
	fid_ep *c = f.client();
	CmFixture::enable(c);
	cr_assert_eq(fi_connect(c, &f.listen_addr, big.data(), f.connect_limit() + 1), -FI_EINVAL);
	expect_quiet(f.eq, 500);
	cr_assert_eq(fi_connect(c, &f.listen_addr, big.data(), f.connect_limit()), 0, "the endpoint is still usable");
	Event req = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
	cr_assert_eq(req.data.size(), f.connect_limit());
	cr_assert_eq(fi_reject(f.pep, req.info->handle, big.data(), f.reject_limit() + 1), -FI_EINVAL);
	fid_ep *s = f.server(req);
	cr_assert_eq(fi_accept(s, big.data(), f.accept_limit() + 1), -FI_EINVAL);
	cr_assert_eq(fi_accept(s, big.data(), f.accept_limit()), 0);
	expect_event(f.eq, FI_CONNECTED, nullptr);
	expect_event(f.eq, FI_CONNECTED, nullptr);
	f.close_pair(c, s);
	f.close();
}

Test(cm, connection_request_reports_addresses_and_offered_limits)
{
	CmFixture f;
	f.open();
	fid_ep *c = f.client();
	set_u32(c, FI_OPT_ND_INBOUND_READ_LIMIT, 3);
	set_u32(c, FI_OPT_ND_OUTBOUND_READ_LIMIT, 5);
	CmFixture::enable(c);
	cr_assert_eq(fi_connect(c, &f.listen_addr, "hi", 2), 0);
	/* A buffer too small for the request: nothing is lost. */
	uint32_t type;
	uint8_t small[sizeof(fi_eq_cm_entry)];
	ssize_t rc;
	do {
		rc = fi_eq_sread(f.eq, &type, small, sizeof(small), 10000, 0);
	} while (rc == -FI_EAGAIN);
	cr_assert_eq(rc, -FI_ETOOSMALL);
	Event req = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
	cr_assert_eq(req.data.size(), 2u);
	cr_assert_not_null(req.info->dest_addr, "the requester's address");
	cr_assert_not_null(req.info->src_addr);
	fi_nd_read_limits offer{};
	cr_assert_eq(fi_nd_peer_read_limits(req.info->handle, &offer), 0);
	cr_assert_eq(offer.inbound, 5u, "reads the requester will issue to us");
	cr_assert_eq(offer.outbound, 3u, "reads the requester will serve");
	cr_assert_eq(fi_reject(f.pep, req.info->handle, nullptr, 0), 0);
	fi_freeinfo(req.info);
	expect_error(f.eq, &c->fid);
	cr_assert_eq(fi_close(&c->fid), 0);
	f.close();
}

namespace {

uint32_t round_up_pow2(uint32_t v)
{
	uint32_t p = 1;
	while (p < v)
		p <<= 1;
	return v ? p : 0;
}

void expect_qp_limit(uint32_t got, uint32_t negotiated, const char *what)
{
	cr_assert(got >= negotiated && got <= round_up_pow2(negotiated),
		  "QP %s is %u for a negotiated %u", what, got, negotiated);
}

} // namespace

Test(cm, read_limit_matrix, .timeout = 300)
{
	CmFixture f;
	f.open();
	fid_ep *probe = f.client();
	const uint32_t max = get_u32(probe, FI_OPT_ND_INBOUND_READ_LIMIT);
	const uint32_t max_out = get_u32(probe, FI_OPT_ND_OUTBOUND_READ_LIMIT);
	fi_close(&probe->fid);
	cr_assert_gt(max, 0u);
	const std::pair<uint32_t, uint32_t> settings[] = {
		{0, 0}, {1, 3}, {max, max_out}, {max + 100, 2}, {4, max_out + 7},
	};
	for (auto [ci, co] : settings)
		for (auto [si, so] : settings) {
			fid_ep *c = f.client();
			set_u32(c, FI_OPT_ND_INBOUND_READ_LIMIT, ci);
			set_u32(c, FI_OPT_ND_OUTBOUND_READ_LIMIT, co);
			CmFixture::enable(c);
			cr_assert_eq(fi_connect(c, &f.listen_addr, nullptr, 0), 0);
			Event req = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
			fid_ep *s = f.server(req);
			set_u32(s, FI_OPT_ND_INBOUND_READ_LIMIT, si);
			set_u32(s, FI_OPT_ND_OUTBOUND_READ_LIMIT, so);
			cr_assert_eq(fi_accept(s, nullptr, 0), 0);
			expect_event(f.eq, FI_CONNECTED, nullptr);
			expect_event(f.eq, FI_CONNECTED, nullptr);
			/* ND: capped by the adapter, then by the peer. */
			const uint32_t c_in = std::min(ci, max), c_out = std::min(co, max_out);
			const uint32_t s_in = std::min({si, max, c_out});
			const uint32_t s_out = std::min({so, max_out, c_in});
			cr_assert_eq(get_u32(s, FI_OPT_ND_INBOUND_READ_LIMIT), s_in);
			cr_assert_eq(get_u32(s, FI_OPT_ND_OUTBOUND_READ_LIMIT), s_out);
			cr_assert_eq(get_u32(c, FI_OPT_ND_INBOUND_READ_LIMIT), s_out,
				     "client (%u,%u) server (%u,%u)", ci, co, si, so);
			cr_assert_eq(get_u32(c, FI_OPT_ND_OUTBOUND_READ_LIMIT), s_in);
			/* The queue pairs were given exactly these values; a device may
			 * round them up (Soft-RoCE: to a power of two), never down.
			 * iWARP's queue pairs take what MPA settled, which nd does
			 * not set: nd holds its reads to the negotiated limits
			 * itself (reads_stay_within_the_negotiated_limit). */
			if (f.iwarp()) {
				f.close_pair(c, s);
				continue;
			}
			fi_nd_read_limits qp{};
			cr_assert_eq(fi_nd_qp_read_limits(c, &qp), 0);
			expect_qp_limit(qp.inbound, s_out, "client max_dest_rd_atomic");
			expect_qp_limit(qp.outbound, s_in, "client max_rd_atomic");
			cr_assert_eq(fi_nd_qp_read_limits(s, &qp), 0);
			expect_qp_limit(qp.inbound, s_in, "server max_dest_rd_atomic");
			expect_qp_limit(qp.outbound, s_out, "server max_rd_atomic");
			f.close_pair(c, s);
		}
	f.close();
}

namespace {

/* A connector that completes by hand (FI_OPT_ND_MANUAL_COMPLETE),
 * connecting, and the endpoint made from its request (not accepted yet). */
std::pair<fid_ep *, fid_ep *> manual_request(CmFixture &f)
{
	fid_ep *c = f.client();
	set_int(c, FI_OPT_ND_MANUAL_COMPLETE, 1);
	CmFixture::enable(c);
	cr_assert_eq(fi_connect(c, &f.listen_addr, nullptr, 0), 0);
	Event req = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
	return {c, f.server(req)};
}

/* The accepter accepts with `data`; the connector has the response and
 * waits to complete or reject. */
Event accept_manual(CmFixture &f, fid_ep *c, fid_ep *s, const std::vector<uint8_t> &data = {})
{
	cr_assert_eq(fi_accept(s, data.data(), data.size()), 0);
	return expect_response(f.eq, &c->fid, &s->fid, f.iwarp());
}

} // namespace

Test(cm, manual_complete_connects_both_sides)
{
	CmFixture f;
	f.open();
	auto [c, s] = manual_request(f);
	set_u32(s, FI_OPT_ND_OUTBOUND_READ_LIMIT, 2);
	std::vector<uint8_t> data = pattern(40, 9);
	Event resp = accept_manual(f, c, s, data);
	cr_assert(resp.data == data, "the accepter's data with the response");
	fi_nd_read_limits peer{};
	cr_assert_eq(fi_nd_peer_read_limits(&c->fid, &peer), 0);
	cr_assert_eq(peer.inbound, 2u, "the accepter will issue at most 2 reads to us");
	cr_assert_eq(get_u32(c, FI_OPT_ND_INBOUND_READ_LIMIT), 2u, "effective before completing");
	expect_quiet(f.eq, 300); /* nothing more until the connector decides */
	cr_assert_eq(fi_nd_complete_connect(c), 0);
	bool client_up = false, server_up = f.iwarp(); /* iWARP: already */
	for (int i = 0; i < (f.iwarp() ? 1 : 2); i++) {
		Event ev = expect_event(f.eq, FI_CONNECTED, nullptr);
		client_up |= ev.fid == &c->fid;
		server_up |= ev.fid == &s->fid;
	}
	cr_assert(client_up && server_up);
	cr_assert_eq(fi_nd_complete_connect(c), -FI_ENOTCONN, "already complete");
	f.close_pair(c, s);
	f.close();
}

Test(cm, manual_reject_after_accept_aborts_the_accepter)
{
	CmFixture f;
	f.open();
	auto [c, s] = manual_request(f);
	accept_manual(f, c, s);
	std::vector<uint8_t> why = pattern(30, 4);
	cr_assert_eq(fi_nd_reject_connect(c, why.data(), f.reject_limit() + 1), -FI_EINVAL);
	if (f.iwarp()) {
		/* The connection exists: a disconnect, which carries no data,
		 * ends it, and the accepter sees it end. */
		cr_assert_eq(fi_nd_reject_connect(c, why.data(), why.size()), -FI_EOPNOTSUPP);
		cr_assert_eq(fi_nd_reject_connect(c, nullptr, 0), 0);
		expect_event(f.eq, FI_SHUTDOWN, &s->fid);
	} else {
		cr_assert_eq(fi_nd_reject_connect(c, why.data(), why.size()), 0);
		Event err = expect_error(f.eq, &s->fid);
		cr_assert_eq(err.err.err, FI_ECONNABORTED);
		cr_assert(err.err_data == why, "the rejecter's data: %zu bytes", err.err_data.size());
	}
	cr_assert_eq(fi_nd_complete_connect(c), -FI_ENOTCONN);
	cr_assert_eq(fi_connect(c, &f.listen_addr, nullptr, 0), -FI_EOPBADSTATE,
		     "the connector is unusable after rejecting");
	expect_quiet(f.eq, 300);
	f.close_pair(c, s);
	f.close();
}

/* ND CompleteConnect: an accepter that gives up while the connector
 * decides aborts the connection. Closing the accepting endpoint makes its
 * CM send a REJ; the connector hears of it at once, on its EQ, and a later
 * fi_nd_complete_connect says aborted, not "not connecting". */
Test(cm, manual_complete_reports_an_accepter_that_gives_up)
{
	CmFixture f;
	f.open();
	auto [c, s] = manual_request(f);
	accept_manual(f, c, s);
	cr_assert_eq(fi_close(&s->fid), 0, "the accepter gives up");
	Event err = expect_error(f.eq, &c->fid);
	cr_assert_eq(err.err.err, FI_ECONNABORTED);
	cr_assert_eq(fi_nd_complete_connect(c), -FI_ECONNABORTED);
	cr_assert_eq(fi_connect(c, &f.listen_addr, nullptr, 0), -FI_EOPBADSTATE);
	expect_quiet(f.eq, 300);
	cr_assert_eq(fi_close(&c->fid), 0);
	f.close();
}

Test(cm, no_listener_is_connection_refused)
{
	CmFixture f;
	f.open();
	sockaddr_in nobody = ipv4_addr(guest_ip(), 1);
	fid_ep *c = f.client();
	CmFixture::enable(c);
	cr_assert_eq(fi_connect(c, &nobody, nullptr, 0), 0);
	Event err = expect_error(f.eq, &c->fid);
	cr_assert_eq(err.err.err, FI_ECONNREFUSED, "got %s", fi_strerror(err.err.err));
	cr_assert_eq(err.err_data.size(), 0u);
	cr_assert_eq(fi_close(&c->fid), 0);
	f.close();
}

Test(cm, absent_host_fails_distinctly_within_the_resolve_timeout, .timeout = 60)
{
	setenv("FI_ND_RESOLVE_TIMEOUT_MS", "1000", 1);
	CmFixture f;
	f.open();
	sockaddr_in absent = ipv4_addr("10.0.2.77", 7471);
	fid_ep *c = f.client();
	CmFixture::enable(c);
	auto start = std::chrono::steady_clock::now();
	int rc = fi_connect(c, &absent, nullptr, 0);
	int err = 0;
	if (rc == 0) {
		Event ev = expect_error(f.eq, &c->fid, 30000);
		err = ev.err.err;
	} else {
		err = -rc;
	}
	auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
		std::chrono::steady_clock::now() - start).count();
	cr_assert(err == FI_EHOSTUNREACH || err == FI_ETIMEDOUT || err == FI_ENETUNREACH,
		  "got %d (%s)", err, fi_strerror(err));
	cr_assert_neq(err, FI_ECONNREFUSED, "unreachable is not refused");
	cr_assert_lt(took, 15000, "bounded by FI_ND_RESOLVE_TIMEOUT_MS, took %lld ms", (long long)took);
	cr_assert_eq(fi_close(&c->fid), 0);
	f.close();
}

Test(cm, state_checks_on_calls)
{
	CmFixture f;
	f.open();
	fid_ep *c = f.client();
	cr_assert_eq(fi_connect(c, &f.listen_addr, nullptr, 0), -FI_EOPBADSTATE, "not enabled");
	CmFixture::enable(c);
	cr_assert_eq(fi_shutdown(c, 0), -FI_ENOTCONN, "shutdown before connect");
	cr_assert_eq(fi_accept(c, nullptr, 0), -FI_EINVAL, "accept without a request");
	sockaddr_storage addr{};
	size_t len = 1;
	cr_assert_eq(fi_getpeer(c, &addr, &len), -FI_ENOTCONN);
	cr_assert_eq(fi_connect(c, nullptr, nullptr, 0), -FI_EINVAL);
	auto [a, b] = f.connect_pair();
	cr_assert_eq(fi_connect(a, &f.listen_addr, nullptr, 0), -FI_EISCONN);
	cr_assert_eq(fi_accept(b, nullptr, 0), -FI_EISCONN);
	/* Short buffers: the size needed is written back, nothing truncated. */
	len = 4;
	cr_assert_eq(fi_getname(&a->fid, &addr, &len), -FI_ETOOSMALL);
	cr_assert_eq(len, sizeof(sockaddr_in));
	len = 4;
	cr_assert_eq(fi_getpeer(a, &addr, &len), -FI_ETOOSMALL);
	cr_assert_eq(len, sizeof(sockaddr_in));
	len = sizeof(addr);
	cr_assert_eq(fi_getpeer(a, &addr, &len), 0);
	cr_assert_eq(len, sizeof(sockaddr_in));
	uint32_t one = 1;
	cr_assert_eq(fi_setopt(&a->fid, FI_OPT_ENDPOINT, FI_OPT_ND_INBOUND_READ_LIMIT, &one, sizeof(one)),
		     -FI_EOPBADSTATE, "limits are set before connecting");
	cr_assert_eq(fi_setopt(&a->fid, FI_OPT_ENDPOINT, FI_OPT_ND_INBOUND_READ_LIMIT, &one, 2),
		     -FI_EINVAL);
	f.close_pair(a, b);
	cr_assert_eq(fi_close(&c->fid), 0);
	len = 2;
	cr_assert_eq(fi_getname(&f.pep->fid, &addr, &len), -FI_ETOOSMALL);
	cr_assert_eq(len, sizeof(sockaddr_in));
	f.close();
}

Test(cm, no_shutdown_event_after_local_close)
{
	CmFixture f;
	f.open();
	auto [c, s] = f.connect_pair();
	cr_assert_eq(fi_close(&c->fid), 0);
	/* The peer learns; the closed endpoint reports nothing. */
	Event ev = expect_event(f.eq, FI_SHUTDOWN, &s->fid);
	(void)ev;
	expect_quiet(f.eq, 500);
	cr_assert_eq(fi_close(&s->fid), 0);
	f.close();
}

Test(cm, rejected_request_handle_cannot_be_reused)
{
	CmFixture f;
	f.open();
	fid_ep *c = f.connecting_client();
	Event req = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
	fid_t handle = req.info->handle;
	cr_assert_eq(fi_reject(f.pep, handle, nullptr, 0), 0);
	cr_assert_eq(fi_reject(f.pep, handle, nullptr, 0), -FI_EINVAL);
	fid_ep *s = nullptr;
	cr_assert_eq(fi_endpoint(f.domain, req.info, &s, nullptr), -FI_EINVAL);
	fi_freeinfo(req.info);
	expect_error(f.eq, &c->fid);
	cr_assert_eq(fi_close(&c->fid), 0);
	f.close();
}

Test(cm, shared_endpoints_connect_from_one_port_to_three_listeners)
{
	CmFixture f;
	f.open();
	sockaddr_storage listeners[3];
	fid_pep *peps[3];
	for (int i = 0; i < 3; i++)
		peps[i] = f.listen(f.eq, -1, &listeners[i]);
	sockaddr_in local = ipv4_addr(guest_ip(), 0);
	fid_ep *eps[4];
	uint16_t port = 0;
	for (int i = 0; i < 4; i++) {
		eps[i] = f.client();
		set_int(eps[i], FI_OPT_ND_SHARED_ADDR, 1);
		local.sin_port = htons(port);
		cr_assert_eq(fi_setname(&eps[i]->fid, &local, sizeof(local)), 0);
		if (!port) {
			sockaddr_storage got{};
			size_t len = sizeof(got);
			cr_assert_eq(fi_getname(&eps[i]->fid, &got, &len), 0);
			port = CmFixture::port_of(got);
			cr_assert_neq(port, 0);
		}
		CmFixture::enable(eps[i]);
	}
	/* A non-shared endpoint cannot take the port. */
	fid_ep *intruder = f.client();
	local.sin_port = htons(port);
	cr_assert_eq(fi_setname(&intruder->fid, &local, sizeof(local)), -FI_EADDRINUSE);
	cr_assert_eq(fi_close(&intruder->fid), 0);

	fid_ep *servers[3];
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(fi_connect(eps[i], &listeners[i], nullptr, 0), 0);
		Event req = expect_event(f.eq, FI_CONNREQ, &peps[i]->fid);
		servers[i] = f.server(req);
		cr_assert_eq(fi_accept(servers[i], nullptr, 0), 0);
		expect_event(f.eq, FI_CONNECTED, nullptr);
		expect_event(f.eq, FI_CONNECTED, nullptr);
	}
	for (int i = 0; i < 3; i++) {
		sockaddr_storage name{};
		size_t len = sizeof(name);
		cr_assert_eq(fi_getname(&eps[i]->fid, &name, &len), 0);
		cr_assert_eq(CmFixture::port_of(name), port, "all three from port %u", port);
	}
	/* The same local and remote pair again: ND_ADDRESS_ALREADY_EXISTS. */
	cr_assert_eq(fi_connect(eps[3], &listeners[0], nullptr, 0), -FI_EADDRINUSE);
	for (int i = 0; i < 3; i++)
		f.close_pair(eps[i], servers[i]);
	cr_assert_eq(fi_close(&eps[3]->fid), 0);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(fi_close(&peps[i]->fid), 0);
	f.close();
}

Test(cm, separate_eqs_progress_independently)
{
	CmFixture f;
	f.open();
	fid_eq *client_eq = nullptr;
	fi_eq_attr attr{};
	attr.wait_obj = FI_WAIT_FD;
	cr_assert_eq(fi_eq_open(f.fabric, &attr, &client_eq, nullptr), 0);
	fid_ep *c = f.client(client_eq);
	CmFixture::enable(c);
	cr_assert_eq(fi_connect(c, &f.listen_addr, "x", 1), 0);
	/* The client's EQ drives address and route resolution: read it
	 * until the request is on its way, then serve it. */
	Event none = next_event(client_eq, 300);
	cr_assert_eq(none.rc, -FI_EAGAIN);
	Event req = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
	fid_ep *s = f.server(req);
	cr_assert_eq(fi_accept(s, nullptr, 0), 0);
	expect_event(client_eq, FI_CONNECTED, &c->fid);
	expect_event(f.eq, FI_CONNECTED, &s->fid);
	cr_assert_eq(fi_close(&f.eq->fid), -FI_EBUSY, "endpoints still bound");
	f.close_pair(c, s);
	cr_assert_eq(fi_close(&client_eq->fid), 0);
	f.close();
}

Test(cm, sequential_cycles_leave_nothing_behind, .timeout = 600)
{
	CmFixture f;
	f.open();
	int cycles = 200;
	if (const char *env = getenv("ND_TEST_CM_CYCLES"))
		cycles = atoi(env);
	/* Warm up: the first connection loads what stays for the process. */
	auto [c0, s0] = f.connect_pair();
	f.close_pair(c0, s0);
	const int fds_before = nd_count_fds();
	for (int i = 0; i < cycles; i++) {
		auto [c, s] = f.connect_pair(pattern(8, (uint8_t)i));
		cr_assert_eq(fi_shutdown(c, 0), 0);
		expect_event(f.eq, FI_SHUTDOWN, nullptr);
		expect_event(f.eq, FI_SHUTDOWN, nullptr);
		f.close_pair(c, s);
	}
	expect_quiet(f.eq, 300);
	cr_assert_eq(nd_count_fds(), fds_before, "file descriptors after %d cycles", cycles);
	f.close();
}

namespace {

/* n clients connect at once, each naming itself (an int) in its
 * connection data: the listener's side accepts every request and counts
 * the FI_CONNECTED events of both sides. */
struct Establishing {
	explicit Establishing(int clients) : seen(clients, 0) {}
	void take(CmFixture &f, Event &ev)
	{
		if (ev.type == FI_CONNREQ) {
			int who;
			cr_assert_eq(ev.data.size(), sizeof(who));
			std::memcpy(&who, ev.data.data(), sizeof(who));
			cr_assert(who >= 0 && who < static_cast<int>(seen.size()));
			seen[who]++;
			requests++;
			servers.push_back(f.server(ev));
			cr_assert_eq(fi_accept(servers.back(), nullptr, 0), 0);
		} else {
			cr_assert_eq(ev.type, (uint32_t)FI_CONNECTED);
			connected++;
		}
	}
	bool done() const { return connected == 2 * static_cast<int>(seen.size()); }
	void expect_each_request_once() const
	{
		cr_assert_eq(requests, static_cast<int>(seen.size()));
		for (size_t i = 0; i < seen.size(); i++)
			cr_assert_eq(seen[i], 1, "request %zu seen %d times", i, seen[i]);
	}

	std::vector<int> seen;
	std::vector<fid_ep *> servers;
	int requests = 0, connected = 0;
};

} // namespace

Test(cm, concurrent_connections, .timeout = 600)
{
	CmFixture f;
	f.open(nullptr, 256);
	const int n = 100;
	std::vector<fid_ep *> clients(n), servers;
	for (int i = 0; i < n; i++) {
		clients[i] = f.client();
		CmFixture::enable(clients[i]);
		cr_assert_eq(fi_connect(clients[i], &f.listen_addr, &i, sizeof(i)), 0);
	}
	Establishing up(n);
	while (!up.done()) {
		Event ev = next_event(f.eq, 20000);
		cr_assert_geq(ev.rc, 0, "event %d of %d: rc %zd err %d", up.connected, 2 * n, ev.rc,
			      ev.err.err);
		up.take(f, ev);
	}
	up.expect_each_request_once();
	expect_quiet(f.eq, 300);
	for (fid_ep *ep : clients)
		cr_assert_eq(fi_close(&ep->fid), 0);
	for (fid_ep *ep : up.servers)
		cr_assert_eq(fi_close(&ep->fid), 0);
	f.close();
}

/* The EQ reads its CM channel a batch at a time (kCmEventsPerProgress,
 * 32): a backlog beyond one batch is read whole by an application that
 * sleeps on the EQ's fd whenever fi_trywait says it may, and every request
 * arrives once. */
Test(cm, a_backlog_beyond_one_batch_wakes_a_sleeper_until_read_whole, .timeout = 300)
{
	CmFixture f;
	f.open(nullptr, 256);
	const int n = 80;
	std::vector<fid_ep *> clients(n);
	for (int i = 0; i < n; i++) {
		clients[i] = f.client();
		CmFixture::enable(clients[i]);
		cr_assert_eq(fi_connect(clients[i], &f.listen_addr, &i, sizeof(i)), 0);
	}
	int fd = -1;
	cr_assert_eq(fi_control(&f.eq->fid, FI_GETWAIT, &fd), 0);
	/* Requests (and the clients' own steps) pile up in the channel. */
	std::this_thread::sleep_for(std::chrono::seconds(1));
	Establishing up(n);
	int sleeps = 0;
	while (!up.done()) {
		Event ev = next_event(f.eq, 0);
		if (ev.rc == -FI_EAGAIN) {
			fid *fids[] = {&f.eq->fid};
			if (fi_trywait(f.fabric, fids, 1) == 0) {
				pollfd pfd{fd, POLLIN, 0};
				cr_assert_eq(poll(&pfd, 1, 20000), 1,
					     "fi_trywait let the application sleep with %d of %d requests and %d of %d "
					     "connections read; nothing woke it",
					     up.requests, n, up.connected, 2 * n);
				sleeps++;
			}
			continue;
		}
		cr_assert_geq(ev.rc, 0, "rc %zd err %d", ev.rc, ev.err.err);
		up.take(f, ev);
	}
	up.expect_each_request_once();
	cr_log_info("slept on the fd %d times\n", sleeps);
	for (fid_ep *ep : clients)
		cr_assert_eq(fi_close(&ep->fid), 0);
	for (fid_ep *ep : up.servers)
		cr_assert_eq(fi_close(&ep->fid), 0);
	f.close();
}

Test(cm, pending_requests_are_refused_when_the_listener_closes)
{
	CmFixture f;
	f.open();
	fid_ep *c = f.connecting_client();
	Event req = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
	fi_freeinfo(req.info);
	cr_assert_eq(fi_close(&f.pep->fid), 0);
	f.pep = nullptr;
	Event err = expect_error(f.eq, &c->fid);
	cr_assert_eq(err.err.err, FI_ECONNREFUSED);
	cr_assert_eq(fi_close(&c->fid), 0);
	f.close();
}

Test(cm, backlog_refuses_requests_beyond_it)
{
	CmFixture f;
	f.open(nullptr, 2);
	fid_ep *clients[5];
	for (int i = 0; i < 5; i++) {
		clients[i] = f.client();
		CmFixture::enable(clients[i]);
		cr_assert_eq(fi_connect(clients[i], &f.listen_addr, &i, sizeof(i)), 0);
	}
	std::vector<Event> requests;
	int refused = 0;
	while ((int)requests.size() + refused < 5) {
		Event ev = next_event(f.eq, 20000);
		if (ev.rc == -FI_EAVAIL) {
			cr_assert_eq(ev.err.err, FI_ECONNREFUSED, "got %s", fi_strerror(ev.err.err));
			refused++;
		} else {
			cr_assert_eq(ev.type, (uint32_t)FI_CONNREQ, "rc %zd", ev.rc);
			requests.push_back(ev);
		}
	}
	cr_assert_eq(requests.size(), 2u, "the backlog holds two requests");
	cr_assert_eq(refused, 3);
	/* Taking one frees a place: a new request is held again. */
	fid_ep *s = f.server(requests[0]);
	fid_ep *late = f.connecting_client();
	Event again = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
	cr_assert_eq(fi_reject(f.pep, again.info->handle, nullptr, 0), 0);
	fi_freeinfo(again.info);
	expect_error(f.eq, &late->fid);
	cr_assert_eq(fi_reject(f.pep, requests[1].info->handle, nullptr, 0), 0);
	fi_freeinfo(requests[1].info);
	expect_error(f.eq, nullptr);
	cr_assert_eq(fi_close(&s->fid), 0);
	cr_assert_eq(fi_close(&late->fid), 0);
	for (fid_ep *c : clients)
		cr_assert_eq(fi_close(&c->fid), 0);
	f.close();
}

/* fi_getinfo(3) handle: a passive endpoint lends its bound address, port
 * included, to the active endpoint an info opens (fabtests msg_sockets). The
 * endpoint reports it at once and connects from it; the passive endpoint is
 * left without it, and a listener cannot lend its own. */
Test(cm, passive_endpoint_lends_its_address_to_an_endpoint)
{
	CmFixture f;
	f.open();
	fid_pep *lender = nullptr;
	cr_assert_eq(fi_passive_ep(f.fabric, f.info.get(), &lender, nullptr), 0);
	sockaddr_in local = ipv4_addr(guest_ip(), 0);
	cr_assert_eq(fi_setname(&lender->fid, &local, sizeof(local)), 0);
	sockaddr_storage lent{};
	size_t len = sizeof(lent);
	cr_assert_eq(fi_getname(&lender->fid, &lent, &len), 0);
	const uint16_t port = CmFixture::port_of(lent);
	cr_assert_neq(port, 0);

	InfoPtr hints = nd_hints();
	hints->handle = &lender->fid;
	char service[16];
	snprintf(service, sizeof(service), "%u", CmFixture::port_of(f.listen_addr));
	InfoPtr info;
	cr_assert_eq(getinfo(guest_ip(), service, 0, hints.get(), &info), 0);
	cr_assert_eq(info->handle, &lender->fid);
	sockaddr_storage src{};
	cr_assert_leq(info->src_addrlen, sizeof(src));
	std::memcpy(&src, info->src_addr, info->src_addrlen);
	cr_assert_eq(CmFixture::port_of(src), port, "the info's source is the lender's address");

	fid_ep *c = nullptr;
	cr_assert_eq(fi_endpoint(f.domain, info.get(), &c, nullptr), 0);
	sockaddr_storage name{};
	len = sizeof(name);
	cr_assert_eq(fi_getname(&c->fid, &name, &len), 0);
	cr_assert_eq(CmFixture::port_of(name), port, "bound at fi_endpoint, before any connect");
	cr_assert_eq(fi_close(&lender->fid), 0, "the lender closes without taking the port back");

	cr_assert_eq(fi_ep_bind(c, &f.eq->fid, 0), 0);
	CmFixture::enable(c);
	cr_assert_eq(fi_connect(c, &f.listen_addr, nullptr, 0), 0);
	Event req = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
	fid_ep *s = f.server(req);
	cr_assert_eq(fi_accept(s, nullptr, 0), 0);
	expect_event(f.eq, FI_CONNECTED, nullptr);
	expect_event(f.eq, FI_CONNECTED, nullptr);
	sockaddr_storage peer{};
	len = sizeof(peer);
	cr_assert_eq(fi_getpeer(s, &peer, &len), 0);
	cr_assert_eq(CmFixture::port_of(peer), port, "the server sees the lent port");
	f.close_pair(c, s);

	/* A listener keeps its address. */
	hints->handle = &f.pep->fid;
	InfoPtr from_listener;
	cr_assert_eq(getinfo(guest_ip(), service, 0, hints.get(), &from_listener), 0);
	fid_ep *refused = nullptr;
	cr_assert_eq(fi_endpoint(f.domain, from_listener.get(), &refused, nullptr), -FI_EOPBADSTATE);
	f.close();
}

namespace {

/* Waits until the head of `eq` names `object` (events naming others are
 * read and must be in `others`); the head stays queued. */
void peek_until_head_names(fid_eq *eq, fid_t object, std::initializer_list<fid_t> others)
{
	const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
	for (;;) {
		uint32_t event = 0;
		alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 256];
		ssize_t rc = fi_eq_read(eq, &event, buf, sizeof(buf), FI_PEEK);
		if (rc >= static_cast<ssize_t>(sizeof(fid_t))) {
			fid_t named = reinterpret_cast<fi_eq_entry *>(buf)->fid;
			if (named == object)
				return;
			cr_assert(std::find(others.begin(), others.end(), named) != others.end(),
				  "event %u names an unexpected fid", event);
			Event consumed = next_event(eq);
			if (consumed.info)
				fi_freeinfo(consumed.info);
			continue;
		}
		cr_assert_eq(rc, -FI_EAGAIN, "fi_eq_read(FI_PEEK): %zd", rc);
		cr_assert(std::chrono::steady_clock::now() < end, "no event for the object in 10 s");
		std::this_thread::sleep_for(std::chrono::milliseconds(5));
	}
}

/* For `ms`, every event read names none of `closed`. */
void expect_no_event_naming(fid_eq *eq, std::initializer_list<const void *> closed, int ms)
{
	const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
	while (std::chrono::steady_clock::now() < end) {
		uint32_t event = 0;
		alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 256];
		ssize_t rc = fi_eq_read(eq, &event, buf, sizeof(buf), 0);
		if (rc == -FI_EAVAIL) {
			fi_eq_err_entry err{};
			cr_assert_eq(fi_eq_readerr(eq, &err, 0), (ssize_t)sizeof(err));
			for (const void *gone : closed)
				cr_assert_neq(err.fid, gone, "an error entry names a closed object");
			continue;
		}
		if (rc > 0) {
			auto *entry = reinterpret_cast<fi_eq_cm_entry *>(buf);
			for (const void *gone : closed)
				cr_assert_neq(entry->fid, gone, "event %u names a closed object", event);
			if (event == FI_CONNREQ)
				fi_freeinfo(entry->info);
			continue;
		}
		cr_assert_eq(rc, -FI_EAGAIN);
		std::this_thread::sleep_for(std::chrono::milliseconds(5));
	}
}

} // namespace

/* An event already queued (seen with FI_PEEK) for an endpoint or passive
 * endpoint that the application then closes is never delivered: its fid
 * (and an FI_CONNREQ's handle) would point at freed memory. */
Test(cm, closing_an_object_removes_its_queued_events)
{
	CmFixture f;
	f.open();
	auto [c, s] = f.connect_pair();
	cr_assert_eq(fi_shutdown(c, 0), 0);
	peek_until_head_names(f.eq, &s->fid, {&c->fid});
	const fid_t closed_server = &s->fid;
	cr_assert_eq(fi_close(&s->fid), 0);
	expect_no_event_naming(f.eq, {closed_server}, 300);
	cr_assert_eq(fi_close(&c->fid), 0);

	/* A connection request queued for a listener that closes. */
	fid_ep *c2 = f.connecting_client();
	peek_until_head_names(f.eq, &f.pep->fid, {});
	const fid_t closed_pep = &f.pep->fid;
	cr_assert_eq(fi_close(&f.pep->fid), 0);
	f.pep = nullptr;
	Event err = expect_error(f.eq, &c2->fid);
	cr_assert_eq(err.err.err, FI_ECONNREFUSED, "the client is refused, and learns it");
	expect_no_event_naming(f.eq, {closed_pep}, 300);
	cr_assert_eq(fi_close(&c2->fid), 0);
	f.close();
}

/* A connection request's info is made when its event is first read, not
 * when the EQ queues it (a burst of requests holds one at a time): FI_PEEK
 * makes it, the read after gives that same info, with the addresses of
 * both ends, and its handle takes the request. */
Test(cm, a_peeked_connection_request_reads_with_the_info_it_showed)
{
	CmFixture f;
	f.open();
	fid_ep *c = f.connecting_client();
	peek_until_head_names(f.eq, &f.pep->fid, {});
	uint32_t event = 0;
	alignas(fi_eq_cm_entry) uint8_t peeked[sizeof(fi_eq_cm_entry) + 256];
	cr_assert_geq(fi_eq_read(f.eq, &event, peeked, sizeof(peeked), FI_PEEK), (ssize_t)sizeof(fi_eq_cm_entry));
	cr_assert_eq(event, (uint32_t)FI_CONNREQ);
	fi_info *shown = reinterpret_cast<fi_eq_cm_entry *>(peeked)->info;
	cr_assert_not_null(shown, "FI_PEEK shows the request's info");
	cr_assert_not_null(shown->handle);
	cr_assert_not_null(shown->src_addr);
	cr_assert_not_null(shown->dest_addr);
	cr_assert_eq(CmFixture::port_of(*static_cast<sockaddr_storage *>(shown->src_addr)),
		     CmFixture::port_of(f.listen_addr), "the request's local address is the listener's");
	Event request = next_event(f.eq);
	cr_assert_eq(request.type, (uint32_t)FI_CONNREQ);
	cr_assert_eq(request.info, shown, "the read gives the info FI_PEEK showed");
	fid_ep *s = f.server(request);
	cr_assert_eq(fi_accept(s, nullptr, 0), 0);
	for (int i = 0; i < 2; i++) {
		Event up = expect_event(f.eq, FI_CONNECTED, nullptr);
		cr_assert(up.fid == &c->fid || up.fid == &s->fid);
	}
	f.close_pair(c, s);
	f.close();
}

/* A request taken by fi_endpoint is progressed by the listener's EQ until
 * its endpoint binds an EQ of its own. A requester that gives up in between
 * (its CM sends a REJ, which the kernel does not report for a request not
 * yet accepted) is noticed by fi_accept, after the bind: FI_ECONNABORTED,
 * not an invalid-argument error; no event names the unbound endpoint on
 * the listener's EQ; an endpoint closed without ever binding refuses its
 * requester. */
Test(cm, requester_that_gives_up_before_the_endpoint_binds)
{
	CmFixture f;
	f.open();
	fid_ep *c = f.connecting_client();
	Event req = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
	fid_ep *s = nullptr;
	cr_assert_eq(fi_endpoint(f.domain, req.info, &s, nullptr), 0);
	fi_freeinfo(req.info);
	cr_assert_eq(fi_close(&c->fid), 0, "the requester gives up (its CM rejects)");
	/* Reading the listener's EQ progresses the unbound endpoint's id. */
	expect_quiet(f.eq, 500);
	fid_eq *own_eq = nullptr;
	fi_eq_attr attr{};
	attr.wait_obj = FI_WAIT_FD;
	cr_assert_eq(fi_eq_open(f.fabric, &attr, &own_eq, nullptr), 0);
	cr_assert_eq(fi_ep_bind(s, &own_eq->fid, 0), 0);
	cr_assert_eq(fi_enable(s), 0);
	int rc = fi_accept(s, nullptr, 0);
	cr_assert_eq(rc, -FI_ECONNABORTED, "fi_accept: %d", rc);
	expect_quiet(own_eq, 200);
	cr_assert_eq(fi_close(&s->fid), 0);
	cr_assert_eq(fi_close(&own_eq->fid), 0);

	/* Closed before any bind: the requester is refused. */
	fid_ep *c2 = f.connecting_client();
	Event req2 = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
	fid_ep *s2 = nullptr;
	cr_assert_eq(fi_endpoint(f.domain, req2.info, &s2, nullptr), 0);
	fi_freeinfo(req2.info);
	cr_assert_eq(fi_close(&s2->fid), 0);
	Event err = expect_error(f.eq, &c2->fid);
	cr_assert_eq(err.err.err, FI_ECONNREFUSED);
	cr_assert_eq(fi_close(&c2->fid), 0);
	f.close();
}

/* The same requester answered with fi_reject: the kernel takes no reject
 * for a request whose requester gave up, and says nothing of it before an
 * answer; fi_reject says so as fi_accept does (FI_ECONNABORTED), frees the
 * request, and the listener goes on taking requests. */
Test(cm, reject_of_a_requester_that_gave_up_is_aborted)
{
	CmFixture f;
	f.open();
	fid_ep *c = f.connecting_client();
	Event req = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
	cr_assert_eq(fi_close(&c->fid), 0, "the requester gives up (its CM rejects)");
	expect_quiet(f.eq, 500);
	const char why[] = "no";
	int rc = fi_reject(f.pep, req.info->handle, why, sizeof why);
	cr_assert_eq(rc, -FI_ECONNABORTED, "fi_reject: %d", rc);
	rc = fi_reject(f.pep, req.info->handle, nullptr, 0);
	cr_assert_eq(rc, -FI_EINVAL, "the handle is spent: %d", rc);
	fi_freeinfo(req.info);

	fid_ep *c2 = f.connecting_client();
	Event req2 = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
	cr_assert_eq(fi_reject(f.pep, req2.info->handle, why, sizeof why), 0);
	fi_freeinfo(req2.info);
	Event err = expect_error(f.eq, &c2->fid);
	cr_assert_eq(err.err.err, FI_ECONNREFUSED);
	cr_assert_eq(fi_close(&c2->fid), 0);
	f.close();
}
