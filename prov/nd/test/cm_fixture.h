/*
 * cm_fixture.h: connection-management test helpers for the device tests. A
 * fixture opens fabric, domain, one EQ and a listener on the test device;
 * client and server endpoints live in the same process and, unless a test
 * says otherwise, share the EQ, so that one fi_eq_sread progresses both
 * sides of a connection.
 */
#ifndef ND_TEST_CM_FIXTURE_H
#define ND_TEST_CM_FIXTURE_H

#include <criterion/criterion.h>

#include "guest.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_ext_nd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <string>
#include <vector>

namespace nd::test {

/* One EQ event, as a test sees it. */
struct Event {
	ssize_t rc = 0;			/* bytes, or -FI_EAVAIL / -FI_EAGAIN */
	uint32_t type = 0;
	fid_t fid = nullptr;
	fi_info *info = nullptr;	/* FI_CONNREQ: the test frees it */
	std::vector<uint8_t> data;	/* private data after fi_eq_cm_entry */
	fi_eq_err_entry err{};
	std::vector<uint8_t> err_data;
};

inline Event next_event(fid_eq *eq, int timeout_ms = 10000)
{
	Event ev;
	std::vector<uint8_t> buf(sizeof(fi_eq_cm_entry) + 256);
	ev.rc = fi_eq_sread(eq, &ev.type, buf.data(), buf.size(), timeout_ms, 0);
	if (ev.rc == -FI_EAVAIL) {
		uint8_t err_buf[256];
		ev.err.err_data = err_buf;
		ev.err.err_data_size = sizeof(err_buf);
		cr_assert_eq(fi_eq_readerr(eq, &ev.err, 0), (ssize_t)sizeof(ev.err));
		ev.fid = ev.err.fid;
		ev.err_data.assign(err_buf, err_buf + ev.err.err_data_size);
		ev.err.err_data = nullptr;
		return ev;
	}
	if (ev.rc >= (ssize_t)sizeof(fi_eq_cm_entry)) {
		fi_eq_cm_entry head;
		std::memcpy(&head, buf.data(), sizeof(head));
		ev.fid = head.fid;
		ev.info = head.info;
		ev.data.assign(buf.begin() + sizeof(head), buf.begin() + ev.rc);
	}
	return ev;
}

/* The next event must be `type` for `fid`. */
inline Event expect_event(fid_eq *eq, uint32_t type, fid_t fid, int timeout_ms = 10000)
{
	Event ev = next_event(eq, timeout_ms);
	cr_assert_geq(ev.rc, 0, "waiting for event %u: got rc %zd (err %d %s)", type, ev.rc,
		      ev.err.err, ev.rc == -FI_EAVAIL ? fi_strerror(ev.err.err) : "");
	cr_assert_eq(ev.type, type, "event %u, expected %u", ev.type, type);
	if (fid)
		cr_assert_eq(ev.fid, fid);
	return ev;
}

/* Manual completion (FI_ND_MANUAL_COMPLETE): the connector's FI_ND_CONNRESP
 * after the accept, returned. On iWARP the accepter is connected as soon as
 * its reply is sent (fi_nd(7), iWARP): its FI_CONNECTED comes too, in
 * either order. */
inline Event expect_response(fid_eq *eq, fid_t connector, fid_t accepter, bool iwarp)
{
	if (!iwarp)
		return expect_event(eq, FI_ND_CONNRESP, connector);
	Event resp, up;
	for (int i = 0; i < 2; i++) {
		Event ev = next_event(eq, 10000);
		cr_assert_geq(ev.rc, 0, "waiting for the response and the accepter's FI_CONNECTED: rc %zd",
			      ev.rc);
		if (ev.type == FI_ND_CONNRESP && ev.fid == connector)
			resp = ev;
		else if (ev.type == FI_CONNECTED && ev.fid == accepter)
			up = ev;
		else
			cr_assert_fail("event %u for %p", ev.type, static_cast<void *>(ev.fid));
	}
	cr_assert_eq(resp.type, FI_ND_CONNRESP);
	cr_assert_eq(up.type, FI_CONNECTED);
	return resp;
}

/* A connection's end: FI_SHUTDOWN once for each of its endpoints, in
 * either order (the side that called fi_shutdown hears its own disconnect
 * complete; on iWARP that may come first), and nothing else. */
inline void expect_shutdown_of_both(fid_eq *eq, fid_t a, fid_t b)
{
	bool a_down = false, b_down = false;
	for (int i = 0; i < 2; i++) {
		Event ev = next_event(eq, 10000);
		cr_assert_geq(ev.rc, 0, "FI_SHUTDOWN %d of 2: rc %zd", i + 1, ev.rc);
		cr_assert_eq(ev.type, (uint32_t)FI_SHUTDOWN, "event %u", ev.type);
		cr_assert(ev.fid == a || ev.fid == b, "FI_SHUTDOWN names another fid");
		bool &down = ev.fid == a ? a_down : b_down;
		cr_assert_not(down, "FI_SHUTDOWN twice for one endpoint");
		down = true;
	}
}

inline Event expect_error(fid_eq *eq, fid_t fid, int timeout_ms = 10000)
{
	Event ev = next_event(eq, timeout_ms);
	cr_assert_eq(ev.rc, -FI_EAVAIL, "expected an error entry, got rc %zd event %u", ev.rc,
		     ev.type);
	if (fid)
		cr_assert_eq(ev.fid, fid);
	return ev;
}

inline std::vector<uint8_t> pattern(size_t len, uint8_t seed)
{
	std::vector<uint8_t> v(len);
	for (size_t i = 0; i < len; i++)
		v[i] = static_cast<uint8_t>(seed + i * 13);
	return v;
}

struct CmFixture {
	InfoPtr info;
	fid_fabric *fabric = nullptr;
	fid_domain *domain = nullptr;
	fid_eq *eq = nullptr;
	fid_pep *pep = nullptr;
	sockaddr_storage listen_addr{};
	uint64_t hint_caps = 0;		/* asked for besides nd_hints()'s */
	fi_threading hint_threading = FI_THREAD_UNSPEC; /* the provider's default when unspecified */

	void open(const char *ip = nullptr, int backlog = -1)
	{
		InfoPtr hints = nd_hints();
		hints->caps |= hint_caps;
		hints->domain_attr->threading = hint_threading;
		cr_assert_eq(getinfo(ip ? ip : guest_ip(), "0", FI_SOURCE, hints.get(), &info), 0);
		cr_assert_eq(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
		cr_assert_eq(fi_domain(fabric, info.get(), &domain, nullptr), 0);
		fi_eq_attr attr{};
		attr.wait_obj = FI_WAIT_FD;
		cr_assert_eq(fi_eq_open(fabric, &attr, &eq, nullptr), 0);
		pep = listen(eq, backlog);
	}

	fid_pep *listen(fid_eq *on, int backlog = -1, sockaddr_storage *bound = nullptr)
	{
		fid_pep *p = nullptr;
		cr_assert_eq(fi_passive_ep(fabric, info.get(), &p, nullptr), 0);
		cr_assert_eq(fi_pep_bind(p, &on->fid, 0), 0);
		if (backlog >= 0)
			cr_assert_eq(fi_control(&p->fid, FI_BACKLOG, &backlog), 0);
		cr_assert_eq(fi_listen(p), 0);
		sockaddr_storage addr{};
		size_t len = sizeof(addr);
		cr_assert_eq(fi_getname(&p->fid, &addr, &len), 0);
		cr_assert_neq(port_of(addr), 0, "the provider assigned a port");
		if (bound)
			*bound = addr;
		else
			listen_addr = addr;
		return p;
	}

	/* iWARP (soft-iWARP in the guest): fi_nd(7)'s section iWARP. */
	bool iwarp() const { return info->ep_attr->protocol == FI_PROTO_IWARP; }
	/* fi_nd(7), LIMITS: private data the application may send. */
	size_t connect_limit() const { return iwarp() ? 228 : 55; }
	size_t accept_limit() const { return iwarp() ? 228 : 195; }
	size_t reject_limit() const { return iwarp() ? 247 : 147; }

	static uint16_t port_of(const sockaddr_storage &addr)
	{
		return ntohs(addr.ss_family == AF_INET6
				     ? reinterpret_cast<const sockaddr_in6 &>(addr).sin6_port
				     : reinterpret_cast<const sockaddr_in &>(addr).sin_port);
	}

	/* An enabled client endpoint bound to `on` (the shared EQ by default). */
	fid_ep *client(fid_eq *on = nullptr)
	{
		fid_ep *ep = nullptr;
		cr_assert_eq(fi_endpoint(domain, info.get(), &ep, nullptr), 0);
		cr_assert_eq(fi_ep_bind(ep, &(on ? on : eq)->fid, 0), 0);
		return ep;
	}

	static void enable(fid_ep *ep) { cr_assert_eq(fi_enable(ep), 0); }

	/* A client endpoint, enabled, that asked the listener to connect
	 * (no private data). */
	fid_ep *connecting_client()
	{
		fid_ep *c = client();
		enable(c);
		cr_assert_eq(fi_connect(c, &listen_addr, nullptr, 0), 0);
		return c;
	}

	/* The server endpoint of a request; the info is freed. */
	fid_ep *server(Event &request, fid_eq *on = nullptr)
	{
		cr_assert_eq(request.type, (uint32_t)FI_CONNREQ);
		fid_ep *ep = nullptr;
		cr_assert_eq(fi_endpoint(domain, request.info, &ep, nullptr), 0);
		fi_freeinfo(request.info);
		request.info = nullptr;
		cr_assert_eq(fi_ep_bind(ep, &(on ? on : eq)->fid, 0), 0);
		cr_assert_eq(fi_enable(ep), 0);
		return ep;
	}

	/* A whole connection: returns {client, server}, both connected. */
	std::pair<fid_ep *, fid_ep *> connect_pair(const std::vector<uint8_t> &connect_data = {},
						   const std::vector<uint8_t> &accept_data = {})
	{
		fid_ep *c = client();
		enable(c);
		cr_assert_eq(fi_connect(c, &listen_addr, connect_data.data(), connect_data.size()), 0);
		Event req = expect_event(eq, FI_CONNREQ, &pep->fid);
		cr_assert(req.data == connect_data, "connect data arrived with %zu bytes, sent %zu",
			  req.data.size(), connect_data.size());
		fid_ep *s = server(req);
		cr_assert_eq(fi_accept(s, accept_data.data(), accept_data.size()), 0);
		/* Both sides connect; the order between them is not fixed. */
		bool client_up = false, server_up = false;
		for (int i = 0; i < 2; i++) {
			Event ev = expect_event(eq, FI_CONNECTED, nullptr);
			if (ev.fid == &c->fid) {
				cr_assert(ev.data == accept_data, "accept data: %zu bytes, sent %zu",
					  ev.data.size(), accept_data.size());
				client_up = true;
			} else {
				cr_assert_eq(ev.fid, &s->fid);
				server_up = true;
			}
		}
		cr_assert(client_up && server_up);
		return {c, s};
	}

	/* Closes a connection's endpoints and swallows the events it causes. */
	void close_pair(fid_ep *c, fid_ep *s)
	{
		cr_assert_eq(fi_close(&c->fid), 0);
		cr_assert_eq(fi_close(&s->fid), 0);
	}

	void close()
	{
		if (pep)
			cr_assert_eq(fi_close(&pep->fid), 0);
		if (eq)
			cr_assert_eq(fi_close(&eq->fid), 0);
		if (domain)
			cr_assert_eq(fi_close(&domain->fid), 0);
		if (fabric)
			cr_assert_eq(fi_close(&fabric->fid), 0);
	}
};

/* No event arrives on `eq` within `ms`. */
inline void expect_quiet(fid_eq *eq, int ms)
{
	Event ev = next_event(eq, ms);
	cr_assert_eq(ev.rc, -FI_EAGAIN, "unexpected event %u (rc %zd, err %d)", ev.type, ev.rc,
		     ev.err.err);
}

} // namespace nd::test

#endif /* ND_TEST_CM_FIXTURE_H */
