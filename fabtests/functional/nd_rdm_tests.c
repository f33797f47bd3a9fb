/*
 * nd_rdm_tests: FI_EP_RDM data-path tests through libfabric's ofi_rxm layered
 * over an FI_EP_MSG provider (-p "nd;ofi_rxm", -p "verbs;ofi_rxm"), two
 * endpoints in one process, written against the plain libfabric API only.
 *
 *   nd_rdm_tests [-p PROVIDER] [-a ADDRESS] [-t SUBTEST] [-v]
 *
 * Both endpoints are opened on ADDRESS (default $ND_GUEST_IP or 10.0.2.15)
 * from one fi_getinfo (caps FI_MSG | FI_TAGGED | FI_RMA), share one AV
 * holding both addresses, and each has its own CQ (FI_CQ_FORMAT_TAGGED).
 * ofi_rxm connects them on first use. Subtests:
 *
 *   tagged_pingpong  fi_tsend/fi_trecv round trips of 1 B .. 1 MiB (eager,
 *                    segmented and rendezvous protocols), content, tag,
 *                    length and completion flags checked
 *   tag_matching     receives for two tags posted, messages sent in the other
 *                    order, and one sent before its receive is posted: each
 *                    lands in the receive with its tag
 *   rma_write        fi_write into the peer's registered buffer, verified
 *   rma_read         fi_read from it, verified
 *   rma_after_close  a region B closed is out of reach: A's write with its
 *                    key leaves B's memory as it is (runs last: the refused
 *                    write ends A's connection to B)
 *
 * Without -t every subtest runs. Prints "PASS: name" / "FAIL: name: why"
 * per subtest; exits 1 when any failed. FI_OFI_RXM_USE_SRX=1 in the
 * environment makes ofi_rxm use a shared receive context; the tests are
 * the same. Every wait is bounded (WAIT_MS). FI_UNIVERSE_SIZE defaults to
 * 16 here (see main).
 */
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "nd_subtest.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#define WAIT_MS 5000
#define QUIET_MS 200
#define BUF_SIZE (2u << 20)
#define QMAX 1024

struct comp {
	bool is_err;
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
};

struct side {
	const char *name;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_mr *mr;
	uint8_t *buf;
	fi_addr_t addr; /* this endpoint's address in the AV */
	struct comp q[QMAX];
	int head, tail, cq_failed;
};

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_av *av;
static struct fi_info *info;
static struct side A = { .name = "A" }, B = { .name = "B" };
static uint64_t mr_mode;
static bool verbose;

/* ---- helpers ---- */

static void *desc_of(struct side *s)
{
	return (mr_mode & FI_MR_LOCAL) ? fi_mr_desc(s->mr) : NULL;
}

static uint64_t raddr(struct side *s, size_t off)
{
	return (mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)(s->buf + off) : off;
}

/* ---- completions: both CQs are always polled (ofi_rxm progresses
 * connections and protocols from there), entries queued per side. ---- */

static void poll_side(struct side *s)
{
	struct fi_cq_tagged_entry e[16];
	for (;;) {
		ssize_t n = fi_cq_read(s->cq, e, 16);
		if (n > 0) {
			for (ssize_t i = 0; i < n; i++) {
				struct comp *c = &s->q[s->tail++ % QMAX];
				memset(c, 0, sizeof(*c));
				c->e = e[i];
				if (verbose)
					fprintf(stderr, "  %s cq: ctx %p flags 0x%llx len %zu tag 0x%llx\n",
						s->name, e[i].op_context, (unsigned long long)e[i].flags,
						e[i].len, (unsigned long long)e[i].tag);
			}
			continue;
		}
		if (n == -FI_EAVAIL) {
			struct comp *c = &s->q[s->tail++ % QMAX];
			memset(c, 0, sizeof(*c));
			c->is_err = true;
			if (fi_cq_readerr(s->cq, &c->err, 0) < 0) {
				s->tail--;
				s->cq_failed = -FI_EOTHER;
				return;
			}
			c->e.op_context = c->err.op_context;
			continue;
		}
		if (n != -FI_EAGAIN)
			s->cq_failed = (int)n;
		return;
	}
}

static void poll_both(void)
{
	poll_side(&A);
	poll_side(&B);
}

/* The next completion or error entry of S, within WAIT_MS. */
static int next_comp(struct side *s, const char *what, struct comp *x)
{
	double end = now_ms() + WAIT_MS;
	for (;;) {
		poll_both();
		if (s->cq_failed)
			FAIL("%s: fi_cq_read on %s: %s", what, s->name, fi_strerror(-s->cq_failed));
		if (s->head != s->tail)
			break;
		if (now_ms() > end)
			FAIL("timeout: no completion on %s within %d ms (%s)", s->name, WAIT_MS, what);
		sched_yield();
	}
	*x = s->q[s->head++ % QMAX];
	return T_PASS;
}

static int expect_comp(struct side *s, void *ctx, uint64_t flags, size_t len, const char *what,
		       struct comp *got)
{
	struct comp x;
	RUN(next_comp(s, what, &x));
	if (x.is_err)
		FAIL("%s: error completion on %s: %s (prov_errno %d)", what, s->name,
		     fi_strerror(x.err.err), x.err.prov_errno);
	if (x.e.op_context != ctx)
		FAIL("%s: op_context %p, expected %p", what, x.e.op_context, ctx);
	if ((x.e.flags & flags) != flags)
		FAIL("%s: completion flags 0x%llx lack 0x%llx", what, (unsigned long long)x.e.flags,
		     (unsigned long long)(flags & ~x.e.flags));
	if (len != (size_t)-1 && x.e.len != len)
		FAIL("%s: completion len %zu, expected %zu", what, x.e.len, len);
	if (got)
		*got = x;
	return T_PASS;
}

static int expect_quiet(struct side *s, const char *what)
{
	double end = now_ms() + QUIET_MS;
	while (now_ms() < end) {
		poll_both();
		if (s->head != s->tail)
			FAIL("%s: unexpected completion on %s (ctx %p)", what, s->name,
			     s->q[s->head % QMAX].e.op_context);
		sched_yield();
	}
	return T_PASS;
}

/* Posts with -FI_EAGAIN retried (ofi_rxm returns it while connecting),
 * progressing both CQs in between, for at most WAIT_MS. */
#define POST(what, call)                                                                  \
	do {                                                                              \
		double end_ = now_ms() + WAIT_MS;                                         \
		ssize_t rc_;                                                              \
		while ((rc_ = (call)) == -FI_EAGAIN && now_ms() < end_)                   \
			poll_both();                                                      \
		if (rc_)                                                                  \
			FAIL("%s: %s: %s", what, #call, fi_strerror((int)-rc_));          \
	} while (0)

/* ---- subtests ---- */

/* A tagged message of LEN bytes from S to R with TAG. */
static int tagged_one(struct side *s, struct side *r, size_t len, uint64_t tag, unsigned seed)
{
	struct fi_context2 rctx, sctx;
	char what[80];
	snprintf(what, sizeof(what), "%zu-byte tagged message %s -> %s", len, s->name, r->name);
	memset(r->buf, GUARD, len + 64);
	POST(what, fi_trecv(r->ep, r->buf, len, desc_of(r), s->addr, tag, 0, &rctx));
	fill(s->buf, len, seed);
	POST(what, fi_tsend(s->ep, s->buf, len, desc_of(s), r->addr, tag, &sctx));
	struct comp x;
	RUN(expect_comp(r, &rctx, FI_RECV | FI_TAGGED, len, what, &x));
	if (x.e.tag != tag)
		FAIL("%s: tag 0x%llx, expected 0x%llx", what, (unsigned long long)x.e.tag,
		     (unsigned long long)tag);
	RUN(expect_comp(s, &sctx, FI_SEND | FI_TAGGED, (size_t)-1, what, NULL));
	return check_data(what, r->buf, len, seed, 64);
}

static int t_tagged_pingpong(void)
{
	size_t max = info->ep_attr->max_msg_size;
	int n = 0;
	for (size_t len = 1; len <= (1u << 20) && len <= max; len *= 4, n++) {
		for (int round = 0; round < 2; round++) {
			RUN(tagged_one(&A, &B, len, 0x100 + n, 2 * n + round));
			RUN(tagged_one(&B, &A, len, 0x200 + n, 100 + 2 * n + round));
		}
	}
	RUN(tagged_one(&A, &B, 100000, 0x300, 77)); /* not a power of two */
	RUN(expect_quiet(&A, "after ping-pong"));
	RUN(expect_quiet(&B, "after ping-pong"));
	printf("  tagged_pingpong: %d sizes from 1 B to 1 MiB, 2 round trips each\n", n);
	return T_PASS;
}

static int t_tag_matching(void)
{
	const size_t len = 3000;
	struct fi_context2 r1, r2, r3, s1, s2, s3;
	struct comp x;
	memset(B.buf, GUARD, 3 * 65536);
	POST("trecv tag 1", fi_trecv(B.ep, B.buf, len, desc_of(&B), A.addr, 0x1111, 0, &r1));
	POST("trecv tag 2", fi_trecv(B.ep, B.buf + 65536, len, desc_of(&B), A.addr, 0x2222, 0, &r2));
	fill(A.buf, len, 21);
	fill(A.buf + 65536, len, 22);
	/* Tag 2 first: it must not land in the receive posted first. */
	POST("tsend tag 2", fi_tsend(A.ep, A.buf + 65536, len, desc_of(&A), B.addr, 0x2222, &s2));
	RUN(expect_comp(&B, &r2, FI_RECV | FI_TAGGED, len, "tag 0x2222 receive", &x));
	if (x.e.tag != 0x2222)
		FAIL("tag 0x2222 receive reports tag 0x%llx", (unsigned long long)x.e.tag);
	RUN(check_data("tag 0x2222 message", B.buf + 65536, len, 22, 64));
	POST("tsend tag 1", fi_tsend(A.ep, A.buf, len, desc_of(&A), B.addr, 0x1111, &s1));
	RUN(expect_comp(&B, &r1, FI_RECV | FI_TAGGED, len, "tag 0x1111 receive", &x));
	RUN(check_data("tag 0x1111 message", B.buf, len, 21, 64));
	/* Unexpected: sent before its receive exists. */
	fill(A.buf + 2 * 65536, len, 23);
	POST("tsend tag 3", fi_tsend(A.ep, A.buf + 2 * 65536, len, desc_of(&A), B.addr, 0x3333, &s3));
	double until = now_ms() + 200;
	while (now_ms() < until)
		poll_both();
	POST("trecv tag 3",
	     fi_trecv(B.ep, B.buf + 2 * 65536, len, desc_of(&B), A.addr, 0x3333, 0, &r3));
	RUN(expect_comp(&B, &r3, FI_RECV | FI_TAGGED, len, "unexpected tag 0x3333", &x));
	if (x.e.tag != 0x3333)
		FAIL("tag 0x3333 receive reports tag 0x%llx", (unsigned long long)x.e.tag);
	RUN(check_data("unexpected tag 0x3333 message", B.buf + 2 * 65536, len, 23, 64));
	/* Sends complete, each once, in some order. */
	bool seen[3] = { false };
	for (int i = 0; i < 3; i++) {
		double end = now_ms() + WAIT_MS;
		while (A.head == A.tail && now_ms() < end)
			poll_both();
		if (A.head == A.tail)
			FAIL("timeout: %d of 3 tagged sends completed", i);
		struct comp y = A.q[A.head++ % QMAX];
		void *ctx = y.e.op_context;
		int k = ctx == &s1 ? 0 : ctx == &s2 ? 1 : ctx == &s3 ? 2 : -1;
		if (y.is_err || k < 0 || seen[k])
			FAIL("tagged send completion %d: %s, context %p", i,
			     y.is_err ? fi_strerror(y.err.err) : "ok", ctx);
		seen[k] = true;
	}
	RUN(expect_quiet(&A, "after tag matching"));
	RUN(expect_quiet(&B, "after tag matching"));
	printf("  tag_matching: out-of-order tags and an unexpected message matched\n");
	return T_PASS;
}

static const size_t rma_sizes[] = { 1, 64, 4096, 65536, 1u << 20 };

static int t_rma_write(void)
{
	for (size_t i = 0; i < 5; i++) {
		size_t len = rma_sizes[i], off = 8 + i;
		struct fi_context2 ctx;
		char what[64];
		snprintf(what, sizeof(what), "%zu-byte fi_write", len);
		memset(B.buf + off, GUARD, len + 64);
		fill(A.buf, len, 40 + i);
		POST(what, fi_write(A.ep, A.buf, len, desc_of(&A), B.addr, raddr(&B, off),
				    fi_mr_key(B.mr), &ctx));
		RUN(expect_comp(&A, &ctx, FI_WRITE | FI_RMA, (size_t)-1, what, NULL));
		RUN(check_data(what, B.buf + off, len, 40 + i, 64));
	}
	RUN(expect_quiet(&B, "the target of fi_write"));
	printf("  rma_write: 1 B .. 1 MiB verified\n");
	return T_PASS;
}

static int t_rma_read(void)
{
	for (size_t i = 0; i < 5; i++) {
		size_t len = rma_sizes[i], off = 8 + i;
		struct fi_context2 ctx;
		char what[64];
		snprintf(what, sizeof(what), "%zu-byte fi_read", len);
		fill(B.buf + off, len, 60 + i);
		memset(A.buf, GUARD, len + 64);
		POST(what, fi_read(A.ep, A.buf, len, desc_of(&A), B.addr, raddr(&B, off),
				   fi_mr_key(B.mr), &ctx));
		RUN(expect_comp(&A, &ctx, FI_READ | FI_RMA, (size_t)-1, what, NULL));
		RUN(check_data(what, A.buf, len, 60 + i, 64));
	}
	RUN(expect_quiet(&B, "the target of fi_read"));
	printf("  rma_read: 1 B .. 1 MiB verified\n");
	return T_PASS;
}

/* Remote access ends at fi_close, through ofi_rxm too: B registers a region
 * of its own (ofi_rxm registers it with the core provider), A writes it with
 * its key, B closes it and puts new bytes there. A's write with the old key
 * must then leave those bytes as they are: its completion is an error, or,
 * on iWARP, which reports write errors at the responder only, it may
 * complete at A while B's side refuses it. Runs last: the refused write ends
 * the connection from A to B. */
static int t_rma_after_close(void)
{
	const size_t len = 65536;
	uint8_t *target = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (target == MAP_FAILED)
		FAIL("mmap: %s", strerror(errno));
	const uint64_t addr = (mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)target : 0;
	struct fid_mr *mr = NULL;
	int rc = fi_mr_reg(domain, target, len, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 21, 0, &mr, NULL);
	if (rc)
		FAIL("fi_mr_reg: %s", fi_strerror(-rc));
	if (mr_mode & FI_MR_ENDPOINT) {
		if ((rc = fi_mr_bind(mr, &B.ep->fid, 0)) || (rc = fi_mr_enable(mr)))
			FAIL("fi_mr_bind/enable: %s", fi_strerror(-rc));
	}
	const uint64_t key = fi_mr_key(mr);
	struct fi_context2 live, stale;
	fill(A.buf, len, 81);
	POST("the write with the live key", fi_write(A.ep, A.buf, len, desc_of(&A), B.addr, addr, key, &live));
	RUN(expect_comp(&A, &live, FI_WRITE | FI_RMA, (size_t)-1, "the write with the live key", NULL));
	RUN(check_data("the write with the live key", target, len, 81, 0));
	if ((rc = fi_close(&mr->fid)))
		FAIL("fi_close(mr): %s", fi_strerror(-rc));
	memset(target, 0x5a, len);
	fill(A.buf, len, 82);
	POST("the write with the closed region's key",
	     fi_write(A.ep, A.buf, len, desc_of(&A), B.addr, addr, key, &stale));
	struct comp x;
	RUN(next_comp(&A, "the write with the closed region's key", &x));
	/* A write in flight lands within this if it is going to. */
	double end = now_ms() + QUIET_MS;
	while (now_ms() < end)
		poll_both();
	for (size_t i = 0; i < len; i++) {
		if (target[i] != 0x5a)
			FAIL("the write with the closed region's key changed byte %zu of its memory (0x%02x); "
			     "the write completed %s",
			     i, target[i], x.is_err ? "in error" : "without error");
	}
	printf("  rma_after_close: the write with the closed region's key %s%s; the memory kept its bytes\n",
	       x.is_err ? "failed: " : "completed at the requester (refused by the responder)",
	       x.is_err ? fi_strerror(x.err.err) : "");
	munmap(target, len);
	return T_PASS;
}

/* ---- setup ---- */

static void open_side(struct side *s, uint64_t key)
{
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED, .size = 1024 };
	CHECK(fi_endpoint(domain, info, &s->ep, NULL));
	CHECK(fi_cq_open(domain, &cq_attr, &s->cq, NULL));
	CHECK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_ep_bind(s->ep, &av->fid, 0));
	CHECK(fi_enable(s->ep));
	s->buf = mmap(NULL, BUF_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s->buf == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	CHECK(fi_mr_reg(domain, s->buf, BUF_SIZE,
			FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0,
			key, 0, &s->mr, NULL));
	if (mr_mode & FI_MR_ENDPOINT) {
		CHECK(fi_mr_bind(s->mr, &s->ep->fid, 0));
		CHECK(fi_mr_enable(s->mr));
	}
}

static void close_side(struct side *s)
{
	fi_close(&s->ep->fid);
	fi_close(&s->mr->fid);
	fi_close(&s->cq->fid);
	munmap(s->buf, BUF_SIZE);
}

static const struct nd_subtest subtests[] = {
	{ "tagged_pingpong", t_tagged_pingpong },
	{ "tag_matching", t_tag_matching },
	{ "rma_write", t_rma_write },
	{ "rma_read", t_rma_read },
	{ "rma_after_close", t_rma_after_close },
};
static struct nd_suite suite = { ND_SUITE(subtests) };

static int option(int opt, const char *arg)
{
	if (opt != 'v')
		return -1;
	verbose = true;
	return 0;
}

int main(int argc, char **argv)
{
	const char *prov = "nd;ofi_rxm", *address = nd_default_address();
	/* Its usage has never listed the subtests. */
	const struct nd_cli cli = { .optstring = "p:a:t:v", .prov = &prov, .address = &address,
				    .suite = &suite, .unlisted = true, .option = option,
				    .usage = "usage: %s [-p provider] [-a address] [-t subtest] [-v]\n" };
	if (nd_parse_options(&cli, argc, argv) || nd_check_only(&suite))
		return 2;

	/* Two peers: ofi_rxm sizes its MSG completion queue by the universe
	 * size (default 256), which overflows small devices' CQs (Soft-RoCE
	 * allows 32767 entries). The environment may still override it. */
	setenv("FI_UNIVERSE_SIZE", "16", 0);
	struct fi_info *hints = fi_allocinfo();
	hints->fabric_attr->prov_name = strdup(prov);
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_TAGGED | FI_RMA;
	hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				      FI_MR_PROV_KEY | FI_MR_ENDPOINT;
	CHECK(fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), address, NULL, FI_SOURCE, hints, &info));
	fi_freeinfo(hints);
	mr_mode = info->domain_attr->mr_mode;
	printf("# %s on %s: mr_mode 0x%llx, max_msg_size %zu, FI_UNIVERSE_SIZE=%s, "
	       "FI_OFI_RXM_USE_SRX=%s\n",
	       info->fabric_attr->prov_name, info->domain_attr->name, (unsigned long long)mr_mode,
	       info->ep_attr->max_msg_size, getenv("FI_UNIVERSE_SIZE"),
	       getenv("FI_OFI_RXM_USE_SRX") ? getenv("FI_OFI_RXM_USE_SRX") : "(unset)");
	fflush(stdout);
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE, .count = 4 };
	CHECK(fi_av_open(domain, &av_attr, &av, NULL));
	open_side(&A, 11);
	open_side(&B, 12);
	char name[2][128];
	size_t len = sizeof(name[0]);
	CHECK(fi_getname(&A.ep->fid, name[0], &len));
	len = sizeof(name[1]);
	CHECK(fi_getname(&B.ep->fid, name[1], &len));
	if (fi_av_insert(av, name[0], 1, &A.addr, 0, NULL) != 1 ||
	    fi_av_insert(av, name[1], 1, &B.addr, 0, NULL) != 1) {
		fprintf(stderr, "fi_av_insert failed\n");
		return 1;
	}

	int status = nd_run_subtests(&suite);
	close_side(&A);
	close_side(&B);
	fi_close(&av->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	return status;
}
