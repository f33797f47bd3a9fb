/*
 * nd_pair_tests: connection management and data path with the two sides in
 * two processes, which may run on two hosts (util/nd-cluster's nodes): the
 * same program serves in one guest (both on its address) and across the
 * wire (node 0 serves, node 1 connects to it).
 *
 *   server: nd_pair_tests [-p PROV] -s [-a LOCAL_ADDRESS] [-P PORT]
 *   client: nd_pair_tests [-p PROV] -c SERVER [-P PORT] [-t SUBTEST]
 *
 * The client drives: each subtest opens fresh endpoints, and the first
 * bytes of every connect data name the subtest and its step, so that the
 * server plays its half. A first request is refused with the server's
 * limits of connect, accept and reject data as reject data (the lengths
 * the subtests try), a last one tells the server to stop. Subtests:
 *
 *   connect_data  connect and accept data of several lengths up to the
 *                 limits arrive byte for byte; the server sees the client's
 *                 address; fi_shutdown reaches both sides once
 *   reject_data   reject data of several lengths arrives with
 *                 FI_ECONNREFUSED; the refused endpoint connects again
 *   messages      1 B to 1 MiB each way, bytes and lengths checked and the
 *                 bytes after each message untouched
 *   rma           RDMA writes (1 B to 1 MiB) and a write with remote CQ
 *                 data into the server, its RDMA write back into the
 *                 client, RDMA reads from it: every byte checked where it
 *                 landed, and the guard bytes around it
 *   shutdown      the client's fi_shutdown flushes the server's posted
 *                 receives with FI_ECANCELED, each once, and later posts
 *                 fail with -FI_ENOTCONN on both sides
 *
 * The client prints "PASS: name" or "FAIL: name: why" per subtest; the
 * server prints "FAIL: server: name: why" for a check of its own half that
 * fails (and "server ok: name" otherwise), so that a run is judged by both
 * outputs. Exit status: 1 when any check failed, 2 for a usage error. Every
 * wait is bounded (WAIT_MS; the server gives up after IDLE_MS without a
 * request). The limits of connect, accept and reject data are the
 * provider's (nd's FI_OPT_ND_ACCEPT_DATA_SIZE and FI_OPT_ND_REJECT_DATA_SIZE,
 * FI_OPT_CM_DATA_SIZE for other providers).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "nd_subtest.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext_nd.h>
#include <rdma/fi_rma.h>

/* Longest wait for an event or a completion: one Soft-RoCE retransmission
 * (a packet the loaded guest dropped) takes about 10 s, so 30. */
#define WAIT_MS 30000
#define IDLE_MS 120000	  /* the server's longest wait for the next request */
#define MiB (1u << 20)
#define REGION (4 * MiB + 4096)
#define GUARD_LEN 64
#define MAGIC 0x4e	  /* 'N': the connect data is this program's */

enum { T_END, T_HELLO, T_CONNECT_DATA, T_REJECT_DATA, T_MESSAGES, T_RMA, T_SHUTDOWN, T_COUNT };
static const char *names[T_COUNT] = { "end", "hello", "connect_data", "reject_data", "messages", "rma",
				      "shutdown" };

/* The first bytes of every connect data. */
struct hdr {
	uint8_t magic, test, step, pad;
};
/* Where a side's region is, for the peer's RMA. */
struct region {
	uint64_t addr, key;
};

static const char *prov = "nd";
static struct fi_info *info; /* the server's listening info, or the client's with the server */
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_eq *eq;
static struct fid_pep *pep;
static struct fid_mr *mr;
static uint8_t *buf;
static uint64_t mr_mode;
static size_t cm_limit, accept_limit, reject_limit, cq_data_size;
/* iWARP: a refused connector's queue pair is left in error by the iWARP CM,
 * so nd refuses to connect it again (fi_nd(7)). */
static int iwarp;

/* One connection's endpoint and its CQ. */
struct end {
	struct fid_ep *ep;
	struct fid_cq *cq;
};

static void *desc(void) { return (mr_mode & FI_MR_LOCAL) ? fi_mr_desc(mr) : NULL; }

static struct region my_region(void)
{
	struct region r = { (mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)buf : 0, fi_mr_key(mr) };
	return r;
}

static void open_common(const char *node, const char *service, bool server)
{
	struct fi_info *hints = fi_allocinfo();
	hints->fabric_attr->prov_name = strdup(prov);
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG | FI_RMA;
	hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	CHECK(fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), node, service,
			 server ? FI_SOURCE : 0, hints, &info));
	fi_freeinfo(hints);
	mr_mode = info->domain_attr->mr_mode;
	cq_data_size = info->domain_attr->cq_data_size;
	iwarp = info->ep_attr->protocol == FI_PROTO_IWARP;
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	struct fi_eq_attr eq_attr = { .wait_obj = FI_WAIT_FD, .size = 64 };
	CHECK(fi_eq_open(fabric, &eq_attr, &eq, NULL));
	buf = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	CHECK(fi_mr_reg(domain, buf, REGION,
			FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0,
			&mr, NULL));
}

static void close_common(void)
{
	if (pep)
		fi_close(&pep->fid);
	fi_close(&mr->fid);
	fi_close(&eq->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	munmap(buf, REGION);
}

static void open_end(struct end *e, struct fi_info *from)
{
	struct fi_cq_attr attr = { .format = FI_CQ_FORMAT_DATA, .size = 64 };
	CHECK(fi_cq_open(domain, &attr, &e->cq, NULL));
	CHECK(fi_endpoint(domain, from, &e->ep, NULL));
	CHECK(fi_ep_bind(e->ep, &eq->fid, 0));
	CHECK(fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_enable(e->ep));
}

static void close_end(struct end *e)
{
	if (e->ep)
		fi_close(&e->ep->fid);
	if (e->cq)
		fi_close(&e->cq->fid);
	e->ep = NULL;
	e->cq = NULL;
}

/* ---- events and completions, every wait bounded ---- */

struct event {
	uint32_t type;
	fid_t fid;
	struct fi_info *info; /* FI_CONNREQ: the caller frees it */
	size_t len;	      /* connect/accept data, or an error's data */
	uint8_t data[512];
	int err;	      /* an error entry's err; 0 for an event */
};

/* The next EQ entry within ms; T_FAIL on a timeout or a read failure. */
static int next_event(struct event *ev, int ms, const char *what)
{
	struct {
		struct fi_eq_cm_entry cm;
		uint8_t data[512];
	} entry;
	memset(ev, 0, sizeof(*ev));
	ssize_t rc = fi_eq_sread(eq, &ev->type, &entry, sizeof(entry), ms, 0);
	if (rc == -FI_EAVAIL) {
		struct fi_eq_err_entry err = { 0 };
		uint8_t err_data[512];
		err.err_data = err_data;
		err.err_data_size = sizeof(err_data);
		if (fi_eq_readerr(eq, &err, 0) != (ssize_t)sizeof(err))
			FAIL("%s: fi_eq_readerr failed", what);
		ev->fid = err.fid;
		ev->err = err.err ? err.err : -1;
		ev->len = err.err_data_size < sizeof(ev->data) ? err.err_data_size : sizeof(ev->data);
		memcpy(ev->data, err_data, ev->len);
		return T_PASS;
	}
	if (rc == -FI_EAGAIN)
		FAIL("%s: no event within %d ms", what, ms);
	if (rc < (ssize_t)sizeof(entry.cm))
		FAIL("%s: fi_eq_sread: %s", what, fi_strerror((int)-rc));
	ev->fid = entry.cm.fid;
	ev->info = entry.cm.info;
	ev->len = (size_t)rc - sizeof(entry.cm);
	memcpy(ev->data, entry.data, ev->len);
	return T_PASS;
}

/* The next EQ entry must be event TYPE for FID. */
static int expect_event(struct event *ev, uint32_t type, fid_t fid, const char *what)
{
	RUN(next_event(ev, WAIT_MS, what));
	if (ev->err)
		FAIL("%s: error entry %d (%s) instead of event %u", what, ev->err, fi_strerror(ev->err),
		     type);
	if (ev->type != type || ev->fid != fid)
		FAIL("%s: event %u for %p, expected %u for %p", what, ev->type, (void *)ev->fid, type,
		     (void *)fid);
	return T_PASS;
}

struct comp {
	bool is_err;
	struct fi_cq_data_entry e;
	int err;
};

static int next_comp(struct end *e, struct comp *c, const char *what)
{
	double deadline = now_ms() + WAIT_MS;
	memset(c, 0, sizeof(*c));
	for (;;) {
		ssize_t rc = fi_cq_read(e->cq, &c->e, 1);
		if (rc == 1)
			return T_PASS;
		if (rc == -FI_EAVAIL) {
			struct fi_cq_err_entry err = { 0 };
			if (fi_cq_readerr(e->cq, &err, 0) != 1)
				FAIL("%s: fi_cq_readerr failed", what);
			c->is_err = true;
			c->err = err.err;
			c->e.op_context = err.op_context;
			c->e.flags = err.flags;
			c->e.len = err.len;
			return T_PASS;
		}
		if (rc != -FI_EAGAIN)
			FAIL("%s: fi_cq_read: %s", what, fi_strerror((int)-rc));
		if (now_ms() > deadline)
			FAIL("%s: no completion within %d ms", what, WAIT_MS);
	}
}

/* A successful completion with context CTX must come next. */
static int expect_comp(struct end *e, void *ctx, struct comp *c, const char *what)
{
	RUN(next_comp(e, c, what));
	if (c->is_err)
		FAIL("%s: error completion %d (%s)", what, c->err, fi_strerror(c->err));
	if (c->e.op_context != ctx)
		FAIL("%s: completion for context %p, expected %p", what, c->e.op_context, ctx);
	return T_PASS;
}

/* N successful completions whose contexts are CTXS, in any order. */
static int expect_comps(struct end *e, void **ctxs, struct comp *out, int n, const char *what)
{
	bool seen[8] = { false };
	for (int got = 0; got < n; got++) {
		struct comp c;
		RUN(next_comp(e, &c, what));
		if (c.is_err)
			FAIL("%s: error completion %d (%s)", what, c.err, fi_strerror(c.err));
		int i;
		for (i = 0; i < n && ctxs[i] != c.e.op_context; i++)
			;
		if (i == n || seen[i])
			FAIL("%s: unexpected or repeated completion for context %p", what,
			     c.e.op_context);
		seen[i] = true;
		out[i] = c;
	}
	return T_PASS;
}

static int expect_cq_empty(struct end *e, const char *what)
{
	struct fi_cq_data_entry x;
	ssize_t rc = fi_cq_read(e->cq, &x, 1);
	if (rc != -FI_EAGAIN)
		FAIL("%s: the CQ is not empty (%zd)", what, rc);
	return T_PASS;
}

static size_t connect_data(uint8_t *out, int test, int step, const void *payload, size_t len)
{
	struct hdr h = { MAGIC, (uint8_t)test, (uint8_t)step, 0 };
	memcpy(out, &h, sizeof(h));
	if (len)
		memcpy(out + sizeof(h), payload, len);
	return sizeof(h) + len;
}

/* ---- the client's halves ---- */

/* Connects END with the given connect data and waits for the outcome:
 * the FI_CONNECTED event (accept data in *ev) or the error entry. */
static int client_connect(struct end *e, int test, int step, const void *payload, size_t len,
			  struct event *ev)
{
	uint8_t data[256];
	size_t n = connect_data(data, test, step, payload, len);
	if (!e->ep)
		open_end(e, info);
	TRY(fi_connect(e->ep, info->dest_addr, data, n));
	RUN(next_event(ev, WAIT_MS, "the connection's outcome"));
	if (ev->fid != &e->ep->fid)
		FAIL("an event for another object (%p)", (void *)ev->fid);
	return T_PASS;
}

static int connected(struct event *ev, const char *what)
{
	if (ev->err)
		FAIL("%s: the connection failed: %s (reject data: %.*s)", what, fi_strerror(ev->err),
		     (int)ev->len, (const char *)ev->data);
	if (ev->type != FI_CONNECTED)
		FAIL("%s: event %u, expected FI_CONNECTED", what, ev->type);
	return T_PASS;
}

/* fi_shutdown, and the local FI_SHUTDOWN event once. */
static int client_shutdown(struct end *e)
{
	struct event ev;
	TRY(fi_shutdown(e->ep, 0));
	RUN(expect_event(&ev, FI_SHUTDOWN, &e->ep->fid, "FI_SHUTDOWN after fi_shutdown"));
	return T_PASS;
}

/* The lengths of each step, up to the limits. */
static size_t lengths(size_t limit, int step)
{
	const size_t l[] = { 0, 1, 37, limit };
	return l[step] < limit ? l[step] : limit;
}
#define STEPS 4

static int c_connect_data(void)
{
	for (int step = 0; step < STEPS; step++) {
		struct end e = { 0 };
		size_t clen = lengths(cm_limit - sizeof(struct hdr), step);
		size_t alen = lengths(accept_limit, step);
		uint8_t payload[256], want[256];
		fill(payload, clen, (unsigned)step);
		fill(want, alen, (unsigned)step + 50);
		struct event ev;
		int r = client_connect(&e, T_CONNECT_DATA, step, payload, clen, &ev);
		if (r == T_PASS)
			r = connected(&ev, "connect");
		if (r == T_PASS && (ev.len != alen || memcmp(ev.data, want, alen)))
			snprintf(why, sizeof(why), "step %d: accept data of %zu bytes arrived as %zu bytes%s",
				 step, alen, ev.len, ev.len == alen ? ", not byte for byte" : ""),
				r = T_FAIL;
		if (r == T_PASS) {
			struct sockaddr_in peer;
			size_t plen = sizeof(peer);
			if (fi_getpeer(e.ep, &peer, &plen) ||
			    peer.sin_port != ((struct sockaddr_in *)info->dest_addr)->sin_port ||
			    peer.sin_addr.s_addr != ((struct sockaddr_in *)info->dest_addr)->sin_addr.s_addr)
				snprintf(why, sizeof(why), "fi_getpeer does not name the server"), r = T_FAIL;
		}
		if (r == T_PASS)
			r = client_shutdown(&e);
		if (r == T_PASS && fi_shutdown(e.ep, 0) != -FI_ENOTCONN)
			snprintf(why, sizeof(why), "a second fi_shutdown is not -FI_ENOTCONN"), r = T_FAIL;
		close_end(&e);
		if (r != T_PASS)
			return r;
		printf("  connect_data: connect %zu + %zu header bytes, accept %zu bytes\n", clen,
		       sizeof(struct hdr), alen);
	}
	return T_PASS;
}

static int c_reject_data(void)
{
	struct end e = { 0 };
	int r = T_PASS;
	for (int step = 0; step < STEPS && r == T_PASS; step++) {
		size_t rlen = lengths(reject_limit, step);
		uint8_t want[256];
		fill(want, rlen, (unsigned)step + 100);
		struct event ev;
		/* One endpoint throughout: ND lets a refused endpoint try again. */
		r = client_connect(&e, T_REJECT_DATA, step, NULL, 0, &ev);
		if (r != T_PASS)
			break;
		if (ev.err != FI_ECONNREFUSED)
			snprintf(why, sizeof(why), "step %d: %s (event %u), expected FI_ECONNREFUSED", step,
				 ev.err ? fi_strerror(ev.err) : "no error", ev.type),
				r = T_FAIL;
		else if (ev.len != rlen || memcmp(ev.data, want, rlen))
			snprintf(why, sizeof(why), "step %d: reject data of %zu bytes arrived as %zu bytes%s",
				 step, rlen, ev.len, ev.len == rlen ? ", not byte for byte" : ""),
				r = T_FAIL;
		else
			printf("  reject_data: %zu bytes arrived with FI_ECONNREFUSED\n", rlen);
		if (r == T_PASS && iwarp) {
			/* The refused endpoint says so at once; a new one goes on. */
			uint8_t data[256];
			size_t n = connect_data(data, T_REJECT_DATA, step, NULL, 0);
			ssize_t rc = fi_connect(e.ep, info->dest_addr, data, n);
			if (rc != -FI_EOPBADSTATE)
				snprintf(why, sizeof(why), "iWARP: a refused endpoint's fi_connect: %zd, expected -FI_EOPBADSTATE",
					 rc),
					r = T_FAIL;
			close_end(&e);
		}
	}
	if (r == T_PASS) {
		/* The same endpoint, now accepted. */
		struct event ev;
		r = client_connect(&e, T_REJECT_DATA, STEPS, NULL, 0, &ev);
		if (r == T_PASS)
			r = connected(&ev, "the refused endpoint connecting again");
		if (r == T_PASS)
			r = client_shutdown(&e);
		if (r == T_PASS)
			printf("  reject_data: %s connected on its next fi_connect\n",
			       iwarp ? "a new endpoint (iWARP)" : "the refused endpoint");
	}
	close_end(&e);
	return r;
}

static const size_t msg_sizes[] = { 1, 64, 4096, 65536, MiB };
#define N_MSG (int)(sizeof(msg_sizes) / sizeof(msg_sizes[0]))

/* Connects and returns the peer's region from the accept data. */
static int connect_with_regions(struct end *e, int test, struct region *peer)
{
	struct region mine = my_region();
	struct event ev;
	RUN(client_connect(e, test, 0, &mine, sizeof(mine), &ev));
	RUN(connected(&ev, "connect"));
	if (ev.len != sizeof(*peer))
		FAIL("accept data of %zu bytes, expected the server's region (%zu)", ev.len, sizeof(*peer));
	memcpy(peer, ev.data, sizeof(*peer));
	return T_PASS;
}

static int c_messages_body(struct end *e)
{
	struct region peer;
	RUN(connect_with_regions(e, T_MESSAGES, &peer));
	for (int k = 0; k < N_MSG; k++) {
		size_t len = msg_sizes[k];
		struct fi_context2 sctx, rctx;
		uint8_t *dst = buf + 2 * MiB;
		memset(dst, GUARD, len + GUARD_LEN);
		TRY(fi_recv(e->ep, dst, len + GUARD_LEN, desc(), 0, &rctx));
		fill(buf, len, (unsigned)k + 1);
		TRY(fi_send(e->ep, buf, len, desc(), 0, &sctx));
		void *ctxs[2] = { &sctx, &rctx };
		struct comp c[2];
		char what[64];
		snprintf(what, sizeof(what), "message of %zu bytes and its answer", len);
		RUN(expect_comps(e, ctxs, c, 2, what));
		if (!(c[1].e.flags & FI_RECV) || c[1].e.len != len)
			FAIL("answer to %zu bytes: flags 0x%llx, length %zu", len,
			     (unsigned long long)c[1].e.flags, c[1].e.len);
		RUN(check_data("answer", dst, len, (unsigned)k + 201, GUARD_LEN));
	}
	RUN(expect_cq_empty(e, "after the messages"));
	RUN(client_shutdown(e));
	printf("  messages: %d sizes from 1 B to 1 MiB each way, every byte checked\n", N_MSG);
	return T_PASS;
}

static int c_messages(void)
{
	struct end e = { 0 };
	int r = c_messages_body(&e);
	close_end(&e);
	return r;
}

/* The server's region: where the client's writes land, and what it reads. */
static const struct {
	size_t off, len;
} writes[] = { { 0, 1 }, { 4096, 4096 }, { 65536, MiB } };
#define N_WRITES 3
#define WRITEDATA_OFF (2 * MiB)
#define WRITEDATA_LEN 256
#define READ_OFF (3 * MiB)
#define NOTICE_OFF (4 * MiB)
#define BACK_OFF (MiB + MiB / 2)  /* where the server writes into the client */
#define BACK_LEN 65536
#define WRITE_SEED 31
#define READ_SEED 77
#define BACK_SEED 88

static uint64_t data_value(void)
{
	uint64_t v = 0x5eedc0ffee123457ull;
	return cq_data_size >= 8 ? v : v & ((1ull << (8 * cq_data_size)) - 1);
}

static int c_rma_body(struct end *e)
{
	struct region peer;
	memset(buf + BACK_OFF, GUARD, BACK_LEN + GUARD_LEN);
	RUN(connect_with_regions(e, T_RMA, &peer));
	struct fi_context2 ctx[N_WRITES + 4];
	void *ctxs[N_WRITES + 4];
	int n = N_WRITES + 3;
	fill(buf, MiB, WRITE_SEED);
	uint8_t *verdict = buf + 2 * MiB, *notice = buf + 2 * MiB + 4096;
	*verdict = 0xff;
	*notice = 0x5a;
	TRY(fi_recv(e->ep, verdict, 64, desc(), 0, &ctx[N_WRITES + 2]));
	for (int i = 0; i < N_WRITES; i++) {
		TRY(fi_write(e->ep, buf, writes[i].len, desc(), 0, peer.addr + writes[i].off, peer.key,
			     &ctx[i]));
		ctxs[i] = &ctx[i];
	}
	if (cq_data_size) {
		TRY(fi_writedata(e->ep, buf, WRITEDATA_LEN, desc(), data_value(), 0,
				 peer.addr + WRITEDATA_OFF, peer.key, &ctx[N_WRITES]));
	} else {
		/* No remote CQ data here (iWARP): refused, not sent without
		 * it; a plain write and a notice stand in. */
		ssize_t rc = fi_writedata(e->ep, buf, WRITEDATA_LEN, desc(), data_value(), 0,
					  peer.addr + WRITEDATA_OFF, peer.key, &ctx[N_WRITES]);
		if (rc != -FI_EOPNOTSUPP)
			FAIL("fi_writedata with cq_data_size 0: %zd, expected -FI_EOPNOTSUPP", rc);
		TRY(fi_write(e->ep, buf, WRITEDATA_LEN, desc(), 0, peer.addr + WRITEDATA_OFF, peer.key,
			     &ctx[N_WRITES]));
		TRY(fi_send(e->ep, notice, 1, desc(), 0, &ctx[N_WRITES + 3]));
		n++;
	}
	TRY(fi_send(e->ep, notice, 1, desc(), 0, &ctx[N_WRITES + 1]));
	for (int i = N_WRITES; i < n; i++)
		ctxs[i] = &ctx[i];
	struct comp c[N_WRITES + 4];
	RUN(expect_comps(e, ctxs, c, n, "the writes, the notice and the server's verdict"));
	for (int i = 0; i <= N_WRITES; i++)
		if (!(c[i].e.flags & FI_WRITE) || !(c[i].e.flags & FI_RMA))
			FAIL("write %d completed with flags 0x%llx", i, (unsigned long long)c[i].e.flags);
	if (c[N_WRITES + 2].e.len != 1 || *verdict != 0)
		FAIL("the server found the written bytes wrong (verdict %u, %zu bytes; see its output)",
		     *verdict, c[N_WRITES + 2].e.len);
	/* The server wrote into this side before it sent its verdict. */
	RUN(check_data("the server's RDMA write", buf + BACK_OFF, BACK_LEN, BACK_SEED, GUARD_LEN));
	/* Reads of what the server filled before its verdict. */
	uint8_t *dst = buf + READ_OFF, *one = buf + 2 * MiB + 8192;
	memset(dst, GUARD, MiB + GUARD_LEN);
	memset(one, GUARD, 1 + GUARD_LEN);
	TRY(fi_read(e->ep, dst, MiB, desc(), 0, peer.addr + READ_OFF, peer.key, &ctx[0]));
	TRY(fi_read(e->ep, one, 1, desc(), 0, peer.addr + READ_OFF, peer.key, &ctx[1]));
	RUN(expect_comps(e, ctxs, c, 2, "the RDMA reads"));
	for (int i = 0; i < 2; i++)
		if (!(c[i].e.flags & FI_READ) || !(c[i].e.flags & FI_RMA))
			FAIL("read %d completed with flags 0x%llx", i, (unsigned long long)c[i].e.flags);
	RUN(check_data("RDMA read of 1 MiB", dst, MiB, READ_SEED, GUARD_LEN));
	RUN(check_data("RDMA read of 1 byte", one, 1, READ_SEED, GUARD_LEN));
	RUN(expect_cq_empty(e, "after the RMA"));
	RUN(client_shutdown(e));
	printf("  rma: writes of 1 B, 4 KiB and 1 MiB, a write with CQ data, the server's 64 KiB write back, reads of 1 MiB and 1 B\n");
	return T_PASS;
}

static int c_rma(void)
{
	struct end e = { 0 };
	int r = c_rma_body(&e);
	close_end(&e);
	return r;
}

static int c_shutdown_body(struct end *e)
{
	struct region peer;
	RUN(connect_with_regions(e, T_SHUTDOWN, &peer));
	/* The client's own posted receives are flushed too. */
	struct fi_context2 rctx[4];
	for (int i = 0; i < 4; i++)
		TRY(fi_recv(e->ep, buf + 64 * i, 64, desc(), 0, &rctx[i]));
	RUN(client_shutdown(e));
	bool seen[4] = { false };
	for (int i = 0; i < 4; i++) {
		struct comp c;
		RUN(next_comp(e, &c, "the client's flushed receives"));
		size_t idx = (struct fi_context2 *)c.e.op_context - rctx;
		if (!c.is_err || c.err != FI_ECANCELED || idx >= 4 || seen[idx])
			FAIL("flushed receive %d: %s, context %p", i,
			     c.is_err ? fi_strerror(c.err) : "a success", c.e.op_context);
		seen[idx] = true;
	}
	RUN(expect_cq_empty(e, "after the flush"));
	ssize_t rc = fi_send(e->ep, buf, 8, desc(), 0, NULL);
	if (rc != -FI_ENOTCONN)
		FAIL("fi_send after fi_shutdown: %zd, expected -FI_ENOTCONN", rc);
	printf("  shutdown: 4 local receives flushed with FI_ECANCELED, fi_send -FI_ENOTCONN\n");
	return T_PASS;
}

static int c_shutdown(void)
{
	struct end e = { 0 };
	int r = c_shutdown_body(&e);
	close_end(&e);
	return r;
}

/* The client's halves, named as names[] names their tests. */
static const struct nd_subtest subtests[] = {
	{ "connect_data", c_connect_data },
	{ "reject_data", c_reject_data },
	{ "messages", c_messages },
	{ "rma", c_rma },
	{ "shutdown", c_shutdown },
};
static struct nd_suite suite = { ND_SUITE(subtests), .timing = ND_TIME_MS };

/* ---- the server's halves: each gets the request and answers it ---- */

/* Accepts REQ on a fresh endpoint with the given accept data, after
 * RECVS receives (of LEN bytes at OFF, OFF + LEN, ...) are posted. */
static int accept_request(struct end *e, struct event *req, const void *data, size_t len)
{
	open_end(e, req->info);
	fi_freeinfo(req->info);
	req->info = NULL;
	TRY(fi_accept(e->ep, data, len));
	struct event ev;
	RUN(expect_event(&ev, FI_CONNECTED, &e->ep->fid, "FI_CONNECTED on the accepting side"));
	return T_PASS;
}

/* The client's fi_shutdown reaches this side once. */
static int await_shutdown(struct end *e)
{
	struct event ev;
	RUN(expect_event(&ev, FI_SHUTDOWN, &e->ep->fid, "FI_SHUTDOWN from the client"));
	return T_PASS;
}

static int s_connect_data(struct end *e, struct event *req, int step)
{
	size_t clen = lengths(cm_limit - sizeof(struct hdr), step);
	size_t alen = lengths(accept_limit, step);
	uint8_t want[256], adata[256];
	fill(want, clen, (unsigned)step);
	if (req->len != sizeof(struct hdr) + clen || memcmp(req->data + sizeof(struct hdr), want, clen)) {
		snprintf(why, sizeof(why), "step %d: connect data of %zu bytes arrived as %zu", step,
			 sizeof(struct hdr) + clen, req->len);
		fi_reject(pep, req->info->handle, why, strlen(why) < reject_limit ? strlen(why) : reject_limit);
		return T_FAIL;
	}
	struct sockaddr_in *from = (struct sockaddr_in *)req->info->dest_addr;
	char ip[INET_ADDRSTRLEN] = "?";
	if (from && req->info->dest_addrlen >= sizeof(*from))
		inet_ntop(AF_INET, &from->sin_addr, ip, sizeof(ip));
	if (step == 0)
		printf("  server: requests come from %s\n", ip);
	fill(adata, alen, (unsigned)step + 50);
	RUN(accept_request(e, req, adata, alen));
	RUN(await_shutdown(e));
	return T_PASS;
}

static int s_reject_data(struct end *e, struct event *req, int step)
{
	if (step == STEPS) {
		RUN(accept_request(e, req, NULL, 0));
		RUN(await_shutdown(e));
		return T_PASS;
	}
	uint8_t data[256];
	size_t rlen = lengths(reject_limit, step);
	fill(data, rlen, (unsigned)step + 100);
	TRY(fi_reject(pep, req->info->handle, data, rlen));
	return T_PASS;
}

static int s_messages(struct end *e, struct event *req)
{
	struct region mine = my_region();
	struct fi_context2 rctx, sctx;
	memset(buf, GUARD, msg_sizes[0] + GUARD_LEN);
	open_end(e, req->info);
	fi_freeinfo(req->info);
	req->info = NULL;
	/* The first receive is posted before the accept: it is there when
	 * the first message comes. */
	TRY(fi_recv(e->ep, buf, msg_sizes[0] + GUARD_LEN, desc(), 0, &rctx));
	TRY(fi_accept(e->ep, &mine, sizeof(mine)));
	struct event ev;
	RUN(expect_event(&ev, FI_CONNECTED, &e->ep->fid, "FI_CONNECTED on the accepting side"));
	/* The client's next message may complete before the answer's send:
	 * the client sends it once the answer arrived, while the ACK of the
	 * answer can still be on its way (or lost, and the answer sent again
	 * on a lossy link). RC orders neither completion before the other. */
	struct comp next;
	bool have_next = false;
	for (int k = 0; k < N_MSG; k++) {
		size_t len = msg_sizes[k];
		struct comp c;
		if (have_next)
			c = next;
		else
			RUN(expect_comp(e, &rctx, &c, "the client's message"));
		if (!(c.e.flags & FI_RECV) || c.e.len != len)
			FAIL("message %d: flags 0x%llx, length %zu, expected %zu", k,
			     (unsigned long long)c.e.flags, c.e.len, len);
		RUN(check_data("the client's message", buf, len, (unsigned)k + 1, GUARD_LEN));
		if (k + 1 < N_MSG) {
			memset(buf, GUARD, msg_sizes[k + 1] + GUARD_LEN);
			TRY(fi_recv(e->ep, buf, msg_sizes[k + 1] + GUARD_LEN, desc(), 0, &rctx));
		}
		fill(buf + 2 * MiB, len, (unsigned)k + 201);
		TRY(fi_send(e->ep, buf + 2 * MiB, len, desc(), 0, &sctx));
		if (k + 1 < N_MSG) {
			void *ctxs[2] = { &sctx, &rctx };
			struct comp both[2];
			RUN(expect_comps(e, ctxs, both, 2, "the answer's send and the client's next message"));
			next = both[1];
			have_next = true;
		} else {
			RUN(expect_comp(e, &sctx, &c, "the answer's send"));
		}
	}
	RUN(await_shutdown(e));
	return T_PASS;
}

/* Checks the client's writes; the verdict the client gets is 0 when all
 * landed byte for byte. */
static int check_writes(void)
{
	for (int i = 0; i < N_WRITES; i++) {
		if (writes[i].off >= GUARD_LEN &&
		    verify_guard(buf + writes[i].off - GUARD_LEN, GUARD_LEN) >= 0)
			FAIL("write %d: the bytes before it were overwritten", i);
		RUN(check_data("the client's RDMA write", buf + writes[i].off, writes[i].len, WRITE_SEED,
			       GUARD_LEN));
	}
	RUN(check_data("the client's write with CQ data", buf + WRITEDATA_OFF, WRITEDATA_LEN, WRITE_SEED,
		       GUARD_LEN));
	return T_PASS;
}

static int s_rma(struct end *e, struct event *req)
{
	struct region mine = my_region(), peer;
	if (req->len != sizeof(struct hdr) + sizeof(peer))
		FAIL("connect data of %zu bytes, expected the client's region", req->len);
	memcpy(&peer, req->data + sizeof(struct hdr), sizeof(peer));
	memset(buf, GUARD, READ_OFF);
	struct fi_context2 rctx[2], sctx[2];
	open_end(e, req->info);
	fi_freeinfo(req->info);
	req->info = NULL;
	/* One receive takes the write's CQ data, one the notice. */
	TRY(fi_recv(e->ep, buf + NOTICE_OFF, 64, desc(), 0, &rctx[0]));
	TRY(fi_recv(e->ep, buf + NOTICE_OFF + 64, 64, desc(), 0, &rctx[1]));
	TRY(fi_accept(e->ep, &mine, sizeof(mine)));
	struct event ev;
	RUN(expect_event(&ev, FI_CONNECTED, &e->ep->fid, "FI_CONNECTED on the accepting side"));
	void *ctxs[2] = { &rctx[0], &rctx[1] };
	struct comp c[2];
	RUN(expect_comps(e, ctxs, c, 2, "the write's CQ data and the notice"));
	/* The CQ data comes first: RC delivers in order. Without CQ data
	 * (iWARP) a second notice stands in for it. */
	if (!cq_data_size) {
		if (!(c[0].e.flags & FI_RECV) || c[0].e.len != 1 || buf[NOTICE_OFF] != 0x5a)
			FAIL("the first notice: flags 0x%llx, %zu bytes", (unsigned long long)c[0].e.flags,
			     c[0].e.len);
	} else if (!(c[0].e.flags & FI_REMOTE_CQ_DATA) || c[0].e.data != data_value())
		FAIL("the first receive: flags 0x%llx data 0x%llx, expected FI_REMOTE_CQ_DATA 0x%llx",
		     (unsigned long long)c[0].e.flags, (unsigned long long)c[0].e.data,
		     (unsigned long long)data_value());
	if (!(c[1].e.flags & FI_RECV) || c[1].e.len != 1 || buf[NOTICE_OFF + 64] != 0x5a)
		FAIL("the notice: flags 0x%llx, %zu bytes", (unsigned long long)c[1].e.flags, c[1].e.len);
	int verdict_ok = check_writes();
	if (verdict_ok != T_PASS)
		fprintf(stderr, "server: %s\n", why);
	/* Write into the client, fill what it will read, then the verdict. */
	fill(buf + READ_OFF, MiB, READ_SEED);
	uint8_t *back = buf + WRITEDATA_OFF + 4096, *verdict = buf + NOTICE_OFF + 512;
	fill(back, BACK_LEN, BACK_SEED);
	*verdict = verdict_ok == T_PASS ? 0 : 1;
	TRY(fi_write(e->ep, back, BACK_LEN, desc(), 0, peer.addr + BACK_OFF, peer.key, &sctx[0]));
	TRY(fi_send(e->ep, verdict, 1, desc(), 0, &sctx[1]));
	void *sctxs[2] = { &sctx[0], &sctx[1] };
	RUN(expect_comps(e, sctxs, c, 2, "the write back and the verdict"));
	RUN(await_shutdown(e));
	return verdict_ok;
}

static int s_shutdown(struct end *e, struct event *req)
{
	struct region mine = my_region();
	enum { K = 16 };
	struct fi_context2 rctx[K];
	open_end(e, req->info);
	fi_freeinfo(req->info);
	req->info = NULL;
	for (int i = 0; i < K; i++)
		TRY(fi_recv(e->ep, buf + 64 * i, 64, desc(), 0, &rctx[i]));
	TRY(fi_accept(e->ep, &mine, sizeof(mine)));
	struct event ev;
	RUN(expect_event(&ev, FI_CONNECTED, &e->ep->fid, "FI_CONNECTED on the accepting side"));
	RUN(await_shutdown(e));
	bool seen[K] = { false };
	for (int i = 0; i < K; i++) {
		struct comp c;
		RUN(next_comp(e, &c, "the receives flushed by the peer's shutdown"));
		size_t idx = (struct fi_context2 *)c.e.op_context - rctx;
		if (!c.is_err || c.err != FI_ECANCELED || idx >= K || seen[idx])
			FAIL("flushed receive %d of %d: %s, context %p", i + 1, K,
			     c.is_err ? fi_strerror(c.err) : "a success", c.e.op_context);
		if ((c.e.flags & (FI_RECV | FI_MSG)) != (FI_RECV | FI_MSG))
			FAIL("flushed receive %d: flags 0x%llx", i + 1, (unsigned long long)c.e.flags);
		seen[idx] = true;
	}
	RUN(expect_cq_empty(e, "after the flush"));
	ssize_t rc = fi_recv(e->ep, buf, 8, desc(), 0, NULL);
	if (rc != -FI_ENOTCONN)
		FAIL("fi_recv after the peer's shutdown: %zd, expected -FI_ENOTCONN", rc);
	printf("  server: %d receives flushed with FI_ECANCELED by the peer's fi_shutdown\n", K);
	return T_PASS;
}

static int serve(const char *local, const char *service)
{
	open_common(local, service, true);
	CHECK(fi_passive_ep(fabric, info, &pep, NULL));
	CHECK(fi_pep_bind(pep, &eq->fid, 0));
	CHECK(fi_listen(pep));
	size_t len = sizeof(size_t);
	if (!strcmp(prov, "nd")) {
		CHECK(fi_getopt(&pep->fid, FI_OPT_ENDPOINT, FI_OPT_ND_ACCEPT_DATA_SIZE, &accept_limit, &len));
		len = sizeof(size_t);
		CHECK(fi_getopt(&pep->fid, FI_OPT_ENDPOINT, FI_OPT_ND_REJECT_DATA_SIZE, &reject_limit, &len));
	}
	struct end probe = { 0 };
	open_end(&probe, info);
	len = sizeof(size_t);
	CHECK(fi_getopt(&probe.ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &cm_limit, &len));
	close_end(&probe);
	if (strcmp(prov, "nd"))
		accept_limit = reject_limit = cm_limit;
	/* What fits the subtests' buffers (and the hello's 12 bytes). */
	if (accept_limit > 255)
		accept_limit = 255;
	if (reject_limit > 255)
		reject_limit = 255;
	printf("nd_pair_tests: listening (%s on %s, port %s); connect/accept/reject data up to %zu/%zu/%zu bytes\n",
	       prov, info->domain_attr->name, service, cm_limit, accept_limit, reject_limit);
	fflush(stdout);
	int failed = 0;
	for (;;) {
		struct event req;
		int r = next_event(&req, IDLE_MS, "the next request");
		if (r == T_PASS && (req.err || req.type != FI_CONNREQ))
			snprintf(why, sizeof(why), "event %u (error %d) while waiting for a request", req.type,
				 req.err),
				r = T_FAIL;
		if (r != T_PASS) {
			printf("FAIL: server: %s\n", why);
			failed++;
			break;
		}
		struct hdr h = { 0 };
		if (req.len >= sizeof(h))
			memcpy(&h, req.data, sizeof(h));
		if (h.magic != MAGIC || h.test >= T_COUNT) {
			printf("FAIL: server: a request with %zu bytes of unknown connect data\n", req.len);
			fi_reject(pep, req.info->handle, NULL, 0);
			fi_freeinfo(req.info);
			failed++;
			continue;
		}
		if (h.test == T_END || h.test == T_HELLO) {
			uint32_t limits[3] = { (uint32_t)cm_limit, (uint32_t)accept_limit,
					       (uint32_t)reject_limit };
			int rc = fi_reject(pep, req.info->handle, h.test == T_HELLO ? limits : NULL,
					   h.test == T_HELLO ? sizeof(limits) : 0);
			fi_freeinfo(req.info);
			if (rc) {
				printf("FAIL: server: fi_reject: %s\n", fi_strerror(-rc));
				failed++;
			}
			if (h.test == T_END)
				break;
			continue;
		}
		struct end e = { 0 };
		why[0] = 0;
		switch (h.test) {
		case T_CONNECT_DATA: r = s_connect_data(&e, &req, h.step); break;
		case T_REJECT_DATA: r = s_reject_data(&e, &req, h.step); break;
		case T_MESSAGES: r = s_messages(&e, &req); break;
		case T_RMA: r = s_rma(&e, &req); break;
		default: r = s_shutdown(&e, &req); break;
		}
		if (req.info)
			fi_freeinfo(req.info);
		close_end(&e);
		if (r != T_PASS) {
			printf("FAIL: server: %s (step %d): %s\n", names[h.test], h.step, why);
			failed++;
		} else if (h.step == 0 || h.test == T_REJECT_DATA) {
			printf("server ok: %s step %d\n", names[h.test], h.step);
		}
		fflush(stdout);
	}
	close_common();
	printf("nd_pair_tests: server done, %d failed\n", failed);
	return failed ? 1 : 0;
}

static int client(const char *server, const char *service)
{
	open_common(server, service, false);
	struct end probe = { 0 };
	open_end(&probe, info);
	size_t len = sizeof(size_t);
	CHECK(fi_getopt(&probe.ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &cm_limit, &len));
	close_end(&probe);
	struct sockaddr_in *to = (struct sockaddr_in *)info->dest_addr;
	char ip[INET_ADDRSTRLEN] = "?";
	inet_ntop(AF_INET, &to->sin_addr, ip, sizeof(ip));
	/* The accepting and refusing side's limits, as the server reads them:
	 * its reply to the first request. */
	struct end hello = { 0 };
	struct event ev;
	uint32_t limits[3];
	if (client_connect(&hello, T_HELLO, 0, NULL, 0, &ev) != T_PASS) {
		printf("FAIL: no answer from the server at %s port %u: %s\n", ip, ntohs(to->sin_port), why);
		return 1;
	}
	close_end(&hello);
	if (ev.err != FI_ECONNREFUSED || ev.len != sizeof(limits)) {
		printf("FAIL: the server's first answer: %s with %zu bytes, expected FI_ECONNREFUSED with its limits\n",
		       ev.err ? fi_strerror(ev.err) : "no error", ev.len);
		return 1;
	}
	memcpy(limits, ev.data, sizeof(limits));
	if (limits[0] != cm_limit)
		printf("# the server's connect data limit is %u, this side's %zu\n", limits[0], cm_limit);
	cm_limit = limits[0] < cm_limit ? limits[0] : cm_limit;
	accept_limit = limits[1];
	reject_limit = limits[2];
	printf("# %s on %s, connecting to %s port %u; connect/accept/reject data up to %zu/%zu/%zu bytes\n",
	       prov, info->domain_attr->name, ip, ntohs(to->sin_port), cm_limit, accept_limit, reject_limit);
	int status = nd_run_subtests(&suite), failed = 0;
	/* Tells the server to stop. */
	struct end e = { 0 };
	if (client_connect(&e, T_END, 0, NULL, 0, &ev) != T_PASS || ev.err != FI_ECONNREFUSED) {
		printf("FAIL: the server did not take the closing request: %s\n", why);
		failed++;
	}
	close_end(&e);
	close_common();
	if (status == 2)
		return nd_check_only(&suite);
	return status || failed ? 1 : 0;
}

/* The program's own options. */
static struct {
	const char *server, *service;
	bool is_server;
} args = { .service = "9260" };

static int option(int opt, const char *arg)
{
	switch (opt) {
	case 's': args.is_server = true; return 0;
	case 'c': args.server = arg; return 0;
	case 'P': args.service = arg; return 0;
	}
	return -1;
}

int main(int argc, char **argv)
{
	const char *local = NULL;
	const struct nd_cli cli = { .optstring = "p:sc:a:P:t:", .prov = &prov, .address = &local,
				    .suite = &suite, .option = option,
				    .usage = "usage: %s [-p PROV] (-s [-a LOCAL] | -c SERVER [-t SUBTEST]) [-P PORT]\n" };
	if (nd_parse_options(&cli, argc, argv))
		return 2;
	if (args.is_server == (args.server != NULL)) {
		fprintf(stderr, "nd_pair_tests: one of -s and -c\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	return args.is_server ? serve(local, args.service) : client(args.server, args.service);
}
