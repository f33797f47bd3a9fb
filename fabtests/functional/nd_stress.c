/*
 * nd_stress: many threads on one FI_THREAD_SAFE domain, every byte checked
 * and every request accounted for.
 *
 * One process holds both ends of every connection, so that ThreadSanitizer
 * sees every thread that touches the provider. Everything shares one
 * domain, one EQ and one CQ:
 *   - two threads read the EQ at once (fi_eq_sread) and serve every
 *     connection's events: they accept requests, posting the accepter's
 *     receives first, and flag each side's FI_CONNECTED and FI_SHUTDOWN;
 *   - two threads read the CQ at once, one with fi_cq_read and one with
 *     fi_cq_sread; whichever takes a receive checks its bytes and posts the
 *     receive again on its endpoint, then gives the sender a credit (a
 *     message is sent only into a posted receive);
 *   - the subtests' own threads post.
 *
 * Subtests:
 *   traffic   8 threads post sends (every size to 4 KiB, with descriptors),
 *             injects, and RDMA writes each followed by a read of what it
 *             wrote, on 6 connections: two pairs of threads share an
 *             endpoint, four threads have one each; two of those post from
 *             the accepting side.
 *   teardown  while 3 threads carry traffic on 2 connections: a thread
 *             shuts connections down under a sender and closes them; a
 *             thread posts receives on unconnected endpoints and cancels
 *             them; a thread closes a region while a peer's RDMA writes
 *             into it are in flight, then checks that none lands after.
 *   churn     4 threads connect, exchange a message each way, shut down
 *             and close, over and over (-c times each), beside 2 threads'
 *             traffic.
 *
 * Every request that a call accepted ends in exactly one completion or one
 * error entry; every message that arrives is one that was sent, once, with
 * its bytes; on a connection that is not torn down, every message sent
 * arrives. Every wait is bounded.
 *
 * usage: nd_stress [-p PROV] [-a ADDRESS] [-t SUBTEST] [-n ROUNDS] [-c CYCLES]
 *                  [-i REQUESTS] [-T endpoint]
 * (-n scales every subtest; -c sets churn's cycles per thread, 15; -i the
 * requests each traffic thread posts, 400, three quarters of it beside the
 * teardown and the churn; -T
 * endpoint runs churn on an FI_THREAD_ENDPOINT domain: each endpoint used by
 * one thread at a time while the EQ's readers make its connection, which
 * posts the receives that waited for it.)
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "nd_subtest.h"

enum {
	N_WORKERS = 8,
	MAX_CONNS = 16,
	RX_DEPTH = 16,	    /* receives posted on each side of a connection */
	MSG_MAX = 4096,
	TX_SLOTS = 4,	    /* sends a worker has in flight at most */
	RMA_MAX = 64 * 1024,
	N_THREAD_SLOTS = 24, /* workers and helper threads that own buffers */
	MAX_SEQ = 1 << 16,
	CTX_POOL = 4096,
	WAIT_MS = 20000,
};

static const char *prov = "nd";
static const char *address;
static int rounds = 1;
static int churn_cycles = 15; /* -c: per churning thread */
static int iterations = 400;	/* -i: each traffic thread's requests, per round */
/* -T endpoint: the domain is FI_THREAD_ENDPOINT (churn only): each endpoint
 * is used by one thread at a time, while the EQ's readers make its
 * connection; receives are not posted again by the CQ's readers. */
static bool endpoint_model;

/* ---- what every thread may record ---- */

static pthread_mutex_t why_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int failures;

/* Records the first failure's reason (the subtest prints it); counts all. */
static void failure(const char *fmt, ...)
{
	pthread_mutex_lock(&why_lock);
	if (atomic_fetch_add(&failures, 1) == 0) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(why, sizeof(why), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&why_lock);
}

/* ---- the shared objects ---- */

static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_eq *eq;
static struct fid_pep *pep;
static struct fid_cq *cq;
static struct fid_mr *mr;
static uint8_t *mem;
static size_t mem_len;
static uint64_t mr_mode;
static size_t inject_size;
static char listen_addr[128];
static atomic_bool stop_service;

static void *desc(void) { return (mr_mode & FI_MR_LOCAL) ? fi_mr_desc(mr) : NULL; }

/* The address a peer names for LOCAL in a region registered at BASE. */
static uint64_t remote_addr(const void *local, const void *base)
{
	return (mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)local
					   : (uint64_t)((const uint8_t *)local - (const uint8_t *)base);
}

/* ---- requests ---- */

enum op_kind { OP_RECV, OP_SEND, OP_WRITE, OP_READ };
enum op_state { OP_IDLE, OP_POSTED, OP_DONE };

struct conn;

struct op {
	struct fi_context2 fi; /* first: the provider may use it (FI_CONTEXT) */
	enum op_kind kind;
	struct conn *conn;
	int side, slot;
	atomic_int state;
	int err; /* 0, or the error entry's err */
	size_t len;
};

static atomic_long posted, completed, errors, cancelled, refused;

static const char *kind_name(enum op_kind k)
{
	static const char *names[] = { "receive", "send", "write", "read" };
	return names[k];
}

/* Waits until OP is no longer posted; false after WAIT_MS. */
static bool wait_op(struct op *op)
{
	double deadline = now_ms() + WAIT_MS;
	while (atomic_load(&op->state) == OP_POSTED) {
		if (now_ms() > deadline)
			return false;
		sched_yield();
	}
	return true;
}

/* ---- connections ---- */

/* One side of one incarnation of a connection: the endpoint's context.
 * Taken from a pool and never reused, so that an event read for an
 * endpoint just closed cannot mark the next one. */
struct end_ctx {
	struct conn *conn;
	int side; /* 0: the connecting side, 1: the accepting side */
	atomic_bool connected, shutdown, failed;
};
static struct end_ctx ctx_pool[CTX_POOL];
static atomic_int ctx_next;

static struct end_ctx *new_ctx(struct conn *c, int side)
{
	int i = atomic_fetch_add(&ctx_next, 1);
	if (i >= CTX_POOL) {
		failure("more than %d endpoints opened", CTX_POOL);
		return NULL;
	}
	struct end_ctx *x = &ctx_pool[i];
	x->conn = c;
	x->side = side;
	return x;
}

/* The message header; the rest of the message is pat(seed) bytes. */
struct msg_hdr {
	uint32_t magic;
	uint16_t sender, side;
	uint32_t seq, len;
};
#define MSG_MAGIC 0x6e647374u
static unsigned msg_seed(unsigned sender, unsigned seq) { return sender * 1000003u + seq; }

struct conn {
	int id;
	pthread_mutex_t lock; /* ep[], ctx[] and draining, against reposting receivers */
	struct fid_ep *ep[2];
	struct end_ctx *ctx[2];
	bool draining;
	atomic_int credits[2]; /* messages side s may still send: receives posted at 1-s */
	struct op rx[2][RX_DEPTH];
	uint8_t *rx_buf; /* [2][RX_DEPTH][MSG_MAX] */
};
static struct conn conns[MAX_CONNS];

static uint8_t *rx_slot(struct conn *c, int side, int i)
{
	return c->rx_buf + ((size_t)side * RX_DEPTH + (size_t)i) * MSG_MAX;
}

/* Per sender: which sequence numbers arrived, and how many were sent. */
static atomic_uchar seen[N_THREAD_SLOTS][MAX_SEQ];
static atomic_int sent_count[N_THREAD_SLOTS], seen_count[N_THREAD_SLOTS];

static int post_recv_locked(struct conn *c, int side, int i)
{
	struct op *op = &c->rx[side][i];
	op->kind = OP_RECV;
	op->conn = c;
	op->side = side;
	op->slot = i;
	atomic_store(&op->state, OP_POSTED);
	ssize_t rc = fi_recv(c->ep[side], rx_slot(c, side, i), MSG_MAX, desc(), 0, &op->fi);
	if (rc) {
		atomic_store(&op->state, OP_IDLE);
		return (int)rc;
	}
	atomic_fetch_add(&posted, 1);
	return 0;
}

/* A receive completed: check the message and post the receive again. */
static void received(struct op *op)
{
	struct conn *c = op->conn;
	const uint8_t *p = rx_slot(c, op->side, op->slot);
	struct msg_hdr h;
	if (op->len < sizeof(h) || op->len > MSG_MAX) {
		failure("connection %d side %d: a message of %zu bytes", c->id, op->side, op->len);
		return;
	}
	memcpy(&h, p, sizeof(h));
	if (h.magic != MSG_MAGIC || h.len != op->len || h.sender >= N_THREAD_SLOTS || h.seq >= MAX_SEQ ||
	    h.side != 1 - op->side) {
		failure("connection %d side %d: a bad header (magic %x, %u bytes said, %zu arrived, sender %u)",
			c->id, op->side, h.magic, h.len, op->len, h.sender);
		return;
	}
	long bad = verify(p + sizeof(h), op->len - sizeof(h), msg_seed(h.sender, h.seq));
	if (bad >= 0)
		failure("message %u of thread %u: byte %ld of %zu is wrong", h.seq, h.sender,
			bad + (long)sizeof(h), op->len);
	if (atomic_exchange(&seen[h.sender][h.seq], 1))
		failure("message %u of thread %u arrived twice", h.seq, h.sender);
	pthread_mutex_lock(&c->lock);
	if (!c->draining && c->ep[op->side] && !endpoint_model) {
		int rc = post_recv_locked(c, op->side, op->slot);
		if (rc)
			failure("connection %d: posting a receive again: %s", c->id, fi_strerror(-rc));
		else
			atomic_fetch_add(&c->credits[1 - op->side], 1);
	}
	pthread_mutex_unlock(&c->lock);
	/* Counted last: once every message has arrived, every receive is
	 * posted again. */
	atomic_fetch_add(&seen_count[h.sender], 1);
}

static void complete(struct op *op, int err, size_t len)
{
	if (!op) {
		failure("a completion without a context (err %d)", err);
		return;
	}
	/* Read before the request is marked done: its poster may reuse it
	 * from then on (a receive is reused only by received()). */
	const enum op_kind kind = op->kind;
	op->err = err;
	op->len = len;
	int was = atomic_exchange(&op->state, OP_DONE);
	if (was != OP_POSTED) {
		failure("a %s completed that was %s", kind_name(kind), was == OP_DONE ? "already complete" : "not posted");
		return;
	}
	atomic_fetch_add(&completed, 1);
	if (err) {
		atomic_fetch_add(&errors, 1);
		if (err == FI_ECANCELED)
			atomic_fetch_add(&cancelled, 1);
	} else if (kind == OP_RECV) {
		received(op);
	}
}

/* ---- the two CQ readers ---- */

static atomic_bool stop_readers;
/* Whether an error entry fails the subtest (traffic: yes). */
static atomic_bool errors_fail;

static void read_error(void)
{
	struct fi_cq_err_entry err = { 0 };
	ssize_t rc = fi_cq_readerr(cq, &err, 0);
	if (rc == -FI_EAGAIN)
		return; /* the other reader took it */
	if (rc != 1) {
		failure("fi_cq_readerr: %zd", rc);
		return;
	}
	if (atomic_load(&errors_fail))
		failure("an error completion: %s (%s)", fi_strerror(err.err),
			fi_cq_strerror(cq, err.prov_errno, err.err_data, NULL, 0));
	complete(err.op_context, err.err ? err.err : FI_EOTHER, err.len);
}

static void *cq_reader(void *arg)
{
	bool sleeping = arg != NULL;
	struct fi_cq_data_entry e[16];
	while (!atomic_load(&stop_readers)) {
		ssize_t n = sleeping ? fi_cq_sread(cq, e, 16, NULL, 50) : fi_cq_read(cq, e, 16);
		if (n == -FI_EAVAIL) {
			read_error();
			continue;
		}
		if (n == -FI_EAGAIN || (sleeping && n == -FI_ETIMEDOUT)) {
			if (!sleeping)
				sched_yield();
			continue;
		}
		if (n < 0) {
			failure("fi_cq_%sread: %s", sleeping ? "s" : "", fi_strerror((int)-n));
			break;
		}
		for (ssize_t i = 0; i < n; i++)
			complete(e[i].op_context, 0, e[i].len);
	}
	return NULL;
}

/* ---- the two EQ readers ---- */

struct conn_req {
	uint32_t id;
	uint32_t magic;
};

static void accept_request(struct fi_eq_cm_entry *e, size_t len)
{
	struct conn_req req;
	if (len < sizeof(req)) {
		failure("a connection request with %zu bytes of data", len);
		fi_reject(pep, e->info->handle, NULL, 0);
		return;
	}
	memcpy(&req, e->data, sizeof(req));
	if (req.magic != MSG_MAGIC || req.id >= MAX_CONNS) {
		failure("a connection request with bad data");
		fi_reject(pep, e->info->handle, NULL, 0);
		return;
	}
	struct conn *c = &conns[req.id];
	struct end_ctx *x = new_ctx(c, 1);
	struct fid_ep *ep = NULL;
	int rc;
	if (!x || (rc = fi_endpoint(domain, e->info, &ep, x))) {
		failure("fi_endpoint for a request");
		fi_reject(pep, e->info->handle, NULL, 0);
		return;
	}
	if ((rc = fi_ep_bind(ep, &eq->fid, 0)) || (rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV)) ||
	    (rc = fi_enable(ep))) {
		failure("connection %u: the accepter's endpoint: %s", req.id, fi_strerror(-rc));
		fi_close(&ep->fid);
		fi_reject(pep, e->info->handle, NULL, 0);
		return;
	}
	pthread_mutex_lock(&c->lock);
	c->ep[1] = ep;
	c->ctx[1] = x;
	for (int i = 0; i < RX_DEPTH && !rc; i++)
		rc = post_recv_locked(c, 1, i);
	pthread_mutex_unlock(&c->lock);
	if (rc || (rc = fi_accept(ep, NULL, 0)))
		failure("connection %u: receives and fi_accept: %s", req.id, fi_strerror(-rc));
}

static void *eq_reader(void *arg)
{
	(void)arg;
	struct {
		struct fi_eq_cm_entry cm;
		uint8_t data[256];
	} e;
	while (!atomic_load(&stop_service)) {
		uint32_t event;
		ssize_t rc = fi_eq_sread(eq, &event, &e, sizeof(e), 100, 0);
		if (rc == -FI_EAGAIN || rc == -FI_ETIMEDOUT)
			continue;
		if (rc == -FI_EAVAIL) {
			struct fi_eq_err_entry err = { 0 };
			rc = fi_eq_readerr(eq, &err, 0);
			if (rc == -FI_EAGAIN)
				continue;
			if (rc != (ssize_t)sizeof(err)) {
				failure("fi_eq_readerr: %zd", rc);
				break;
			}
			struct end_ctx *x = err.fid ? err.fid->context : NULL;
			if (!x || err.fid == &pep->fid) {
				failure("an EQ error on the listener: %s", fi_strerror(err.err));
				continue;
			}
			/* A connection broken under a closed region, say. */
			atomic_store(&x->failed, true);
			continue;
		}
		if (rc < (ssize_t)sizeof(e.cm)) {
			failure("fi_eq_sread: %s", fi_strerror((int)-rc));
			break;
		}
		struct end_ctx *x = e.cm.fid && e.cm.fid != &pep->fid ? e.cm.fid->context : NULL;
		switch (event) {
		case FI_CONNREQ:
			accept_request(&e.cm, (size_t)rc - sizeof(e.cm));
			fi_freeinfo(e.cm.info);
			break;
		case FI_CONNECTED:
			if (x)
				atomic_store(&x->connected, true);
			else
				failure("FI_CONNECTED without an endpoint");
			break;
		case FI_SHUTDOWN:
			if (x)
				atomic_store(&x->shutdown, true);
			else
				failure("FI_SHUTDOWN without an endpoint");
			break;
		default:
			failure("unexpected EQ event %u", event);
		}
	}
	return NULL;
}

/* ---- opening and closing connections (any thread) ---- */

static bool wait_flag(atomic_bool *flag, atomic_bool *or_flag)
{
	double deadline = now_ms() + WAIT_MS;
	while (!atomic_load(flag) && !(or_flag && atomic_load(or_flag))) {
		if (now_ms() > deadline)
			return false;
		usleep(1000);
	}
	return true;
}

static bool conn_open(struct conn *c)
{
	struct end_ctx *x = new_ctx(c, 0);
	struct fid_ep *ep = NULL;
	int rc;
	if (!x)
		return false;
	if ((rc = fi_endpoint(domain, info, &ep, x))) {
		failure("connection %d: fi_endpoint: %s", c->id, fi_strerror(-rc));
		return false;
	}
	if ((rc = fi_ep_bind(ep, &eq->fid, 0)) || (rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV)) ||
	    (rc = fi_enable(ep))) {
		failure("connection %d: the connector's endpoint: %s", c->id, fi_strerror(-rc));
		fi_close(&ep->fid);
		return false;
	}
	pthread_mutex_lock(&c->lock);
	c->draining = false;
	c->ep[0] = ep;
	c->ctx[0] = x;
	c->ep[1] = NULL;
	c->ctx[1] = NULL;
	atomic_store(&c->credits[0], RX_DEPTH);
	atomic_store(&c->credits[1], RX_DEPTH);
	for (int i = 0; i < RX_DEPTH / 2 && !rc; i++)
		rc = post_recv_locked(c, 0, i);
	pthread_mutex_unlock(&c->lock);
	struct conn_req req = { (uint32_t)c->id, MSG_MAGIC };
	if (rc || (rc = fi_connect(ep, listen_addr, &req, sizeof(req)))) {
		failure("connection %d: receives and fi_connect: %s", c->id, fi_strerror(-rc));
		return false;
	}
	/* The other half while the connection is being made: the thread
	 * reading the EQ posts the first half to the queue pair meanwhile. */
	pthread_mutex_lock(&c->lock);
	for (int i = RX_DEPTH / 2; i < RX_DEPTH && !rc; i++)
		rc = post_recv_locked(c, 0, i);
	pthread_mutex_unlock(&c->lock);
	if (rc) {
		failure("connection %d: receives while connecting: %s", c->id, fi_strerror(-rc));
		return false;
	}
	double deadline = now_ms() + WAIT_MS;
	for (;;) {
		pthread_mutex_lock(&c->lock);
		struct end_ctx *s = c->ctx[1];
		pthread_mutex_unlock(&c->lock);
		if (atomic_load(&x->connected) && s && atomic_load(&s->connected))
			return true;
		if (now_ms() > deadline) {
			failure("connection %d: not connected within %d ms", c->id, WAIT_MS);
			return false;
		}
		usleep(1000);
	}
}

/* Every receive of C's accounted for. */
static bool rx_drained(struct conn *c)
{
	for (int s = 0; s < 2; s++)
		for (int i = 0; i < RX_DEPTH; i++)
			if (!wait_op(&c->rx[s][i])) {
				failure("connection %d side %d: receive %d never completed", c->id, s, i);
				return false;
			}
	return true;
}

/* Shuts C down from the connecting side (unless it is already down),
 * waits for both sides' FI_SHUTDOWN (or the error that broke it) and for
 * every receive to be flushed, and closes both endpoints. The caller's
 * own requests on C must be accounted for before the endpoints close. */
static void conn_shutdown(struct conn *c)
{
	pthread_mutex_lock(&c->lock);
	c->draining = true;
	pthread_mutex_unlock(&c->lock);
	int rc = fi_shutdown(c->ep[0], 0);
	if (rc && rc != -FI_ENOTCONN && rc != -FI_EOPBADSTATE)
		failure("connection %d: fi_shutdown: %s", c->id, fi_strerror(-rc));
}

static void conn_close(struct conn *c)
{
	for (int s = 0; s < 2; s++)
		if (c->ctx[s] && !wait_flag(&c->ctx[s]->shutdown, &c->ctx[s]->failed))
			failure("connection %d side %d: no FI_SHUTDOWN within %d ms", c->id, s, WAIT_MS);
	rx_drained(c);
	struct fid_ep *ep[2];
	pthread_mutex_lock(&c->lock);
	ep[0] = c->ep[0];
	ep[1] = c->ep[1];
	c->ep[0] = c->ep[1] = NULL;
	pthread_mutex_unlock(&c->lock);
	for (int s = 0; s < 2; s++)
		if (ep[s] && fi_close(&ep[s]->fid))
			failure("connection %d side %d: fi_close failed", c->id, s);
}

/* ---- posting from a worker ---- */

struct worker {
	int id; /* the buffers' and the messages' owner: < N_THREAD_SLOTS */
	struct conn *conn;
	int side;
	int iterations;
	bool inject, rma;
	atomic_bool *stop; /* set: stop early (the connection is going down) */
	/* results */
	int sends, injects, rmas, refusals;
	struct op tx[TX_SLOTS], write, read;
	uint8_t *tx_buf, *rma_src, *rma_dst, *rma_target; /* in mem */
};

static bool stopping(struct worker *w) { return w->stop && atomic_load(w->stop); }

/* Takes a send credit: a receive is posted at the peer. */
static bool take_credit(struct worker *w)
{
	atomic_int *credits = &w->conn->credits[w->side];
	double deadline = now_ms() + WAIT_MS;
	for (;;) {
		int n = atomic_load(credits);
		if (n > 0 && atomic_compare_exchange_weak(credits, &n, n - 1))
			return true;
		if (stopping(w))
			return false;
		if (now_ms() > deadline) {
			failure("thread %d: no receive posted at the peer within %d ms", w->id, WAIT_MS);
			return false;
		}
		sched_yield();
	}
}

static void build_msg(struct worker *w, uint8_t *p, size_t len)
{
	struct msg_hdr h = { MSG_MAGIC, (uint16_t)w->id, (uint16_t)w->side,
			     (uint32_t)atomic_fetch_add(&sent_count[w->id], 1), (uint32_t)len };
	if (h.seq >= MAX_SEQ) {
		failure("thread %d: more than %d messages", w->id, MAX_SEQ);
		h.seq = MAX_SEQ - 1;
	}
	memcpy(p, &h, sizeof(h));
	fill(p + sizeof(h), len - sizeof(h), msg_seed(h.sender, h.seq));
}

/* A call that may say -FI_EAGAIN: tried again until it takes the request,
 * or refuses it for another reason (returned), within WAIT_MS. */
#define POST(w, call)                                                          \
	({                                                                     \
		ssize_t rc_;                                                   \
		double deadline_ = now_ms() + WAIT_MS;                         \
		while ((rc_ = (call)) == -FI_EAGAIN && now_ms() < deadline_ && \
		       !stopping(w))                                           \
			sched_yield();                                         \
		rc_;                                                           \
	})

/* A refused call: fails the subtest unless the connection is going down. */
static bool refused_call(struct worker *w, const char *what, ssize_t rc)
{
	if (stopping(w) && rc != -FI_EAGAIN) {
		w->refusals++;
		atomic_fetch_add(&refused, 1);
		return true;
	}
	if (!stopping(w))
		failure("thread %d: %s: %s", w->id, what, fi_strerror((int)-rc));
	return false;
}

static bool do_send(struct worker *w, unsigned i)
{
	struct op *op = &w->tx[i % TX_SLOTS];
	if (!wait_op(op)) {
		failure("thread %d: a send never completed", w->id);
		return false;
	}
	if (op->err && !stopping(w))
		failure("thread %d: a send failed: %s", w->id, fi_strerror(op->err));
	if (!take_credit(w))
		return false;
	size_t len = sizeof(struct msg_hdr) + (i * 977u) % (MSG_MAX - sizeof(struct msg_hdr) + 1);
	uint8_t *buf = w->tx_buf + (size_t)(i % TX_SLOTS) * MSG_MAX;
	build_msg(w, buf, len);
	op->kind = OP_SEND;
	op->conn = w->conn;
	atomic_store(&op->state, OP_POSTED);
	ssize_t rc = POST(w, fi_send(w->conn->ep[w->side], buf, len, desc(), 0, &op->fi));
	if (rc) {
		atomic_store(&op->state, OP_IDLE);
		return refused_call(w, "fi_send", rc);
	}
	atomic_fetch_add(&posted, 1);
	w->sends++;
	return true;
}

static bool do_inject(struct worker *w, unsigned i)
{
	if (!take_credit(w))
		return false;
	uint8_t buf[256];
	size_t room = inject_size < sizeof(buf) ? inject_size : sizeof(buf);
	size_t len = sizeof(struct msg_hdr) + i % (room - sizeof(struct msg_hdr) + 1);
	build_msg(w, buf, len);
	ssize_t rc = POST(w, fi_inject(w->conn->ep[w->side], buf, len, 0));
	if (rc)
		return refused_call(w, "fi_inject", rc);
	w->injects++;
	return true;
}

/* An RDMA write of a pattern into the thread's own target, a read of it
 * back posted right behind (a read after a write on one connection sees
 * it), both waited for, and both copies checked. */
static bool do_rma(struct worker *w, unsigned i)
{
	size_t len = 1 + (i * 4099u) % RMA_MAX;
	unsigned seed = msg_seed(w->id, i) ^ 0x5a5a;
	fill(w->rma_src, len, seed);
	memset(w->rma_dst, GUARD, len);
	uint64_t key = fi_mr_key(mr);
	uint64_t at = remote_addr(w->rma_target, mem);
	w->write.kind = OP_WRITE;
	w->read.kind = OP_READ;
	struct fid_ep *ep = w->conn->ep[w->side];
	atomic_store(&w->write.state, OP_POSTED);
	ssize_t rc = POST(w, fi_write(ep, w->rma_src, len, desc(), 0, at, key, &w->write.fi));
	if (rc) {
		atomic_store(&w->write.state, OP_IDLE);
		return refused_call(w, "fi_write", rc);
	}
	atomic_fetch_add(&posted, 1);
	atomic_store(&w->read.state, OP_POSTED);
	rc = POST(w, fi_read(ep, w->rma_dst, len, desc(), 0, at, key, &w->read.fi));
	if (rc) {
		atomic_store(&w->read.state, OP_IDLE);
		if (!wait_op(&w->write))
			failure("thread %d: a write never completed", w->id);
		return refused_call(w, "fi_read", rc);
	}
	atomic_fetch_add(&posted, 1);
	if (!wait_op(&w->write) || !wait_op(&w->read)) {
		failure("thread %d: a write or read never completed", w->id);
		return false;
	}
	w->rmas++;
	if (w->write.err || w->read.err) {
		if (!stopping(w))
			failure("thread %d: RDMA %u failed: write %s, read %s", w->id, i,
				fi_strerror(w->write.err), fi_strerror(w->read.err));
		return false;
	}
	long bad = verify(w->rma_dst, len, seed);
	if (bad >= 0) {
		failure("thread %d: the read of write %u (%zu bytes): byte %ld is 0x%02x", w->id, i, len, bad,
			w->rma_dst[bad]);
		return false;
	}
	if ((bad = verify(w->rma_target, len, seed)) >= 0) {
		failure("thread %d: write %u (%zu bytes): target byte %ld is 0x%02x", w->id, i, len, bad,
			w->rma_target[bad]);
		return false;
	}
	return true;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	for (int i = 0; i < w->iterations && !stopping(w) && !atomic_load(&failures); i++) {
		unsigned kind = (unsigned)(i + w->id) % 4;
		bool ok = true;
		if (kind == 2 && w->inject)
			ok = do_inject(w, (unsigned)i);
		else if (kind == 3 && w->rma)
			ok = do_rma(w, (unsigned)i);
		else
			ok = do_send(w, (unsigned)i);
		if (!ok)
			break;
	}
	for (int s = 0; s < TX_SLOTS; s++)
		if (!wait_op(&w->tx[s]))
			failure("thread %d: a send never completed", w->id);
	return NULL;
}

/* The buffers of thread slot ID, carved out of the registered region
 * after the connections' receive buffers. */
static void worker_init(struct worker *w, int id, struct conn *c, int side, int count)
{
	memset(w, 0, sizeof(*w));
	w->id = id;
	w->conn = c;
	w->side = side;
	w->iterations = count;
	w->inject = w->rma = true;
	uint8_t *base = mem + (size_t)MAX_CONNS * 2 * RX_DEPTH * MSG_MAX +
			(size_t)id * (TX_SLOTS * MSG_MAX + 3 * RMA_MAX);
	w->tx_buf = base;
	w->rma_src = base + TX_SLOTS * MSG_MAX;
	w->rma_dst = w->rma_src + RMA_MAX;
	w->rma_target = w->rma_dst + RMA_MAX;
}

/* ---- the service threads and the checks every subtest ends with ---- */

static pthread_t eq_threads[2], cq_threads[2];

static void start_service(bool fail_on_errors)
{
	atomic_store(&failures, 0);
	atomic_store(&posted, 0);
	atomic_store(&completed, 0);
	atomic_store(&errors, 0);
	atomic_store(&cancelled, 0);
	atomic_store(&refused, 0);
	atomic_store(&errors_fail, fail_on_errors);
	memset(seen, 0, sizeof(seen));
	for (int i = 0; i < N_THREAD_SLOTS; i++) {
		atomic_store(&sent_count[i], 0);
		atomic_store(&seen_count[i], 0);
	}
	atomic_store(&stop_service, false);
	atomic_store(&stop_readers, false);
	for (int i = 0; i < 2; i++) {
		pthread_create(&eq_threads[i], NULL, eq_reader, NULL);
		pthread_create(&cq_threads[i], NULL, cq_reader, i ? (void *)1 : NULL);
	}
}

/* Waits until every accepted request is accounted for, then stops the
 * readers; T_FAIL with the first failure's reason. */
static int stop_service_and_judge(void)
{
	double deadline = now_ms() + WAIT_MS;
	while (atomic_load(&completed) < atomic_load(&posted) && now_ms() < deadline)
		usleep(1000);
	atomic_store(&stop_readers, true);
	atomic_store(&stop_service, true);
	for (int i = 0; i < 2; i++) {
		pthread_join(cq_threads[i], NULL);
		pthread_join(eq_threads[i], NULL);
	}
	if (atomic_load(&failures))
		return T_FAIL;
	long p = atomic_load(&posted), c = atomic_load(&completed);
	if (c != p)
		FAIL("%ld requests taken, %ld completed", p, c);
	struct fi_cq_data_entry e;
	ssize_t rc = fi_cq_read(cq, &e, 1);
	if (rc != -FI_EAGAIN)
		FAIL("the CQ holds more after every request completed (%zd)", rc);
	return T_PASS;
}

/* Every message thread ID sent arrived (once each: received() checks). */
static int all_arrived(int id)
{
	double deadline = now_ms() + WAIT_MS;
	while (atomic_load(&seen_count[id]) < atomic_load(&sent_count[id]) && now_ms() < deadline)
		usleep(1000);
	int sent = atomic_load(&sent_count[id]), got = atomic_load(&seen_count[id]);
	if (got != sent)
		FAIL("thread %d sent %d messages, %d arrived", id, sent, got);
	return T_PASS;
}

/* Connections 0..N-1 of a subtest, opened; T_FAIL when one did not. */
static int open_conns(int n)
{
	for (int i = 0; i < n; i++)
		if (!conn_open(&conns[i]))
			return T_FAIL;
	return T_PASS;
}

/* What every subtest ends with: on success so far, every message workers
 * 0..SENDERS-1 sent has arrived; then connections 0..N-1 are shut down and
 * closed. Returns R, or the first failure. */
static int close_conns(int n, int senders, int r)
{
	for (int i = 0; i < senders && r == T_PASS; i++)
		r = all_arrived(i);
	for (int i = 0; i < n; i++)
		if (conns[i].ep[0]) {
			conn_shutdown(&conns[i]);
			conn_close(&conns[i]);
		}
	return r;
}

static int run_workers(struct worker *w, int n)
{
	pthread_t t[N_THREAD_SLOTS];
	for (int i = 0; i < n; i++)
		pthread_create(&t[i], NULL, worker_main, &w[i]);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	return T_PASS;
}

/* ---- traffic ---- */

static int t_traffic(void)
{
	enum { N_CONNS = 6 };
	start_service(true);
	int r = open_conns(N_CONNS);
	struct worker w[N_WORKERS];
	/* Threads 0,1 on connection 0's connector, 2,3 on connection 1's;
	 * 4..7 alone on connections 2..5, 5 and 7 on the accepting side. */
	static const int conn_of[N_WORKERS] = { 0, 0, 1, 1, 2, 3, 4, 5 };
	static const int side_of[N_WORKERS] = { 0, 0, 0, 0, 0, 1, 0, 1 };
	if (r == T_PASS) {
		for (int i = 0; i < N_WORKERS; i++)
			worker_init(&w[i], i, &conns[conn_of[i]], side_of[i], iterations * rounds);
		run_workers(w, N_WORKERS);
		for (int i = 0; i < N_WORKERS && r == T_PASS; i++)
			r = all_arrived(i);
	}
	/* After the shutdowns every receive still posted ends FI_ECANCELED. */
	atomic_store(&errors_fail, false);
	r = close_conns(N_CONNS, 0, r);
	long flushed_expected = 2L * N_CONNS * RX_DEPTH;
	RUN(stop_service_and_judge());
	RUN(r);
	int sends = 0, injects = 0, rmas = 0;
	for (int i = 0; i < N_WORKERS; i++) {
		RUN(all_arrived(i));
		sends += w[i].sends;
		injects += w[i].injects;
		rmas += w[i].rmas;
	}
	long errs = atomic_load(&errors), canc = atomic_load(&cancelled);
	if (errs != canc || canc != flushed_expected)
		FAIL("%ld error entries (%ld FI_ECANCELED); expected the %ld receives the shutdowns flush", errs,
		     canc, flushed_expected);
	printf("# traffic: %d sends, %d injects, %d writes each read back; %ld requests, each completed once\n",
	       sends, injects, rmas, atomic_load(&posted));
	return T_PASS;
}

/* ---- teardown ---- */

/* Connection 10, over and over: a sender on it, shut down under it. */
static void *shutdown_under_traffic(void *arg)
{
	int *count = arg;
	struct conn *c = &conns[10];
	for (int round = 0; round < 6 * rounds && !atomic_load(&failures); round++) {
		if (!conn_open(c))
			break;
		atomic_bool stop = false;
		struct worker w;
		worker_init(&w, 10, c, round % 2, 1 << 20);
		w.stop = &stop;
		pthread_t t;
		pthread_create(&t, NULL, worker_main, &w);
		usleep(20000 + 5000 * (round % 4));
		atomic_store(&stop, true);
		if (round % 2) {
			/* From the side the sender posts on. */
			pthread_mutex_lock(&c->lock);
			c->draining = true;
			pthread_mutex_unlock(&c->lock);
			int rc = fi_shutdown(c->ep[1], 0);
			if (rc && rc != -FI_ENOTCONN)
				failure("fi_shutdown of the accepting side: %s", fi_strerror(-rc));
		} else {
			conn_shutdown(c);
		}
		pthread_join(t, NULL);
		conn_close(c);
		(*count)++;
	}
	return NULL;
}

/* Receives on endpoints that never connect, cancelled: each ends with one
 * FI_ECANCELED entry. */
static void *cancel_receives(void *arg)
{
	long *count = arg;
	struct conn *c = &conns[11];
	for (int round = 0; round < 20 * rounds && !atomic_load(&failures); round++) {
		struct end_ctx *x = new_ctx(c, 0);
		struct fid_ep *ep = NULL;
		int rc;
		if (!x || (rc = fi_endpoint(domain, info, &ep, x))) {
			failure("cancel: fi_endpoint");
			break;
		}
		if ((rc = fi_ep_bind(ep, &eq->fid, 0)) || (rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV)) ||
		    (rc = fi_enable(ep))) {
			failure("cancel: the endpoint: %s", fi_strerror(-rc));
			fi_close(&ep->fid);
			break;
		}
		pthread_mutex_lock(&c->lock);
		c->ep[0] = ep;
		c->draining = true; /* nothing is posted again */
		for (int i = 0; i < RX_DEPTH && !rc; i++)
			rc = post_recv_locked(c, 0, i);
		pthread_mutex_unlock(&c->lock);
		if (rc)
			failure("cancel: fi_recv: %s", fi_strerror(-rc));
		for (int i = 0; i < RX_DEPTH && !rc; i++) {
			rc = (int)fi_cancel(&ep->fid, &c->rx[0][i].fi);
			if (rc)
				failure("cancel: fi_cancel of a receive not yet connected: %s", fi_strerror(-rc));
		}
		for (int i = 0; i < RX_DEPTH; i++) {
			if (!wait_op(&c->rx[0][i])) {
				failure("cancel: a cancelled receive never completed");
				break;
			}
			if (c->rx[0][i].err != FI_ECANCELED)
				failure("cancel: a cancelled receive ended with %d", c->rx[0][i].err);
			(*count)++;
		}
		pthread_mutex_lock(&c->lock);
		c->ep[0] = NULL;
		pthread_mutex_unlock(&c->lock);
		if (fi_close(&ep->fid))
			failure("cancel: fi_close");
	}
	return NULL;
}

/* Connection 12: a region closed with the peer's writes into it in
 * flight; after fi_close no write lands, whatever it completed with. */
static void *close_region_under_writes(void *arg)
{
	int *count = arg;
	struct conn *c = &conns[12];
	enum { WRITES = 8, LEN = 4096 };
	size_t len = WRITES * LEN;
	uint8_t *target = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (target == MAP_FAILED) {
		failure("mmap");
		return NULL;
	}
	struct worker w;
	worker_init(&w, 12, c, 0, 0);
	struct op ops[WRITES + 1];
	memset(ops, 0, sizeof(ops));
	for (int round = 0; round < 6 * rounds && !atomic_load(&failures); round++) {
		if (!conn_open(c))
			break;
		struct fid_mr *region = NULL;
		int rc = fi_mr_reg(domain, target, len, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0, &region, NULL);
		if (rc) {
			failure("fi_mr_reg: %s", fi_strerror(-rc));
			break;
		}
		uint64_t key = fi_mr_key(region);
		fill(w.rma_src, LEN, (unsigned)round);
		for (int i = 0; i < WRITES; i++) {
			ops[i].kind = OP_WRITE;
			atomic_store(&ops[i].state, OP_POSTED);
			ssize_t r = fi_write(c->ep[0], w.rma_src, LEN, desc(), 0,
					     remote_addr(target + (size_t)i * LEN, target), key, &ops[i].fi);
			if (r) {
				atomic_store(&ops[i].state, OP_IDLE);
				if (r != -FI_EAGAIN)
					failure("fi_write: %s", fi_strerror((int)-r));
			} else {
				atomic_fetch_add(&posted, 1);
			}
		}
		if (fi_close(&region->fid))
			failure("fi_close of a region with writes into it in flight");
		/* From here no write may land. */
		memset(target, GUARD, len);
		ops[WRITES].kind = OP_WRITE;
		atomic_store(&ops[WRITES].state, OP_POSTED);
		ssize_t r = fi_write(c->ep[0], w.rma_src, LEN, desc(), 0, remote_addr(target, target), key,
				     &ops[WRITES].fi);
		if (r)
			atomic_store(&ops[WRITES].state, OP_IDLE);
		else
			atomic_fetch_add(&posted, 1);
		for (int i = 0; i <= WRITES; i++)
			if (!wait_op(&ops[i]))
				failure("a write into a closed region never completed");
		long bad = verify_guard(target, len);
		if (bad >= 0)
			failure("byte %ld of a closed region changed (0x%02x)", bad, target[bad]);
		conn_shutdown(c);
		conn_close(c);
		(*count)++;
	}
	munmap(target, len);
	return NULL;
}

static int t_teardown(void)
{
	start_service(false);
	int r = open_conns(2);
	struct worker w[3];
	int shutdowns = 0, regions = 0;
	long cancels = 0;
	if (r == T_PASS) {
		worker_init(&w[0], 0, &conns[0], 0, iterations * 3 / 4 * rounds);
		worker_init(&w[1], 1, &conns[0], 0, iterations * 3 / 4 * rounds);
		worker_init(&w[2], 2, &conns[1], 1, iterations * 3 / 4 * rounds);
		pthread_t t[6];
		for (int i = 0; i < 3; i++)
			pthread_create(&t[i], NULL, worker_main, &w[i]);
		pthread_create(&t[3], NULL, shutdown_under_traffic, &shutdowns);
		pthread_create(&t[4], NULL, cancel_receives, &cancels);
		pthread_create(&t[5], NULL, close_region_under_writes, &regions);
		for (int i = 0; i < 6; i++)
			pthread_join(t[i], NULL);
	}
	r = close_conns(2, 3, r);
	RUN(stop_service_and_judge());
	RUN(r);
	/* The connection shut down under its sender: what arrived was sent
	 * (received() checked each once); some may have been flushed. */
	if (atomic_load(&seen_count[10]) > atomic_load(&sent_count[10]))
		FAIL("more messages arrived than thread 10 sent");
	if (shutdowns != 6 * rounds || regions != 6 * rounds || cancels != 20L * rounds * RX_DEPTH)
		FAIL("%d shutdowns, %d regions, %ld cancels done", shutdowns, regions, cancels);
	printf("# teardown: %d shutdowns under a sender (%d of its messages arrived, %ld calls refused), "
	       "%ld receives cancelled, %d regions closed under writes; %ld requests, %ld error entries\n",
	       shutdowns, atomic_load(&seen_count[10]), atomic_load(&refused), cancels, regions,
	       atomic_load(&posted), atomic_load(&errors));
	return T_PASS;
}

/* ---- churn ---- */

struct churner {
	int id; /* connection and thread slot */
	int cycles;
};

static void *churn(void *arg)
{
	struct churner *ch = arg;
	struct conn *c = &conns[ch->id];
	for (int round = 0; round < churn_cycles * rounds && !atomic_load(&failures); round++) {
		if (!conn_open(c))
			break;
		/* A message each way, from thread slots id and id + 8. */
		struct worker w[2];
		worker_init(&w[0], ch->id, c, 0, 1);
		worker_init(&w[1], ch->id + 8, c, 1, 1);
		int before[2] = { atomic_load(&seen_count[ch->id]), atomic_load(&seen_count[ch->id + 8]) };
		for (int s = 0; s < 2; s++) {
			if (!do_send(&w[s], 0) || !wait_op(&w[s].tx[0]))
				failure("churn %d: a send did not complete", ch->id);
		}
		double deadline = now_ms() + WAIT_MS;
		while ((atomic_load(&seen_count[ch->id]) == before[0] ||
			atomic_load(&seen_count[ch->id + 8]) == before[1]) &&
		       now_ms() < deadline)
			usleep(1000);
		conn_shutdown(c);
		conn_close(c);
		ch->cycles++;
	}
	return NULL;
}

static int t_churn(void)
{
	start_service(false);
	int r = open_conns(2);
	struct worker w[2];
	struct churner ch[4];
	if (r == T_PASS) {
		/* Under -T endpoint no traffic beside: its receives would be
		 * posted again by the CQ's readers, while the churners' own
		 * endpoints must not be (they send on them). */
		const int traffic = endpoint_model ? 0 : iterations * 3 / 4 * rounds;
		worker_init(&w[0], 0, &conns[0], 0, traffic);
		worker_init(&w[1], 1, &conns[1], 1, traffic);
		pthread_t t[6];
		for (int i = 0; i < 2; i++)
			pthread_create(&t[i], NULL, worker_main, &w[i]);
		for (int i = 0; i < 4; i++) {
			ch[i] = (struct churner){ .id = 2 + i };
			pthread_create(&t[2 + i], NULL, churn, &ch[i]);
		}
		for (int i = 0; i < 6; i++)
			pthread_join(t[i], NULL);
	}
	r = close_conns(2, 2, r);
	RUN(stop_service_and_judge());
	RUN(r);
	int cycles = 0;
	for (int i = 0; i < 4; i++) {
		RUN(all_arrived(2 + i));
		RUN(all_arrived(10 + i));
		cycles += ch[i].cycles;
	}
	if (cycles != 4 * churn_cycles * rounds)
		FAIL("%d connect/exchange/shutdown cycles of %d", cycles, 4 * churn_cycles * rounds);
	long errs = atomic_load(&errors), canc = atomic_load(&cancelled);
	if (errs != canc)
		FAIL("%ld error entries, %ld of them FI_ECANCELED (flushed receives)", errs, canc);
	printf("# churn: %d connections opened, used and closed%s; %ld requests\n", cycles,
	       endpoint_model ? " (FI_THREAD_ENDPOINT: no traffic beside)" : " beside traffic", atomic_load(&posted));
	return T_PASS;
}

/* ---- setup ---- */

static void open_shared(void)
{
	struct fi_info *hints = nd_msg_rma_hints(prov);
	if (!hints) {
		fprintf(stderr, "nd_stress: fi_allocinfo failed\n");
		exit(1);
	}
	hints->domain_attr->threading = endpoint_model ? FI_THREAD_ENDPOINT : FI_THREAD_SAFE;
	CHECK(fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), address, "0", FI_SOURCE, hints, &info));
	fi_freeinfo(hints);
	mr_mode = info->domain_attr->mr_mode;
	inject_size = info->tx_attr->inject_size;
	if (inject_size < sizeof(struct msg_hdr) + 8) {
		fprintf(stderr, "nd_stress: inject size %zu is too small\n", inject_size);
		exit(1);
	}
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	struct fi_eq_attr eq_attr = { .wait_obj = FI_WAIT_UNSPEC, .size = 256 };
	CHECK(fi_eq_open(fabric, &eq_attr, &eq, NULL));
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_UNSPEC, .size = 4096 };
	CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHECK(fi_passive_ep(fabric, info, &pep, NULL));
	CHECK(fi_pep_bind(pep, &eq->fid, 0));
	CHECK(fi_listen(pep));
	size_t alen = sizeof(listen_addr);
	CHECK(fi_getname(&pep->fid, listen_addr, &alen));
	mem_len = (size_t)MAX_CONNS * 2 * RX_DEPTH * MSG_MAX +
		  (size_t)N_THREAD_SLOTS * (TX_SLOTS * MSG_MAX + 3 * RMA_MAX);
	mem = mmap(NULL, mem_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	CHECK(fi_mr_reg(domain, mem, mem_len, FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
			0, 0, 0, &mr, NULL));
	for (int i = 0; i < MAX_CONNS; i++) {
		conns[i].id = i;
		pthread_mutex_init(&conns[i].lock, NULL);
		conns[i].rx_buf = mem + (size_t)i * 2 * RX_DEPTH * MSG_MAX;
	}
}

static void close_shared(void)
{
	CHECK(fi_close(&pep->fid));
	CHECK(fi_close(&mr->fid));
	CHECK(fi_close(&cq->fid));
	CHECK(fi_close(&eq->fid));
	CHECK(fi_close(&domain->fid));
	CHECK(fi_close(&fabric->fid));
	fi_freeinfo(info);
	munmap(mem, mem_len);
}

static const struct nd_subtest subtests[] = {
	{ "traffic", t_traffic },
	{ "teardown", t_teardown },
	{ "churn", t_churn },
};
static struct nd_suite suite = { ND_SUITE(subtests), .timing = ND_TIME_S };

static int option(int opt, const char *arg)
{
	switch (opt) {
	case 'n':
		rounds = atoi(arg);
		return rounds > 0 && rounds <= 16 ? 0 : -1;
	case 'c':
		churn_cycles = atoi(arg);
		return churn_cycles > 0 && churn_cycles <= 100 ? 0 : -1;
	case 'i':
		iterations = atoi(arg);
		return iterations >= 4 && iterations <= 100000 ? 0 : -1;
	case 'T':
		endpoint_model = !strcmp(arg, "endpoint");
		return endpoint_model ? 0 : -1;
	}
	return -1;
}

int main(int argc, char **argv)
{
	const struct nd_cli cli = {
		.optstring = "p:a:t:n:c:i:T:h",
		.prov = &prov,
		.address = &address,
		.suite = &suite,
		.option = option,
		.usage = "usage: %s [-p PROV] [-a ADDRESS] [-t SUBTEST] [-n ROUNDS (1-16)] [-c CHURN-CYCLES (15)]\n"
			 "       [-i REQUESTS a traffic thread posts (400)]\n"
			 "       [-T endpoint (FI_THREAD_ENDPOINT, with -t churn)]\n"
			 "Many threads on one FI_THREAD_SAFE domain, both ends in this process.\n",
	};
	address = nd_default_address();
	if (nd_parse_options(&cli, argc, argv) || nd_check_only(&suite))
		return 2;
	if (endpoint_model && (!suite.only || strcmp(suite.only, "churn"))) {
		fprintf(stderr, "nd_stress: -T endpoint runs churn only (-t churn): the other subtests share endpoints\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	open_shared();
	printf("# %s on %s (%s), %d rounds, %s\n", prov, info->domain_attr->name,
	       info->ep_attr->protocol == FI_PROTO_IWARP ? "iWARP" : "RoCE/IB", rounds,
	       fi_tostr(&info->domain_attr->threading, FI_TYPE_THREADING));
	int status = nd_run_subtests(&suite);
	close_shared();
	return status;
}
