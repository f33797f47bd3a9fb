/*
 * nd_msg_tests: data-path conformance tests for FI_EP_MSG endpoints, server
 * and client in one process on one device, for any provider (-p nd,
 * -p verbs), written against the plain libfabric API only.
 *
 * Why it exists beside the Criterion device tests (prov/nd/test/guest_*.cpp),
 * which test the same subjects in more depth: those hold nd to its own
 * contract (ND's semantics, nd's extension, fi_nd(7)) and run on nd alone;
 * this one checks only what the libfabric man pages promise of every
 * provider, so the same program runs against the verbs provider on the same
 * boot (a difference between the two is a finding), as fabtests do.
 *
 *   nd_msg_tests [-p PROVIDER] [-a ADDRESS] [-t SUBTEST] [-l|-L] [-v] [-h]
 *
 * A passive endpoint listens on ADDRESS (default $ND_GUEST_IP or
 * 10.0.2.15, port 0, then fi_getname); each subtest connects a fresh client
 * endpoint to it and accepts it, both with their own completion queue
 * (FI_CQ_FORMAT_DATA, bound FI_TRANSMIT | FI_RECV) and one event queue for
 * everything. Without -t every subtest runs; -t NAME runs one. Each prints
 * "PASS: name", "SKIP: name: why" or "FAIL: name: why"; the exit status is
 * 1 when any failed, 2 for a usage error, 0 otherwise.
 *
 * The tests assert outcomes: received bytes are compared byte by byte with
 * the pattern sent (and the bytes after them with the guard they must keep),
 * completions are counted exactly (each expected one seen once with its
 * op_context, flags and length checked, none unexpected), and every wait is
 * bounded (WAIT_MS; a timeout is a failure with a message).
 *
 * mr_mode is honoured: FI_MR_LOCAL passes fi_mr_desc() with every buffer,
 * FI_MR_VIRT_ADDR addresses remote memory by virtual address (by offset
 * otherwise), FI_MR_PROV_KEY takes keys from fi_mr_key(). Operation
 * contexts are always struct fi_context2, so FI_CONTEXT/FI_CONTEXT2 modes
 * are tolerated; FI_RX_CQ_DATA is met by always posting a receive for
 * remote CQ data.
 *
 * -l (lax) reports checks that libfabric's verbs provider is known not to
 * make as SKIP instead of FAIL; it is on by default when PROVIDER starts
 * with "verbs"; -L turns it off. Each such check names the man page rule
 * it tests. -h lists the subtests.
 * -v prints every completion read.
 */
#include <arpa/inet.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "nd_subtest.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define WAIT_MS 5000	   /* longest wait for any completion or event */
#define QUIET_MS 200	   /* how long "no completion appears" is watched */
#define BUF_SIZE (9u << 20) /* per side: 8 MiB messages plus guard room */
#define QMAX 8192	   /* completions buffered per side */
#define MAX_IOV 64

struct comp {
	bool is_err;
	struct fi_cq_data_entry e;
	struct fi_cq_err_entry err;
};

struct side {
	const char *name;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct comp q[QMAX];
	int head, tail;
	uint8_t *buf;	   /* this side's registered buffer */
	struct fid_mr *mr;
	int cq_failed;	   /* fi_cq_read returned an unexpected error */
};

struct conn {
	struct side client, server;
	bool up;
};

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_eq *eq;
static struct fid_pep *pep;
static struct fi_info *info, *client_info;
static struct sockaddr_storage listen_addr;
static uint8_t *cbuf, *sbuf;
static struct fid_mr *cmr, *smr;
static uint64_t mr_mode;
static size_t max_msg, inject_size, tx_iov_limit, rx_iov_limit, rma_iov_limit, cq_data_size;
/* iWARP adapters may read into fewer buffers than they send from
 * (max_sge_rd; soft-iWARP: 1), which nd refuses rather than truncates. */
static int iwarp;
static size_t tx_size, rx_size;
static bool lax, verbose;
static const char *prov = "nd";

/* ---- memory registration ---- */

static void *desc_of(struct fid_mr *mr)
{
	return (mr_mode & FI_MR_LOCAL) ? fi_mr_desc(mr) : NULL;
}

static void *cdesc(void) { return desc_of(cmr); }
static void *sdesc(void) { return desc_of(smr); }

/* Remote address of OFFSET into the server's buffer. */
static uint64_t raddr(const uint8_t *base, size_t offset)
{
	return (mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)(base + offset) : offset;
}

static uint64_t skey(void) { return fi_mr_key(smr); }
static uint64_t ckey(void) { return fi_mr_key(cmr); }

static struct fid_mr *reg(void *buf, size_t len, uint64_t requested_key)
{
	struct fid_mr *mr;
	CHECK(fi_mr_reg(domain, buf, len,
			FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0,
			requested_key, 0, &mr, NULL));
	return mr;
}

/* ---- completions ---- */

static const char *flag_names(uint64_t f)
{
	static char s[256];
	s[0] = 0;
	static const struct {
		uint64_t f;
		const char *n;
	} names[] = { { FI_SEND, "SEND" },   { FI_RECV, "RECV" },	     { FI_MSG, "MSG" },
		      { FI_RMA, "RMA" },     { FI_READ, "READ" },	     { FI_WRITE, "WRITE" },
		      { FI_REMOTE_READ, "REMOTE_READ" }, { FI_REMOTE_WRITE, "REMOTE_WRITE" },
		      { FI_REMOTE_CQ_DATA, "REMOTE_CQ_DATA" }, { FI_MULTI_RECV, "MULTI_RECV" },
		      { FI_TAGGED, "TAGGED" } };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (f & names[i].f) {
			strcat(s, s[0] ? "|" : "");
			strcat(s, names[i].n);
		}
	if (!s[0])
		strcpy(s, "0");
	return s;
}

static void poll_side(struct side *s)
{
	struct fi_cq_data_entry e[16];
	if (!s->cq)
		return;
	for (;;) {
		ssize_t n = fi_cq_read(s->cq, e, 16);
		if (n > 0) {
			for (ssize_t i = 0; i < n; i++) {
				struct comp *c = &s->q[s->tail++ % QMAX];
				memset(c, 0, sizeof(*c));
				c->e = e[i];
				if (verbose)
					fprintf(stderr, "  %s cq: ctx %p flags %s len %zu data 0x%llx\n",
						s->name, e[i].op_context, flag_names(e[i].flags),
						e[i].len, (unsigned long long)e[i].data);
			}
			continue;
		}
		if (n == -FI_EAVAIL) {
			struct comp *c = &s->q[s->tail++ % QMAX];
			memset(c, 0, sizeof(*c));
			c->is_err = true;
			ssize_t r = fi_cq_readerr(s->cq, &c->err, 0);
			if (r < 0) {
				s->tail--;
				s->cq_failed = (int)r;
				return;
			}
			c->e.op_context = c->err.op_context;
			c->e.flags = c->err.flags;
			c->e.len = c->err.len;
			c->e.data = c->err.data;
			if (verbose)
				fprintf(stderr, "  %s cq error: ctx %p flags %s err %d (%s) prov_errno %d\n",
					s->name, c->err.op_context, flag_names(c->err.flags),
					c->err.err, fi_strerror(c->err.err), c->err.prov_errno);
			continue;
		}
		if (n != -FI_EAGAIN)
			s->cq_failed = (int)n;
		return;
	}
}

static void poll_both(struct conn *c)
{
	poll_side(&c->client);
	poll_side(&c->server);
}

/* Waits up to WAIT_MS for the next completion (or error entry) of S. */
static int next_comp(struct conn *c, struct side *s, struct comp *out, const char *waiting_for)
{
	double end = now_ms() + WAIT_MS;
	for (;;) {
		poll_both(c);
		if (s->cq_failed)
			FAIL("%s: fi_cq_read on the %s CQ: %s", waiting_for, s->name,
			     fi_strerror(-s->cq_failed));
		if (s->head != s->tail) {
			*out = s->q[s->head++ % QMAX];
			return T_PASS;
		}
		if (now_ms() > end)
			FAIL("timeout: no completion on the %s CQ within %d ms (%s)", s->name, WAIT_MS,
			     waiting_for);
		sched_yield();
	}
}

/* Waits for a successful completion of S with context CTX and FLAGS set
 * (and LEN when LEN != (size_t)-1). */
static int expect_comp(struct conn *c, struct side *s, void *ctx, uint64_t flags, size_t len,
		       const char *what, struct comp *got)
{
	struct comp x;
	RUN(next_comp(c, s, &x, what));
	if (x.is_err)
		FAIL("%s: error completion on %s: %s (err %d, prov_errno %d, ctx %p)", what,
		     s->name, fi_strerror(x.err.err), x.err.err, x.err.prov_errno, x.err.op_context);
	if (x.e.op_context != ctx)
		FAIL("%s: completion on %s has op_context %p, expected %p", what, s->name,
		     x.e.op_context, ctx);
	if ((x.e.flags & flags) != flags)
		FAIL("%s: completion flags %s lack %s", what, flag_names(x.e.flags),
		     flag_names(flags & ~x.e.flags));
	if (len != (size_t)-1 && x.e.len != len)
		FAIL("%s: completion len %zu, expected %zu", what, x.e.len, len);
	if (got)
		*got = x;
	return T_PASS;
}

/* No completion may appear on S for QUIET_MS. */
static int expect_quiet(struct conn *c, struct side *s, const char *what)
{
	double end = now_ms() + QUIET_MS;
	while (now_ms() < end) {
		poll_both(c);
		if (s->head != s->tail) {
			struct comp *x = &s->q[s->head % QMAX];
			FAIL("%s: unexpected %scompletion on %s: ctx %p flags %s len %zu%s%s", what,
			     x->is_err ? "error " : "", s->name, x->e.op_context,
			     flag_names(x->e.flags), x->e.len, x->is_err ? " err " : "",
			     x->is_err ? fi_strerror(x->err.err) : "");
		}
		sched_yield();
	}
	return T_PASS;
}

/* ---- events and connections ---- */

struct event {
	uint32_t type;
	struct fi_eq_cm_entry entry;
	uint8_t data[256];
};

/* Waits for the next EQ event about one of the FIDS (others are stale
 * events of earlier connections and are dropped); polls C's CQs meanwhile. */
static int wait_event(struct conn *c, fid_t *fids, int nfids, struct event *ev, const char *what)
{
	double end = now_ms() + WAIT_MS;
	for (;;) {
		ssize_t rc = fi_eq_sread(eq, &ev->type, &ev->entry, sizeof(ev->entry) + sizeof(ev->data),
					 50, 0);
		if (rc == -FI_EAVAIL) {
			struct fi_eq_err_entry err = { 0 };
			fi_eq_readerr(eq, &err, 0);
			for (int i = 0; i < nfids; i++)
				if (err.fid == fids[i])
					FAIL("%s: EQ error: %s (prov_errno %d)", what,
					     fi_strerror(err.err), err.prov_errno);
		} else if (rc >= 0) {
			for (int i = 0; i < nfids; i++)
				if (ev->entry.fid == fids[i])
					return T_PASS;
			if (ev->type == FI_CONNREQ)
				fi_freeinfo(ev->entry.info);
		} else if (rc != -FI_EAGAIN && rc != -FI_ETIMEDOUT) {
			FAIL("%s: fi_eq_sread: %s", what, fi_strerror((int)-rc));
		}
		if (c)
			poll_both(c);
		if (now_ms() > end)
			FAIL("timeout: no EQ event within %d ms (%s)", WAIT_MS, what);
	}
}

static int open_side(struct side *s, struct fi_info *from, uint64_t cq_flags)
{
	struct fi_cq_attr attr = { .format = FI_CQ_FORMAT_DATA,
				   .size = 3 * tx_size + rx_size + 128, /* eagain's sends */
				   .wait_obj = FI_WAIT_NONE };
	TRY(fi_endpoint(domain, from, &s->ep, NULL));
	TRY(fi_ep_bind(s->ep, &eq->fid, 0));
	TRY(fi_cq_open(domain, &attr, &s->cq, NULL));
	TRY(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV | cq_flags));
	TRY(fi_enable(s->ep));
	return T_PASS;
}

static void close_side(struct side *s)
{
	if (s->ep)
		fi_close(&s->ep->fid);
	if (s->cq)
		fi_close(&s->cq->fid);
	s->ep = NULL;
	s->cq = NULL;
}

static void conn_close(struct conn *c)
{
	close_side(&c->client);
	close_side(&c->server);
	free(c);
}

/* Opens a connected pair; CLIENT_CQ_FLAGS are added to the client's CQ bind. */
static int conn_open(struct conn **out, uint64_t client_cq_flags)
{
	struct conn *c = calloc(1, sizeof(*c));
	*out = c;
	c->client.name = "client";
	c->server.name = "server";
	c->client.buf = cbuf;
	c->client.mr = cmr;
	c->server.buf = sbuf;
	c->server.mr = smr;
	struct fi_info *ci = fi_dupinfo(client_info);
	if (client_cq_flags & FI_SELECTIVE_COMPLETION)
		ci->tx_attr->op_flags &= ~FI_COMPLETION;
	int rc = open_side(&c->client, ci, client_cq_flags);
	fi_freeinfo(ci);
	RUN(rc);
	TRY(fi_connect(c->client.ep, &listen_addr, NULL, 0));
	struct event ev;
	fid_t pfid = &pep->fid;
	RUN(wait_event(NULL, &pfid, 1, &ev, "FI_CONNREQ"));
	if (ev.type != FI_CONNREQ)
		FAIL("expected FI_CONNREQ, got event %u", ev.type);
	rc = open_side(&c->server, ev.entry.info, 0);
	fi_freeinfo(ev.entry.info);
	RUN(rc);
	TRY(fi_accept(c->server.ep, NULL, 0));
	bool cup = false, sup = false;
	fid_t fids[2] = { &c->client.ep->fid, &c->server.ep->fid };
	while (!cup || !sup) {
		RUN(wait_event(NULL, fids, 2, &ev, "FI_CONNECTED"));
		if (ev.type != FI_CONNECTED)
			FAIL("expected FI_CONNECTED, got event %u", ev.type);
		if (ev.entry.fid == fids[0])
			cup = true;
		else
			sup = true;
	}
	c->up = true;
	return T_PASS;
}

/* Posts a receive of LEN bytes at OFF of the server's (or client's) buffer,
 * after filling LEN + GUARD_LEN bytes there with the guard. */
static int post_recv(struct side *s, size_t off, size_t len, size_t guard_len, void *ctx)
{
	memset(s->buf + off, GUARD, len + guard_len);
	TRY(fi_recv(s->ep, s->buf + off, len, desc_of(s->mr), 0, ctx));
	return T_PASS;
}

/* A call that must be rejected returned RC: -FI_EAGAIN asks the caller to
 * retry and is no rejection; in lax mode that is a SKIP (printed, counted
 * in LAX_SKIPS), otherwise a failure. RULE names the man page rule. */
static int lax_skips;
static int rejected(const char *test, const char *what, const char *rule, ssize_t rc)
{
	if (rc < 0 && rc != -FI_EAGAIN) {
		printf("  %s: %s\n", what, fi_strerror((int)-rc));
		return T_PASS;
	}
	const char *how = rc == -FI_EAGAIN ? "returned -FI_EAGAIN (retry), not a permanent error"
					   : "accepted (returned 0)";
	if (lax) {
		printf("SKIP: %s: %s: %s; %s\n", test, what, how, rule);
		lax_skips++;
		return T_PASS;
	}
	FAIL("%s: %s; expected a negative -FI_E* code other than -FI_EAGAIN (%s)", what, how, rule);
}

/* ---- subtests ---- */

/* One send of LEN bytes from A to B, both buffers at offset 0. */
static int one_message(struct conn *c, struct side *a, struct side *b, size_t len, unsigned seed)
{
	struct fi_context2 rctx, sctx;
	size_t guard = len + 64 <= BUF_SIZE ? 64 : BUF_SIZE - len;
	RUN(post_recv(b, 0, len, guard, &rctx));
	fill(a->buf, len, seed);
	TRY(fi_send(a->ep, a->buf, len, desc_of(a->mr), 0, &sctx));
	char what[64];
	snprintf(what, sizeof(what), "%zu-byte receive at %s", len, b->name);
	RUN(expect_comp(c, b, &rctx, FI_RECV | FI_MSG, len, what, NULL));
	snprintf(what, sizeof(what), "%zu-byte send from %s", len, a->name);
	RUN(expect_comp(c, a, &sctx, FI_SEND | FI_MSG, (size_t)-1, what, NULL));
	snprintf(what, sizeof(what), "%zu bytes received at %s", len, b->name);
	return check_data(what, b->buf, len, seed, guard);
}

static int t_pingpong(struct conn *c)
{
	size_t sizes[64];
	int n = 0;
	for (size_t s = 1; s <= (1u << 20); s *= 2)
		sizes[n++] = s;
	sizes[n++] = 3;
	sizes[n++] = 1000;
	sizes[n++] = 65537;
	sizes[n++] = max_msg <= BUF_SIZE - 64 ? max_msg : 0;
	int done = 0;
	for (int i = 0; i < n; i++) {
		if (!sizes[i] || sizes[i] > max_msg)
			continue;
		for (int round = 0; round < 2; round++) {
			RUN(one_message(c, &c->client, &c->server, sizes[i], 2 * i + round));
			RUN(one_message(c, &c->server, &c->client, sizes[i], 100 + 2 * i + round));
		}
		done++;
	}
	RUN(expect_quiet(c, &c->client, "after ping-pong"));
	RUN(expect_quiet(c, &c->server, "after ping-pong"));
	printf("  pingpong: %d sizes up to %zu bytes (max_msg_size %zu), 2 round trips each\n",
	       done, max_msg < (1u << 20) ? max_msg : (max_msg <= BUF_SIZE - 64 ? max_msg : 1u << 20),
	       max_msg);
	return T_PASS;
}

static int t_bandwidth(struct conn *c)
{
	size_t window = 64;
	if (window > tx_size)
		window = tx_size;
	if (window > rx_size)
		window = rx_size;
	const size_t sizes[] = { 64, 4096, 65536 };
	struct fi_context2 rctx[64], sctx[64];
	for (size_t si = 0; si < 3; si++) {
		size_t len = sizes[si];
		if (len > max_msg)
			continue;
		size_t stride = len + 64;
		for (size_t i = 0; i < window; i++)
			RUN(post_recv(&c->server, i * stride, len, 64, &rctx[i]));
		for (size_t i = 0; i < window; i++) {
			fill(cbuf + i * stride, len, 1000 + si * 100 + i);
			ssize_t rc = fi_send(c->client.ep, cbuf + i * stride, len, cdesc(), 0, &sctx[i]);
			/* iWARP: until the server's count of receives arrives (an
			 * RDMA write), a send has no credit: -FI_EAGAIN, then it
			 * goes (fi_nd(7), iWARP). */
			double until = now_ms() + WAIT_MS;
			while (rc == -FI_EAGAIN && iwarp && now_ms() < until) {
				poll_both(c);
				rc = fi_send(c->client.ep, cbuf + i * stride, len, cdesc(), 0, &sctx[i]);
			}
			TRY(rc);
		}
		/* Receives complete in posting order on a reliable connection
		 * (FI_ORDER_SAS applies to message matching), sends each once. */
		bool seen[64] = { false };
		for (size_t i = 0; i < window; i++) {
			struct comp x;
			RUN(next_comp(c, &c->client, &x, "window send completion"));
			if (x.is_err)
				FAIL("send error completion: %s", fi_strerror(x.err.err));
			size_t k = (struct fi_context2 *)x.e.op_context - sctx;
			if ((struct fi_context2 *)x.e.op_context < sctx || k >= window)
				FAIL("send completion with unknown context %p", x.e.op_context);
			if (seen[k])
				FAIL("send %zu completed twice", k);
			if (!(x.e.flags & FI_SEND))
				FAIL("send completion flags %s", flag_names(x.e.flags));
			seen[k] = true;
		}
		for (size_t i = 0; i < window; i++) {
			char what[64];
			snprintf(what, sizeof(what), "receive %zu of %zu (%zu bytes)", i, window, len);
			RUN(expect_comp(c, &c->server, &rctx[i], FI_RECV | FI_MSG, len, what, NULL));
			RUN(check_data(what, sbuf + i * stride, len, 1000 + si * 100 + i, 64));
		}
		RUN(expect_quiet(c, &c->client, "after the window"));
		RUN(expect_quiet(c, &c->server, "after the window"));
	}
	printf("  bandwidth: windows of %zu messages of 64, 4096, 65536 bytes\n", window);
	return T_PASS;
}

static const size_t rma_sizes[] = { 1, 8, 1000, 4096, 65536, 1u << 20 };
#define N_RMA_SIZES (sizeof(rma_sizes) / sizeof(rma_sizes[0]))

/* Splits LEN bytes into N pieces of different sizes (SKEW shifts bytes
 * between neighbours), laid out in BASE with 32-byte gaps starting at OFF;
 * fills IOV and DESC. */
static void split_iov_skew(uint8_t *base, size_t off, size_t len, size_t n, struct iovec *iov,
			   void **desc, void *d, size_t skew)
{
	size_t left = len;
	for (size_t i = 0; i < n; i++) {
		size_t piece = i + 1 == n ? left : (left / (n - i)) + (i % 2 ? skew : 0);
		if (piece > left)
			piece = left;
		iov[i].iov_base = base + off;
		iov[i].iov_len = piece;
		desc[i] = d;
		off += piece + 32;
		left -= piece;
	}
}

static void split_iov(uint8_t *base, size_t off, size_t len, size_t n, struct iovec *iov,
		      void **desc, void *d)
{
	split_iov_skew(base, off, len, n, iov, desc, d, 3);
}

static size_t iov_total_span(size_t len, size_t n) { return len + 32 * n; }

/* Checks that the pieces of IOV hold the pattern SEED continued across them. */
static int check_iov(const char *what, struct iovec *iov, size_t n, unsigned seed, size_t len)
{
	uint8_t *flat = malloc(len ? len : 1);
	size_t at = 0;
	for (size_t i = 0; i < n; i++) {
		memcpy(flat + at, iov[i].iov_base, iov[i].iov_len);
		at += iov[i].iov_len;
		long g = verify_guard((uint8_t *)iov[i].iov_base + iov[i].iov_len, 32);
		if (g >= 0) {
			free(flat);
			FAIL("%s: guard byte %ld after iov %zu overwritten", what, g, i);
		}
	}
	int rc = check_data(what, flat, len, seed, 0);
	free(flat);
	return rc;
}

static int t_rma_write(struct conn *c)
{
	int done = 0;
	for (size_t i = 0; i < N_RMA_SIZES; i++) {
		size_t len = rma_sizes[i];
		if (len > max_msg)
			continue;
		size_t off = 4096 + 8 * i; /* unaligned targets too */
		memset(sbuf + off, GUARD, len + 64);
		fill(cbuf, len, 300 + i);
		struct fi_context2 ctx;
		TRY(fi_write(c->client.ep, cbuf, len, cdesc(), 0, raddr(sbuf, off), skey(), &ctx));
		char what[64];
		snprintf(what, sizeof(what), "%zu-byte fi_write", len);
		RUN(expect_comp(c, &c->client, &ctx, FI_WRITE | FI_RMA, (size_t)-1, what, NULL));
		RUN(check_data(what, sbuf + off, len, 300 + i, 64));
		done++;
	}
	/* fi_writev: scattered local buffers into one remote range; then
	 * fi_writemsg with several remote ranges where rma_iov_limit allows. */
	for (size_t n = 2; n <= tx_iov_limit && n <= MAX_IOV; n++) {
		size_t len = 10000 + n;
		struct iovec iov[MAX_IOV];
		void *desc[MAX_IOV];
		split_iov(cbuf, 0, len, n, iov, desc, cdesc());
		uint8_t *flat = malloc(len);
		fill(flat, len, 400 + n);
		size_t at = 0;
		for (size_t k = 0; k < n; k++) {
			memcpy(iov[k].iov_base, flat + at, iov[k].iov_len);
			at += iov[k].iov_len;
		}
		free(flat);
		memset(sbuf, GUARD, len + 64);
		struct fi_context2 ctx;
		TRY(fi_writev(c->client.ep, iov, desc, n, 0, raddr(sbuf, 0), skey(), &ctx));
		char what[64];
		snprintf(what, sizeof(what), "fi_writev with %zu iovs", n);
		RUN(expect_comp(c, &c->client, &ctx, FI_WRITE | FI_RMA, (size_t)-1, what, NULL));
		RUN(check_data(what, sbuf, len, 400 + n, 64));
	}
	if (rma_iov_limit > 1) {
		size_t n = rma_iov_limit < 4 ? rma_iov_limit : 4, len = 3000 * n;
		struct fi_rma_iov riov[4];
		memset(sbuf, GUARD, 4 * 4096 + 64);
		for (size_t k = 0; k < n; k++) {
			riov[k].addr = raddr(sbuf, k * 4096);
			riov[k].len = 3000;
			riov[k].key = skey();
		}
		fill(cbuf, len, 450);
		struct iovec iov = { cbuf, len };
		void *d = cdesc();
		struct fi_context2 ctx;
		struct fi_msg_rma msg = { .msg_iov = &iov, .desc = &d, .iov_count = 1,
					  .rma_iov = riov, .rma_iov_count = n, .context = &ctx };
		TRY(fi_writemsg(c->client.ep, &msg, FI_COMPLETION));
		RUN(expect_comp(c, &c->client, &ctx, FI_WRITE | FI_RMA, (size_t)-1,
				"fi_writemsg with several remote ranges", NULL));
		for (size_t k = 0; k < n; k++) {
			long bad = -1;
			for (size_t b = 0; b < 3000; b++)
				if (sbuf[k * 4096 + b] != pat(450, k * 3000 + b)) {
					bad = (long)b;
					break;
				}
			if (bad >= 0)
				FAIL("fi_writemsg: remote range %zu differs at byte %ld", k, bad);
			if (verify_guard(sbuf + k * 4096 + 3000, 64) >= 0)
				FAIL("fi_writemsg: guard after remote range %zu overwritten", k);
		}
	}
	RUN(expect_quiet(c, &c->server, "the target of fi_write (no FI_RMA_EVENT)"));
	RUN(expect_quiet(c, &c->client, "after the writes"));
	printf("  rma_write: %d sizes, fi_writev with 2..%zu iovs, rma_iov_limit %zu\n", done,
	       tx_iov_limit, rma_iov_limit);
	return T_PASS;
}

static int t_rma_read(struct conn *c)
{
	int done = 0;
	for (size_t i = 0; i < N_RMA_SIZES; i++) {
		size_t len = rma_sizes[i];
		if (len > max_msg)
			continue;
		size_t off = 4096 + 8 * i;
		fill(sbuf + off, len, 500 + i);
		memset(cbuf, GUARD, len + 64);
		struct fi_context2 ctx;
		TRY(fi_read(c->client.ep, cbuf, len, cdesc(), 0, raddr(sbuf, off), skey(), &ctx));
		char what[64];
		snprintf(what, sizeof(what), "%zu-byte fi_read", len);
		RUN(expect_comp(c, &c->client, &ctx, FI_READ | FI_RMA, (size_t)-1, what, NULL));
		RUN(check_data(what, cbuf, len, 500 + i, 64));
		done++;
	}
	size_t read_iovs = 1;
	for (size_t n = 2; n <= tx_iov_limit && n <= MAX_IOV; n++) {
		size_t len = 10000 + n;
		struct iovec iov[MAX_IOV];
		void *desc[MAX_IOV];
		memset(cbuf, GUARD, iov_total_span(len, n) + 64);
		split_iov(cbuf, 0, len, n, iov, desc, cdesc());
		fill(sbuf, len, 600 + n);
		struct fi_context2 ctx;
		ssize_t rc = fi_readv(c->client.ep, iov, desc, n, 0, raddr(sbuf, 0), skey(), &ctx);
		if (rc == -FI_EINVAL && iwarp) {
			/* Refused whole, nothing read: the limit is n - 1. */
			RUN(expect_quiet(c, &c->client, "a refused fi_readv"));
			break;
		}
		TRY(rc);
		read_iovs = n;
		char what[64];
		snprintf(what, sizeof(what), "fi_readv with %zu iovs", n);
		RUN(expect_comp(c, &c->client, &ctx, FI_READ | FI_RMA, (size_t)-1, what, NULL));
		RUN(check_iov(what, iov, n, 600 + n, len));
	}
	RUN(expect_quiet(c, &c->server, "the target of fi_read"));
	RUN(expect_quiet(c, &c->client, "after the reads"));
	printf("  rma_read: %d sizes, fi_readv with up to %zu iovs (tx iov_limit %zu)\n", done,
	       read_iovs, tx_iov_limit);
	return T_PASS;
}

static uint64_t data_mask(void)
{
	return cq_data_size >= 8 ? ~0ULL : (1ULL << (8 * cq_data_size)) - 1;
}

static int t_rma_writedata(struct conn *c)
{
	if (!cq_data_size)
		SKIP("cq_data_size is 0");
	const size_t sizes[] = { 0, 1, 4096, 65536 };
	for (size_t i = 0; i < 4; i++) {
		size_t len = sizes[i];
		uint64_t data = (0x1122334455667788ULL + i * 0x01010101) & data_mask();
		struct fi_context2 ra, rb, wctx, sctx;
		/* Two receives: the write consumes the first, a send the second. */
		RUN(post_recv(&c->server, 1 << 20, 64, 0, &ra));
		RUN(post_recv(&c->server, 2 << 20, 64, 0, &rb));
		size_t off = 8192;
		memset(sbuf + off, GUARD, len + 64);
		fill(cbuf, len, 700 + i);
		TRY(fi_writedata(c->client.ep, cbuf, len, cdesc(), data, 0, raddr(sbuf, off), skey(),
				 &wctx));
		char what[80];
		snprintf(what, sizeof(what), "%zu-byte fi_writedata", len);
		RUN(expect_comp(c, &c->client, &wctx, FI_WRITE | FI_RMA, (size_t)-1, what, NULL));
		struct comp x;
		snprintf(what, sizeof(what), "target completion of %zu-byte fi_writedata", len);
		RUN(expect_comp(c, &c->server, &ra, FI_REMOTE_CQ_DATA, (size_t)-1, what, &x));
		if (x.e.data != data)
			FAIL("%s: data 0x%llx, expected 0x%llx", what, (unsigned long long)x.e.data,
			     (unsigned long long)data);
		if (!(x.e.flags & (FI_REMOTE_WRITE | FI_RECV)))
			FAIL("%s: flags %s name neither FI_REMOTE_WRITE nor FI_RECV", what,
			     flag_names(x.e.flags));
		RUN(check_data(what, sbuf + off, len, 700 + i, 64));
		if (verify_guard(sbuf + (1 << 20), 64) >= 0)
			FAIL("%s: the consumed receive buffer was written", what);
		/* The receive was consumed: the next send lands in the second. */
		fill(cbuf, 64, 750 + i);
		TRY(fi_send(c->client.ep, cbuf, 64, cdesc(), 0, &sctx));
		RUN(expect_comp(c, &c->client, &sctx, FI_SEND, (size_t)-1, "send after writedata",
				NULL));
		RUN(expect_comp(c, &c->server, &rb, FI_RECV, 64,
				"send after fi_writedata lands in the second receive", &x));
		if (x.e.flags & FI_REMOTE_CQ_DATA)
			FAIL("plain send completion carries FI_REMOTE_CQ_DATA");
		RUN(check_data("send after writedata", sbuf + (2 << 20), 64, 750 + i, 0));
	}
	RUN(expect_quiet(c, &c->server, "after fi_writedata"));
	RUN(expect_quiet(c, &c->client, "after fi_writedata"));
	printf("  rma_writedata: sizes 0, 1, 4096, 65536; cq_data_size %zu\n", cq_data_size);
	return T_PASS;
}

static int t_cq_data(struct conn *c)
{
	if (!cq_data_size)
		SKIP("cq_data_size is 0");
	const size_t sizes[] = { 0, 1, 4096, 65536 };
	for (size_t i = 0; i < 4; i++) {
		size_t len = sizes[i];
		if (len > max_msg)
			continue;
		uint64_t data = (0xa5a5a5a5deadbeefULL ^ (i << 24)) & data_mask();
		struct fi_context2 rctx, sctx;
		RUN(post_recv(&c->server, 0, len, 64, &rctx));
		fill(cbuf, len, 800 + i);
		TRY(fi_senddata(c->client.ep, cbuf, len, cdesc(), data, 0, &sctx));
		struct comp x;
		char what[64];
		snprintf(what, sizeof(what), "%zu-byte fi_senddata", len);
		RUN(expect_comp(c, &c->client, &sctx, FI_SEND | FI_MSG, (size_t)-1, what, NULL));
		RUN(expect_comp(c, &c->server, &rctx, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA, len, what,
				&x));
		if (x.e.data != data)
			FAIL("%s: data 0x%llx, expected 0x%llx", what, (unsigned long long)x.e.data,
			     (unsigned long long)data);
		RUN(check_data(what, sbuf, len, 800 + i, 64));
	}
	RUN(expect_quiet(c, &c->server, "after fi_senddata"));
	RUN(expect_quiet(c, &c->client, "after fi_senddata"));
	printf("  cq_data: fi_senddata of 0, 1, 4096, 65536 bytes\n");
	return T_PASS;
}

static int t_multi_iov(struct conn *c)
{
	size_t limit = tx_iov_limit < MAX_IOV ? tx_iov_limit : MAX_IOV - 1;
	for (size_t n = 1; n <= limit; n++) {
		size_t rn = n <= rx_iov_limit ? n : rx_iov_limit;
		/* The receiver splits differently from the sender. */
		size_t len = 5000 + 111 * n;
		struct iovec siov[MAX_IOV], riov[MAX_IOV];
		void *sdesc_[MAX_IOV], *rdesc[MAX_IOV];
		memset(sbuf, GUARD, iov_total_span(len, rn) + 64);
		split_iov_skew(sbuf, 0, len, rn, riov, rdesc, sdesc(), 41);
		split_iov(cbuf, 0, len, n, siov, sdesc_, cdesc());
		uint8_t *flat = malloc(len);
		fill(flat, len, 900 + n);
		for (size_t k = 0, at = 0; k < n; at += siov[k].iov_len, k++)
			memcpy(siov[k].iov_base, flat + at, siov[k].iov_len);
		free(flat);
		struct fi_context2 rctx, sctx;
		TRY(fi_recvv(c->server.ep, riov, rdesc, rn, 0, &rctx));
		TRY(fi_sendv(c->client.ep, siov, sdesc_, n, 0, &sctx));
		char what[64];
		snprintf(what, sizeof(what), "fi_sendv of %zu iovs into fi_recvv of %zu", n, rn);
		RUN(expect_comp(c, &c->client, &sctx, FI_SEND | FI_MSG, (size_t)-1, what, NULL));
		RUN(expect_comp(c, &c->server, &rctx, FI_RECV | FI_MSG, len, what, NULL));
		RUN(check_iov(what, riov, rn, 900 + n, len));
	}
	/* fi_msg(3): "count ... must be less than or equal to iov_limit";
	 * one more is rejected at the call, with nothing posted. */
	const char *iov_rule = "fi_msg(3): iov count <= iov_limit";
	struct iovec iov[MAX_IOV + 1];
	void *desc[MAX_IOV + 1];
	if (tx_iov_limit < MAX_IOV) {
		struct fi_context2 rctx, sctx;
		RUN(post_recv(&c->server, 0, 1 << 20, 0, &rctx));
		split_iov(cbuf, 0, 4096, tx_iov_limit + 1, iov, desc, cdesc());
		ssize_t rc = fi_sendv(c->client.ep, iov, desc, tx_iov_limit + 1, 0, &sctx);
		RUN(rejected("multi_iov", "fi_sendv with iov_limit + 1 iovs", iov_rule, rc));
		if (rc == 0) { /* lax: it was sent; let it complete */
			RUN(expect_comp(c, &c->client, &sctx, FI_SEND, (size_t)-1,
					"the accepted fi_sendv", NULL));
			RUN(expect_comp(c, &c->server, &rctx, FI_RECV, 4096,
					"the accepted fi_sendv", NULL));
			RUN(post_recv(&c->server, 0, 1 << 20, 0, &rctx));
		}
		RUN(expect_quiet(c, &c->client, "after the rejected fi_sendv"));
		RUN(expect_quiet(c, &c->server, "after the rejected fi_sendv"));
		/* The connection still works and the receive is still there. */
		fill(cbuf, 100, 990);
		TRY(fi_send(c->client.ep, cbuf, 100, cdesc(), 0, &sctx));
		RUN(expect_comp(c, &c->client, &sctx, FI_SEND, (size_t)-1, "send after rejection", NULL));
		RUN(expect_comp(c, &c->server, &rctx, FI_RECV, 100, "receive after rejection", NULL));
		RUN(check_data("send after rejected fi_sendv", sbuf, 100, 990, 0));
	}
	if (rx_iov_limit < MAX_IOV) {
		struct fi_context2 rctx;
		split_iov(sbuf, 0, 4096, rx_iov_limit + 1, iov, desc, sdesc());
		memset(sbuf, GUARD, iov_total_span(4096, rx_iov_limit + 1) + 64);
		ssize_t rc = fi_recvv(c->server.ep, iov, desc, rx_iov_limit + 1, 0, &rctx);
		RUN(rejected("multi_iov", "fi_recvv with rx iov_limit + 1 iovs", iov_rule, rc));
		RUN(expect_quiet(c, &c->server, "after the fi_recvv with too many iovs"));
		if (rc == 0) { /* lax: it was posted; fill it */
			struct fi_context2 sctx;
			fill(cbuf, 4096, 995);
			TRY(fi_send(c->client.ep, cbuf, 4096, cdesc(), 0, &sctx));
			RUN(expect_comp(c, &c->client, &sctx, FI_SEND, (size_t)-1,
					"send into the accepted fi_recvv", NULL));
			RUN(expect_comp(c, &c->server, &rctx, FI_RECV, 4096,
					"the accepted fi_recvv", NULL));
			RUN(check_iov("the accepted fi_recvv", iov, rx_iov_limit + 1, 995, 4096));
		}
	}
	printf("  multi_iov: 1..%zu iovs sent, receive iov_limit %zu\n", limit, rx_iov_limit);
	return T_PASS;
}

static int t_inject(struct conn *c)
{
	if (!inject_size)
		SKIP("inject_size is 0");
	size_t sizes[] = { 1, 16, 100, inject_size };
	for (size_t i = 0; i < 4; i++) {
		size_t len = sizes[i];
		if (len > inject_size)
			continue;
		struct fi_context2 rctx;
		RUN(post_recv(&c->server, 0, len, 64, &rctx));
		fill(cbuf, len, 1100 + i);
		TRY(fi_inject(c->client.ep, cbuf, len, 0));
		/* fi_msg(3): the buffer may be reused as soon as the call returns. */
		memset(cbuf, 0x5a, len);
		char what[64];
		snprintf(what, sizeof(what), "%zu-byte fi_inject", len);
		RUN(expect_comp(c, &c->server, &rctx, FI_RECV | FI_MSG, len, what, NULL));
		RUN(check_data(what, sbuf, len, 1100 + i, 64));
	}
	if (cq_data_size) {
		uint64_t data = 0x0badcafe12345678ULL & data_mask();
		struct fi_context2 rctx;
		struct comp x;
		RUN(post_recv(&c->server, 0, inject_size, 64, &rctx));
		fill(cbuf, inject_size, 1150);
		TRY(fi_injectdata(c->client.ep, cbuf, inject_size, data, 0));
		memset(cbuf, 0x5a, inject_size);
		RUN(expect_comp(c, &c->server, &rctx, FI_RECV | FI_REMOTE_CQ_DATA, inject_size,
				"fi_injectdata", &x));
		if (x.e.data != data)
			FAIL("fi_injectdata: data 0x%llx, expected 0x%llx",
			     (unsigned long long)x.e.data, (unsigned long long)data);
		RUN(check_data("fi_injectdata", sbuf, inject_size, 1150, 64));
	}
	for (size_t i = 0; i < 4; i++) {
		size_t len = sizes[i];
		if (len > inject_size)
			continue;
		size_t off = 3 << 20;
		memset(sbuf + off, GUARD, len + 64);
		fill(cbuf, len, 1200 + i);
		TRY(fi_inject_write(c->client.ep, cbuf, len, 0, raddr(sbuf, off), skey()));
		memset(cbuf, 0x5a, len);
		/* No completion says when it landed: watch the memory. */
		double end = now_ms() + WAIT_MS;
		while (verify(sbuf + off, len, 1200 + i) >= 0 && now_ms() < end) {
			poll_both(c);
			sched_yield();
		}
		char what[64];
		snprintf(what, sizeof(what), "%zu-byte fi_inject_write", len);
		RUN(check_data(what, sbuf + off, len, 1200 + i, 64));
	}
	RUN(expect_quiet(c, &c->client, "injects generate no completion"));
	RUN(expect_quiet(c, &c->server, "after the injects"));
	/* fi_msg(3)/fi_rma(3): inject lengths are limited by inject_size. */
	const char *inject_rule = "fi_endpoint(3): inject_size is the largest fi_inject*";
	struct fi_context2 rctx;
	RUN(post_recv(&c->server, 0, inject_size + 64, 0, &rctx));
	fill(cbuf, inject_size + 1, 1300);
	ssize_t rc = fi_inject(c->client.ep, cbuf, inject_size + 1, 0);
	if (rc >= 0)
		FAIL("fi_inject of inject_size + 1 = %zu bytes returned %zd", inject_size + 1, rc);
	RUN(rejected("inject", "fi_inject of inject_size + 1 bytes", inject_rule, rc));
	rc = fi_inject_write(c->client.ep, cbuf, inject_size + 1, 0, raddr(sbuf, 0), skey());
	if (rc >= 0)
		FAIL("fi_inject_write of inject_size + 1 = %zu bytes returned %zd", inject_size + 1,
		     rc);
	RUN(rejected("inject", "fi_inject_write of inject_size + 1 bytes", inject_rule, rc));
	RUN(expect_quiet(c, &c->server, "after the rejected injects"));
	RUN(expect_quiet(c, &c->client, "after the rejected injects"));
	printf("  inject: sizes 1..%zu, fi_injectdata, fi_inject_write\n", inject_size);
	return T_PASS;
}

static int t_selective_completion(struct conn *c)
{
	/* The client's CQ is bound FI_TRANSMIT | FI_SELECTIVE_COMPLETION
	 * (runner), and its tx op_flags lack FI_COMPLETION. */
	const int n = 6;
	struct fi_context2 rctx[6], sctx[6];
	for (int i = 0; i < n; i++)
		RUN(post_recv(&c->server, i * 4096, 1000, 64, &rctx[i]));
	for (int i = 0; i < n; i++) {
		fill(cbuf + i * 4096, 1000, 1400 + i);
		if (i % 3 == 0) {
			TRY(fi_send(c->client.ep, cbuf + i * 4096, 1000, cdesc(), 0, &sctx[i]));
		} else {
			struct iovec iov = { cbuf + i * 4096, 1000 };
			void *d = cdesc();
			struct fi_msg msg = { .msg_iov = &iov, .desc = &d, .iov_count = 1,
					      .context = &sctx[i] };
			TRY(fi_sendmsg(c->client.ep, &msg, i % 3 == 1 ? FI_COMPLETION : 0));
		}
	}
	/* Data arrives for all. */
	for (int i = 0; i < n; i++) {
		char what[64];
		snprintf(what, sizeof(what), "receive %d of the selective sends", i);
		RUN(expect_comp(c, &c->server, &rctx[i], FI_RECV, 1000, what, NULL));
		RUN(check_data(what, sbuf + i * 4096, 1000, 1400 + i, 64));
	}
	/* Exactly the FI_COMPLETION ones (1 and 4) complete, in order. */
	RUN(expect_comp(c, &c->client, &sctx[1], FI_SEND, (size_t)-1,
			"fi_sendmsg(FI_COMPLETION) #1", NULL));
	RUN(expect_comp(c, &c->client, &sctx[4], FI_SEND, (size_t)-1,
			"fi_sendmsg(FI_COMPLETION) #4", NULL));
	RUN(expect_quiet(c, &c->client, "sends without FI_COMPLETION"));
	/* RMA writes the same way. */
	for (int i = 0; i < 4; i++) {
		fill(cbuf + i * 4096, 500, 1450 + i);
		memset(sbuf + (1 << 20) + i * 4096, GUARD, 564);
		struct iovec iov = { cbuf + i * 4096, 500 };
		void *d = cdesc();
		struct fi_rma_iov riov = { raddr(sbuf, (1 << 20) + i * 4096), 500, skey() };
		struct fi_msg_rma msg = { .msg_iov = &iov, .desc = &d, .iov_count = 1,
					  .rma_iov = &riov, .rma_iov_count = 1,
					  .context = &sctx[i] };
		TRY(fi_writemsg(c->client.ep, &msg, i == 3 ? FI_COMPLETION : 0));
	}
	RUN(expect_comp(c, &c->client, &sctx[3], FI_WRITE, (size_t)-1,
			"fi_writemsg(FI_COMPLETION)", NULL));
	for (int i = 0; i < 4; i++)
		RUN(check_data("selective fi_writemsg", sbuf + (1 << 20) + i * 4096, 500, 1450 + i,
			       64));
	RUN(expect_quiet(c, &c->client, "writes without FI_COMPLETION"));
	RUN(expect_quiet(c, &c->server, "after the selective operations"));
	printf("  selective_completion: 6 sends (2 with FI_COMPLETION), 4 writes (1)\n");
	return T_PASS;
}

static int t_unexpected(struct conn *c)
{
	const size_t sizes[] = { 64, 4096, 200000 };
	for (size_t i = 0; i < 3; i++) {
		size_t len = sizes[i];
		if (len > max_msg)
			continue;
		struct fi_context2 rctx, sctx;
		memset(sbuf, GUARD, len + 64);
		fill(cbuf, len, 1500 + i);
		ssize_t rc = fi_send(c->client.ep, cbuf, len, cdesc(), 0, &sctx);
		if (rc == -FI_EAGAIN && iwarp) {
			/* iWARP has no RNR retry: nd's receive credits hold the
			 * message at the sender (fi_nd(7)). It still waits while
			 * the polls run, then goes once the receive is posted. */
			double until = now_ms() + 300;
			while (now_ms() < until) {
				poll_both(c);
				if ((rc = fi_send(c->client.ep, cbuf, len, cdesc(), 0, &sctx)) != -FI_EAGAIN)
					FAIL("a send with no receive posted at the peer: %s, not -FI_EAGAIN",
					     rc ? fi_strerror((int)-rc) : "accepted");
			}
			struct fi_context2 early;
			RUN(post_recv(&c->server, 0, len, 64, &early));
			until = now_ms() + 5000;
			do {
				poll_both(c);
				rc = fi_send(c->client.ep, cbuf, len, cdesc(), 0, &sctx);
			} while (rc == -FI_EAGAIN && now_ms() < until);
			TRY(rc);
			char what[64];
			snprintf(what, sizeof(what), "%zu-byte send held until its receive", len);
			RUN(expect_comp(c, &c->server, &early, FI_RECV | FI_MSG, len, what, NULL));
			RUN(expect_comp(c, &c->client, &sctx, FI_SEND | FI_MSG, (size_t)-1, what, NULL));
			RUN(check_data(what, sbuf, len, 1500 + i, 64));
			continue;
		}
		TRY(rc);
		/* The send must wait for a receive (RNR retry), not fail. */
		double until = now_ms() + 300;
		while (now_ms() < until) {
			poll_both(c);
			sched_yield();
		}
		if (c->client.head != c->client.tail) {
			struct comp *x = &c->client.q[c->client.head % QMAX];
			if (x->is_err)
				FAIL("send without a posted receive failed: %s (prov_errno %d)",
				     fi_strerror(x->err.err), x->err.prov_errno);
			FAIL("send completed before any receive was posted");
		}
		RUN(post_recv(&c->server, 0, len, 64, &rctx));
		char what[64];
		snprintf(what, sizeof(what), "%zu-byte send posted before its receive", len);
		RUN(expect_comp(c, &c->server, &rctx, FI_RECV | FI_MSG, len, what, NULL));
		RUN(expect_comp(c, &c->client, &sctx, FI_SEND | FI_MSG, (size_t)-1, what, NULL));
		RUN(check_data(what, sbuf, len, 1500 + i, 64));
	}
	RUN(expect_quiet(c, &c->client, "after the unexpected sends"));
	RUN(expect_quiet(c, &c->server, "after the unexpected sends"));
	printf("  unexpected: 64, 4096, 200000 bytes sent 300 ms before the receive\n");
	return T_PASS;
}

static int t_shutdown_flush(struct conn *c)
{
	size_t k = 16 < rx_size ? 16 : rx_size;
	struct fi_context2 rctx[16];
	bool seen[16] = { false };
	for (size_t i = 0; i < k; i++)
		RUN(post_recv(&c->server, i * 4096, 4096, 0, &rctx[i]));
	RUN(expect_quiet(c, &c->server, "receives posted"));
	/* fi_cm(3): fi_shutdown; fi_endpoint(3)/fi_cq(3): operations still
	 * outstanding on a disabled endpoint complete with FI_ECANCELED. */
	TRY(fi_shutdown(c->server.ep, 0));
	size_t got = 0;
	while (got < k) {
		struct comp x;
		char what[64];
		snprintf(what, sizeof(what), "flushed receive %zu of %zu", got + 1, k);
		RUN(next_comp(c, &c->server, &x, what));
		if (!x.is_err)
			FAIL("%s: a successful completion (ctx %p) instead of an error", what,
			     x.e.op_context);
		if (x.err.err != FI_ECANCELED)
			FAIL("%s: err %d (%s), expected FI_ECANCELED (prov_errno %d)", what,
			     x.err.err, fi_strerror(x.err.err), x.err.prov_errno);
		size_t idx = (struct fi_context2 *)x.err.op_context - rctx;
		if ((struct fi_context2 *)x.err.op_context < rctx || idx >= k)
			FAIL("%s: unknown op_context %p", what, x.err.op_context);
		if (seen[idx])
			FAIL("receive %zu completed twice", idx);
		seen[idx] = true;
		got++;
	}
	RUN(expect_quiet(c, &c->server, "after every receive was flushed"));
	/* The peer learns of it. */
	struct event ev;
	fid_t cfid = &c->client.ep->fid;
	RUN(wait_event(c, &cfid, 1, &ev, "FI_SHUTDOWN at the peer"));
	if (ev.type != FI_SHUTDOWN)
		FAIL("the peer got event %u, expected FI_SHUTDOWN", ev.type);
	RUN(expect_quiet(c, &c->client, "the peer after shutdown"));
	printf("  shutdown_flush: %zu receives flushed with FI_ECANCELED, each once\n", k);
	return T_PASS;
}

/* After a failure on C's client: further operations fail at the call or
 * complete with an error, within the bounded wait; none hangs. */
static int later_calls_fail(struct conn *c)
{
	struct fi_context2 ctx[2];
	ssize_t rc = fi_write(c->client.ep, cbuf, 64, cdesc(), 0, raddr(sbuf, 0), skey(), &ctx[0]);
	if (rc == 0) {
		struct comp x;
		RUN(next_comp(c, &c->client, &x, "a fi_write after the access error"));
		if (!x.is_err)
			FAIL("fi_write after the access error succeeded");
		printf("    later fi_write: error completion %s\n", fi_strerror(x.err.err));
	} else {
		printf("    later fi_write: %s at the call\n", fi_strerror((int)-rc));
	}
	rc = fi_send(c->client.ep, cbuf, 64, cdesc(), 0, &ctx[1]);
	if (rc == 0) {
		struct comp x;
		RUN(next_comp(c, &c->client, &x, "a fi_send after the access error"));
		if (!x.is_err)
			FAIL("fi_send after the access error succeeded");
		printf("    later fi_send: error completion %s\n", fi_strerror(x.err.err));
	} else {
		printf("    later fi_send: %s at the call\n", fi_strerror((int)-rc));
	}
	return T_PASS;
}

/* iWARP: the responder does not acknowledge an RDMA write, so one it
 * refuses completes at the requester. What must hold: no byte reached the
 * target. What happens to the connection then is siw's to decide (it ends
 * the stream with a terminate in some runs and not in others): shown, not
 * judged. */
static int iwarp_write_refused_later(struct conn *c, const char *name)
{
	if (verify_guard(sbuf, 4096) >= 0 || verify_guard(sbuf + BUF_SIZE - 4096, 4096) >= 0)
		FAIL("%s: the target buffer was written", name);
	struct fi_context2 ctx;
	ssize_t rc = fi_write(c->client.ep, cbuf, 8, cdesc(), 0, raddr(sbuf, 8192), skey(), &ctx);
	const char *later = "a later write: no completion within 5 s";
	if (rc != 0) {
		later = "a later write: refused at the call";
	} else {
		double until = now_ms() + 5000;
		while (now_ms() < until && c->client.head == c->client.tail) {
			poll_both(c);
			usleep(10000);
		}
		if (c->client.head != c->client.tail) {
			struct comp x = c->client.q[c->client.head++ % QMAX];
			later = x.is_err ? "a later write: failed (the connection ended)"
					 : "a later write: completed (the connection goes on)";
		}
	}
	if (verify_guard(sbuf, 4096) >= 0 || verify_guard(sbuf + BUF_SIZE - 4096, 4096) >= 0)
		FAIL("%s: the target buffer was written", name);
	printf("  %s: completed at the requester (iWARP), no byte at the target; %s\n", name, later);
	return T_PASS;
}

static int access_body(struct conn *c, const char *name, bool is_read, bool bad_key,
		       uint64_t stale_key)
{
	struct fi_context2 ctx;
	size_t len = 64;
	uint64_t key = bad_key ? stale_key : skey();
	uint64_t addr = bad_key ? raddr(sbuf, 0) : raddr(sbuf, BUF_SIZE - 16);
	memset(sbuf, GUARD, 4096);
	memset(sbuf + BUF_SIZE - 4096, GUARD, 4096);
	fill(cbuf, len, 42);
	if (is_read)
		TRY(fi_read(c->client.ep, cbuf, len, cdesc(), 0, addr, key, &ctx));
	else
		TRY(fi_write(c->client.ep, cbuf, len, cdesc(), 0, addr, key, &ctx));
	struct comp x;
	RUN(next_comp(c, &c->client, &x, name));
	if (!x.is_err && iwarp && !is_read)
		return iwarp_write_refused_later(c, name);
	if (!x.is_err)
		FAIL("%s: completed successfully", name);
	if (x.err.op_context != &ctx)
		FAIL("%s: error op_context %p, expected %p", name, x.err.op_context, (void *)&ctx);
	/* iWARP: siw's responder answers with a terminate, which moves the
	 * requester's queue pair to error before any status for the request:
	 * it is flushed (fi_nd(7), iWARP). */
	if (x.err.err != FI_EACCES && x.err.err != FI_EIO && !(iwarp && x.err.err == FI_ECANCELED))
		FAIL("%s: err %d (%s), expected FI_EACCES or FI_EIO", name, x.err.err,
		     fi_strerror(x.err.err));
	if (!x.err.prov_errno)
		FAIL("%s: prov_errno is 0", name);
	printf("  %s: err %s, prov_errno %d\n", name, fi_strerror(x.err.err), x.err.prov_errno);
	if (!is_read && (verify_guard(sbuf, 4096) >= 0 ||
			 verify_guard(sbuf + BUF_SIZE - 4096, 4096) >= 0))
		FAIL("%s: the target buffer was written", name);
	return later_calls_fail(c);
}

/* Each case on a fresh connection: the access error breaks it. */
static int access_case(const char *name, bool is_read, bool bad_key, uint64_t stale_key)
{
	struct conn *c;
	int rc = conn_open(&c, 0);
	if (rc == T_PASS)
		rc = access_body(c, name, is_read, bad_key, stale_key);
	conn_close(c);
	return rc;
}

static int t_remote_access_error(struct conn *unused)
{
	(void)unused;
	/* A key that was valid once: registered, then closed. */
	static uint8_t scratch[4096];
	struct fid_mr *mr = reg(scratch, sizeof(scratch), 0x77);
	uint64_t stale = fi_mr_key(mr);
	fi_close(&mr->fid);
	if (stale == skey() || stale == ckey())
		stale ^= 0x5a5a00;
	RUN(access_case("fi_write with a wrong key", false, true, stale));
	RUN(access_case("fi_read with a wrong key", true, true, stale));
	RUN(access_case("fi_write past the end of the region", false, false, 0));
	RUN(access_case("fi_read past the end of the region", true, false, 0));
	return T_PASS;
}

/* ---- bad_input ---- */

/* After a call that should have been rejected returned RC: judges it
 * (rejected()), and where it was refused checks that nothing was posted. */
static int judge_rejected(struct conn *c, const char *what, const char *rule, ssize_t rc)
{
	RUN(rejected("bad_input", what, rule, rc));
	if (rc < 0 && c) {
		RUN(expect_quiet(c, &c->client, what));
		RUN(expect_quiet(c, &c->server, what));
	}
	return T_PASS;
}

/* Runs one bad-input check on a fresh connection (an accepted bad
 * operation may break it). */
typedef ssize_t (*bad_fn)(struct conn *c);

static ssize_t bad_null_send(struct conn *c)
{
	return fi_send(c->client.ep, NULL, 4096, cdesc(), 0, NULL);
}
static ssize_t bad_null_write(struct conn *c)
{
	return fi_write(c->client.ep, NULL, 4096, cdesc(), 0, raddr(sbuf, 0), skey(), NULL);
}
static ssize_t bad_big_send(struct conn *c)
{
	return fi_send(c->client.ep, cbuf, max_msg + 1, cdesc(), 0, NULL);
}
static ssize_t bad_big_recv(struct conn *c)
{
	return fi_recv(c->server.ep, sbuf, max_msg + 1, sdesc(), 0, NULL);
}
static ssize_t bad_big_write(struct conn *c)
{
	return fi_write(c->client.ep, cbuf, max_msg + 1, cdesc(), 0, raddr(sbuf, 0), skey(), NULL);
}
static ssize_t bad_no_desc_send(struct conn *c)
{
	/* Longer than inject_size: an inline send would need no key. */
	return fi_send(c->client.ep, cbuf, inject_size + 4096, NULL, 0, NULL);
}
static ssize_t bad_no_desc_recv(struct conn *c)
{
	return fi_recv(c->server.ep, sbuf, 4096, NULL, 0, NULL);
}
static ssize_t bad_no_desc_write(struct conn *c)
{
	return fi_write(c->client.ep, cbuf, inject_size + 4096, NULL, 0, raddr(sbuf, 0), skey(),
			NULL);
}

static int bad_on_conn(const char *what, const char *rule, bad_fn fn)
{
	struct conn *c;
	int rc = conn_open(&c, 0);
	if (rc == T_PASS) {
		/* A receive for a send that slips through. */
		struct fi_context2 rctx;
		if (fn != bad_big_recv && fn != bad_no_desc_recv)
			rc = post_recv(&c->server, 4 << 20, 4096, 0, &rctx);
		if (rc == T_PASS) {
			ssize_t r = fn(c);
			rc = judge_rejected(r < 0 ? c : NULL, what, rule, r);
		}
	}
	conn_close(c);
	return rc;
}

static int t_bad_input(struct conn *unused)
{
	(void)unused;
	int skipped = lax_skips;
	const char *msg_rule = "fi_msg(3)/fi_rma(3) RETURN VALUE: a negative fabric errno on error";
	/* Unconnected endpoint: fi_endpoint(3) says data transfers need a
	 * connected FI_EP_MSG endpoint (receives may be posted earlier). */
	{
		struct side s = { .name = "unconnected" };
		RUN(open_side(&s, client_info, 0));
		struct fi_context2 ctx;
		fill(cbuf, 64, 1);
		ssize_t r1 = fi_send(s.ep, cbuf, 64, cdesc(), 0, &ctx);
		ssize_t r2 = fi_write(s.ep, cbuf, 64, cdesc(), 0, raddr(sbuf, 0), skey(), &ctx);
		ssize_t r3 = fi_read(s.ep, cbuf, 64, cdesc(), 0, raddr(sbuf, 0), skey(), &ctx);
		ssize_t r4 = inject_size ? fi_inject(s.ep, cbuf, 8, 0) : -FI_EOPBADSTATE;
		/* Nothing may complete on its CQ. */
		struct conn tmp = { .client = s };
		double end = now_ms() + QUIET_MS;
		int quiet = T_PASS;
		while (now_ms() < end && quiet == T_PASS) {
			poll_side(&tmp.client);
			if (tmp.client.head != tmp.client.tail) {
				snprintf(why, sizeof(why), "unconnected endpoint: a completion appeared");
				quiet = T_FAIL;
			}
		}
		close_side(&s);
		RUN(quiet);
		int r = T_PASS;
		const char *rule = "fi_endpoint(3): FI_EP_MSG data transfer needs a connection";
		if (r == T_PASS)
			r = judge_rejected(NULL, "fi_send on an unconnected endpoint", rule, r1);
		if (r == T_PASS)
			r = judge_rejected(NULL, "fi_write on an unconnected endpoint", rule, r2);
		if (r == T_PASS)
			r = judge_rejected(NULL, "fi_read on an unconnected endpoint", rule, r3);
		if (r == T_PASS)
			r = judge_rejected(NULL, "fi_inject on an unconnected endpoint", rule, r4);
		RUN(r);
	}
	RUN(bad_on_conn("fi_send of NULL with length 4096", msg_rule, bad_null_send));
	/* A receive into NULL is no bad input: it takes no bytes (see
	 * guest_msg.cpp, msg/bad_input_is_refused_at_the_call). */
	RUN(bad_on_conn("fi_write from NULL with length 4096", msg_rule, bad_null_write));
	/* fi_endpoint(3) max_msg_size: "the maximum size for an application
	 * data transfer"; a larger one is invalid. */
	const char *size_rule = "fi_endpoint(3): max_msg_size is the largest data transfer";
	if (max_msg < BUF_SIZE) {
		RUN(bad_on_conn("fi_send of max_msg_size + 1", size_rule, bad_big_send));
		RUN(bad_on_conn("fi_recv of max_msg_size + 1", size_rule, bad_big_recv));
		RUN(bad_on_conn("fi_write of max_msg_size + 1", size_rule, bad_big_write));
	} else {
		printf("SKIP: bad_input: max_msg_size %zu exceeds the test buffer\n", max_msg);
		lax_skips++;
	}
	/* fi_mr(3) FI_MR_LOCAL: "the provider requires that all buffers used
	 * in data transfers be registered" and passed as desc. */
	if (mr_mode & FI_MR_LOCAL) {
		const char *rule = "fi_mr(3): FI_MR_LOCAL requires desc for every buffer";
		RUN(bad_on_conn("fi_send without desc under FI_MR_LOCAL", rule, bad_no_desc_send));
		RUN(bad_on_conn("fi_recv without desc under FI_MR_LOCAL", rule, bad_no_desc_recv));
		RUN(bad_on_conn("fi_write without desc under FI_MR_LOCAL", rule, bad_no_desc_write));
	}
	if (lax_skips > skipped)
		printf("  bad_input: %d checks skipped\n", lax_skips - skipped);
	return T_PASS;
}

static int t_eagain(struct conn *c)
{
	/* Bounded so that the client's CQ (3 * tx_size + ...) holds them all. */
	size_t cap = 3 * tx_size + 64, posted = 0, recvs = 0;
	struct fi_context2 *sctx = calloc(cap, sizeof(*sctx));
	struct fi_context2 *rctx = calloc(cap, sizeof(*rctx));
	bool *seen = calloc(cap, 1);
	const size_t len = 128, stride = 256;
	int rc = T_PASS;
	/* As many receives as the receive queue takes. */
	while (recvs < rx_size && recvs < cap) {
		memset(sbuf + recvs * stride, GUARD, stride);
		ssize_t r = fi_recv(c->server.ep, sbuf + recvs * stride, len, sdesc(), 0, &rctx[recvs]);
		if (r == -FI_EAGAIN)
			break;
		if (r) {
			snprintf(why, sizeof(why), "fi_recv %zu: %s", recvs, fi_strerror((int)-r));
			rc = T_FAIL;
			goto out;
		}
		recvs++;
	}
	/* Sends, never reading the CQ, until the provider says -FI_EAGAIN. */
	ssize_t r = 0;
	while (posted < cap) {
		fill(cbuf + posted * stride, len, 2000 + posted);
		r = fi_send(c->client.ep, cbuf + posted * stride, len, cdesc(), 0, &sctx[posted]);
		if (r)
			break;
		posted++;
	}
	if (r != -FI_EAGAIN) {
		snprintf(why, sizeof(why), "after %zu sends without polling: %s", posted,
			 r ? fi_strerror((int)-r) : "never -FI_EAGAIN");
		rc = T_FAIL;
		goto out;
	}
	printf("  eagain: -FI_EAGAIN after %zu sends (tx_size %zu), %zu receives posted\n", posted,
	       tx_size, recvs);
	/* Drain: every send completes once; receives beyond the first batch
	 * are posted as earlier ones complete. */
	size_t sdone = 0, rdone = 0;
	while (sdone < posted || rdone < posted) {
		struct comp x;
		struct side *s = sdone < posted ? &c->client : &c->server;
		poll_both(c);
		if (c->server.head != c->server.tail)
			s = &c->server;
		if ((rc = next_comp(c, s, &x, s == &c->client ? "draining sends" : "draining receives")))
			goto out;
		if (x.is_err) {
			snprintf(why, sizeof(why), "%s error completion: %s", s->name,
				 fi_strerror(x.err.err));
			rc = T_FAIL;
			goto out;
		}
		if (s == &c->client) {
			size_t k = (struct fi_context2 *)x.e.op_context - sctx;
			if ((struct fi_context2 *)x.e.op_context < sctx || k >= posted || seen[k]) {
				snprintf(why, sizeof(why), "send completion with context %p: %s",
					 x.e.op_context, k < posted ? "seen twice" : "unknown");
				rc = T_FAIL;
				goto out;
			}
			seen[k] = true;
			sdone++;
		} else {
			if (x.e.op_context != &rctx[rdone]) {
				snprintf(why, sizeof(why), "receive %zu completed with context %p",
					 rdone, x.e.op_context);
				rc = T_FAIL;
				goto out;
			}
			char what[64];
			snprintf(what, sizeof(what), "message %zu of %zu", rdone, posted);
			if ((rc = check_data(what, sbuf + rdone * stride, len, 2000 + rdone,
					     stride - len)))
				goto out;
			rdone++;
			if (recvs < posted) {
				memset(sbuf + recvs * stride, GUARD, stride);
				ssize_t p = fi_recv(c->server.ep, sbuf + recvs * stride, len, sdesc(),
						    0, &rctx[recvs]);
				if (p) {
					snprintf(why, sizeof(why), "reposting receive %zu: %s", recvs,
						 fi_strerror((int)-p));
					rc = T_FAIL;
					goto out;
				}
				recvs++;
			}
		}
	}
	if ((rc = expect_quiet(c, &c->client, "after draining")))
		goto out;
	rc = expect_quiet(c, &c->server, "after draining");
out:
	free(sctx);
	free(rctx);
	free(seen);
	return rc;
}

/* ---- runner ---- */

/* A subtest's own part of its table entry. */
struct msg_case {
	int (*fn)(struct conn *c);
	int own_conn;		  /* opens its own connections */
	uint64_t client_cq_flags; /* added to the client's CQ bind */
};
#define CASE(name, fn, own_conn, flags) { name, NULL, &(const struct msg_case){ fn, own_conn, flags } }

static const struct nd_subtest subtests[] = {
	CASE("pingpong", t_pingpong, 0, 0),
	CASE("bandwidth", t_bandwidth, 0, 0),
	CASE("rma_write", t_rma_write, 0, 0),
	CASE("rma_read", t_rma_read, 0, 0),
	CASE("rma_writedata", t_rma_writedata, 0, 0),
	CASE("cq_data", t_cq_data, 0, 0),
	CASE("multi_iov", t_multi_iov, 0, 0),
	CASE("inject", t_inject, 0, 0),
	CASE("selective_completion", t_selective_completion, 0, FI_SELECTIVE_COMPLETION),
	CASE("unexpected", t_unexpected, 0, 0),
	CASE("shutdown_flush", t_shutdown_flush, 0, 0),
	CASE("remote_access_error", t_remote_access_error, 1, 0),
	CASE("bad_input", t_bad_input, 1, 0),
	CASE("eagain", t_eagain, 0, 0),
};

/* Runs a subtest on a fresh connection, unless it opens its own. */
static int run_case(const struct nd_subtest *t)
{
	const struct msg_case *m = t->data;
	if (m->own_conn)
		return m->fn(NULL);
	struct conn *c;
	int rc = conn_open(&c, m->client_cq_flags);
	if (rc == T_PASS)
		rc = m->fn(c);
	conn_close(c);
	return rc;
}

static struct nd_suite suite = { ND_SUITE(subtests), .run = run_case };

static void setup(const char *address)
{
	struct fi_info *hints = fi_allocinfo();
	hints->fabric_attr->prov_name = strdup(prov);
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG | FI_RMA;
	hints->mode = FI_RX_CQ_DATA | FI_CONTEXT | FI_CONTEXT2;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				      FI_MR_PROV_KEY;
	CHECK(fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), address, "0", FI_SOURCE, hints, &info));
	fi_freeinfo(hints);
	mr_mode = info->domain_attr->mr_mode;
	max_msg = info->ep_attr->max_msg_size;
	inject_size = info->tx_attr->inject_size;
	tx_iov_limit = info->tx_attr->iov_limit;
	rx_iov_limit = info->rx_attr->iov_limit;
	rma_iov_limit = info->tx_attr->rma_iov_limit;
	cq_data_size = info->domain_attr->cq_data_size;
	iwarp = info->ep_attr->protocol == FI_PROTO_IWARP;
	tx_size = info->tx_attr->size;
	rx_size = info->rx_attr->size;
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	struct fi_eq_attr eq_attr = { .wait_obj = FI_WAIT_FD, .size = 256 };
	CHECK(fi_eq_open(fabric, &eq_attr, &eq, NULL));
	CHECK(fi_passive_ep(fabric, info, &pep, NULL));
	CHECK(fi_pep_bind(pep, &eq->fid, 0));
	CHECK(fi_listen(pep));
	size_t len = sizeof(listen_addr);
	CHECK(fi_getname(&pep->fid, &listen_addr, &len));

	char service[16];
	snprintf(service, sizeof(service), "%u",
		 ntohs(((struct sockaddr_in *)&listen_addr)->sin_port));
	hints = fi_allocinfo();
	hints->fabric_attr->prov_name = strdup(prov);
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG | FI_RMA;
	hints->mode = FI_RX_CQ_DATA | FI_CONTEXT | FI_CONTEXT2;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->domain_attr->mr_mode = mr_mode;
	CHECK(fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), address, service, 0, hints, &client_info));
	fi_freeinfo(hints);

	cbuf = mmap(NULL, BUF_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	sbuf = mmap(NULL, BUF_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (cbuf == MAP_FAILED || sbuf == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	cmr = reg(cbuf, BUF_SIZE, 1);
	smr = reg(sbuf, BUF_SIZE, 2);
	printf("# %s on %s: mr_mode 0x%llx, max_msg_size %zu, inject_size %zu, iov_limit tx %zu rx %zu, "
	       "rma_iov_limit %zu, cq_data_size %zu, tx/rx size %zu/%zu%s\n",
	       info->fabric_attr->prov_name, info->domain_attr->name, (unsigned long long)mr_mode,
	       max_msg, inject_size, tx_iov_limit, rx_iov_limit, rma_iov_limit, cq_data_size,
	       tx_size, rx_size, lax ? ", lax" : "");
	fflush(stdout);
}

static void teardown(void)
{
	fi_close(&cmr->fid);
	fi_close(&smr->fid);
	fi_close(&pep->fid);
	fi_close(&eq->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(client_info);
	fi_freeinfo(info);
	munmap(cbuf, BUF_SIZE);
	munmap(sbuf, BUF_SIZE);
}

static int lax_opt = -1;

static int option(int opt, const char *arg)
{
	switch (opt) {
	case 'l': lax_opt = 1; return 0;
	case 'L': lax_opt = 0; return 0;
	case 'v': verbose = true; return 0;
	}
	return -1;
}

int main(int argc, char **argv)
{
	const char *address = nd_default_address();
	const struct nd_cli cli = { .optstring = "p:a:t:lvLh", .prov = &prov, .address = &address,
				    .suite = &suite, .option = option,
				    .usage = "usage: %s [-p provider] [-a address] [-t subtest] [-l|-L] [-v]\n" };
	if (nd_parse_options(&cli, argc, argv) || nd_check_only(&suite))
		return 2;
	lax = lax_opt >= 0 ? lax_opt : strncmp(prov, "verbs", 5) == 0;
	setup(address);
	int status = nd_run_subtests(&suite);
	teardown();
	return status;
}
