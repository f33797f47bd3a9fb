/*
 * nd_cm_bench: connection setup through libfabric, server and client in one
 * process on one device, for any FI_EP_MSG provider (-p nd, -p verbs).
 *
 *   nd_cm_bench [-p PROVIDER] [-a ADDRESS] [-n CONNECTIONS] [-r ROUNDS] [-x] [-Q] [-O] [-M] [-m] [-2]
 *               [-c CQ_SIZE] [-q]
 *   nd_cm_bench -S [-a ADDRESS] [-P PORT] [-k CLIENTS] [-n N] [-r ROUNDS] [-x] [-Q] [-p P]
 *   nd_cm_bench -C SERVER [-P PORT] [-n N] [-r ROUNDS] [-x] [-Q] [-p P] [-q]
 *
 * Each round opens CONNECTIONS client endpoints, starts every fi_connect at
 * once, accepts each request as it arrives, and waits for all 2 x
 * CONNECTIONS FI_CONNECTED events; then shuts every connection down and
 * closes everything. It prints, per round and as medians over the rounds:
 * connections per second (established / time from opening the first client
 * endpoint to the last FI_CONNECTED), mean time from opening a client
 * endpoint (fi_endpoint, fi_enable, fi_connect) to its FI_CONNECTED, and mean time from FI_CONNREQ to the server's FI_CONNECTED.
 * With -x every connection also carries data before it is shut down: the
 * client sends a message whose bytes name the connection and the round,
 * the server checks it and answers with its own, which the client checks
 * (connect/transfer/disconnect cycles; a wrong byte fails the run).
 * With -Q the queue pairs take cmtime's shape (1-deep send and receive
 * queues, one scatter/gather entry: tx/rx size and iov_limit 1 in the
 * hints) and, as cmtime's, all share one CQ per process (except with -x,
 * whose checks read each connection's own CQ), so that the comparison with
 * cmtime creates the same verbs objects; without it they take the
 * provider's default sizes and a CQ each, as applications usually do.
 * With -2 the server runs in a second process, as cmtime's does: the
 * client process opens, connects and waits for its own N FI_CONNECTED
 * (connections per second are N / that time, as cmtime's client measures
 * its steps), the server process accepts and reports its accept time
 * through a pipe, and each round ends when the server has seen every
 * FI_SHUTDOWN and closed its endpoints. Without -2 one thread serves both
 * sides, which halves the CPU either side gets on a small machine.
 * With -O every endpoint of the process shares one CQ whatever the queue
 * sizes, as ofi_rxm binds all its MSG endpoints to one: at the provider's
 * default depth, 1,000 connections reserve far more entries than one verbs
 * CQ of Soft-RoCE holds (32,767). With -x the exchange then posts every
 * message at once and reads the completions of all connections from that
 * CQ with fi_cq_sread, matching each by its context.
 * -c sets the size of each endpoint's own CQ (default 16; not under -Q): a
 * provider that never lets a CQ overflow (nd) grows a CQ smaller than the
 * endpoint's queues at fi_enable, one that does not (verbs) leaves it.
 * It also counts file descriptors and the kernel's rdma_cm ids of the
 * process before and after all rounds, so the same program run under
 * valgrind checks that cycles leave nothing behind, and reads its memory
 * after each round: its resident set (RSS) and what malloc has handed out
 * and not taken back. With -M and two rounds or more, the run fails when,
 * from the first round to the last, malloc's memory in use grew by more
 * than 1/64 (256 KiB at least: libraries' tables grow to a plateau), or
 * the RSS by more than 1/8 (8 MiB at least: freed heap is reused at other
 * offsets, so its untouched pages fill in over rounds up to the peak's
 * heap, as for any program; device memory that a round failed to release
 * would show). Not under ASan or valgrind, whose quarantine of freed
 * memory grows both by design; their own leak checks serve there.
 * With -m each round prints a "footprint:" line: resident memory, the part
 * of it that maps device queues (/dev/infiniband), and open descriptors,
 * before the round's first endpoint, with all its connections up, and
 * after all closed, and with one CQ (-O) an "empty read:" line, what a
 * fi_cq_read that finds nothing costs with them open (fabtests/scripts/nd_cm_scale.sh
 * makes the scale table of both).
 *
 * -S and -C put the two sides on different hosts (util/nd-cluster's nodes):
 * -S listens on ADDRESS:PORT (default port 9250) and serves CLIENTS client
 * processes (default 1), each making a warm-up connection and ROUNDS rounds
 * of N; it accepts every request, closes each endpoint at its FI_SHUTDOWN,
 * and exits 0 once all CLIENTS x (1 + ROUNDS x N) connections came and went
 * (1 when a request is refused, an event is an error, or nothing happens
 * for 30 s). -C SERVER is the client of -2's rounds without the pipe: its
 * connections per second are N over the time to its own N FI_CONNECTED.
 * With -x each connection carries a message each way before it is shut
 * down, its bytes naming the client process, the connection and the
 * round; the server checks what arrives and answers, the client checks
 * the answer (a wrong byte, or a server that never saw a message, fails
 * the run). The client's connect data names it, so several clients can
 * share one server.
 */
#include <arpa/inet.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include "nd_fds.h"
#include "nd_ft.h"
#include "nd_test_main.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#define MAX_CONN 4096
#define MAX_ROUNDS 100000

struct conn {
	struct fid_ep *client, *server;
	struct fid_cq *client_cq, *server_cq;
	double started, request_seen, client_up, server_up;
};

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_eq *eq;
static struct fid_pep *pep;
static struct fi_info *info, *client_info;
static struct conn conns[MAX_CONN];
static int quiet;
static int transfer;
static int small_queues;
static int split;
static int one_cq;
static int judge_memory;
/* -m: memory, device mappings and descriptors with the round's
 * connections open and after they closed (the scale table). */
static int measure_open;
/* -C: what names this client process in its connect data (host and pid),
 * so that a server of several clients knows whose message to expect. */
static uint32_t remote_tag;
static int remote_mode;

/* The connect data of -C's connections. */
struct hello {
	uint32_t tag;
	int32_t conn, round;
};
static int own_cq_size = 16;

/* The hints both sides use; -Q shapes the queue pairs like cmtime's. */
static struct fi_info *bench_hints(const char *prov, uint64_t mr_mode)
{
	struct fi_info *hints = fi_allocinfo();
	hints->fabric_attr->prov_name = strdup(prov);
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG;
	hints->mode = ~0ULL;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->domain_attr->mr_mode = mr_mode;
	if (small_queues) {
		hints->tx_attr->size = 1;
		hints->rx_attr->size = 1;
		hints->tx_attr->iov_limit = 1;
		hints->rx_attr->iov_limit = 1;
	}
	return hints;
}
#define MSG_LEN 64
static uint8_t messages[MAX_CONN][2][MSG_LEN]; /* [conn][0 client, 1 server] */
static struct fid_mr *messages_mr;

static double now_us(void) { return nd_now_us(); }


/* The CQ every endpoint of this process shares under -Q (cmtime creates one
 * CQ for all its queue pairs); NULL otherwise. */
static struct fid_cq *shared_cq;

/* Binds a CQ to the endpoint (verbs requires one to enable it): the shared
 * one under -Q, otherwise one of its own, returned in *own. */
static void bind_cq(struct fid_ep *ep, struct fid_cq **own)
{
	struct fi_cq_attr attr = { .format = FI_CQ_FORMAT_CONTEXT, .size = (size_t)own_cq_size };
	*own = NULL;
	if (one_cq || (small_queues && !transfer)) {
		if (!shared_cq) {
			/* Room for every completion one exchange can have
			 * outstanding (4 per connection), so that a provider
			 * that sizes the CQ as asked (verbs) cannot overflow. */
			attr.size = 4 * MAX_CONN;
			/* -O -x waits in fi_cq_sread. */
			if (one_cq)
				attr.wait_obj = FI_WAIT_UNSPEC;
			CHECK(fi_cq_open(domain, &attr, &shared_cq, NULL));
		}
		CHECK(fi_ep_bind(ep, &shared_cq->fid, FI_TRANSMIT | FI_RECV));
		return;
	}
	CHECK(fi_cq_open(domain, &attr, own, NULL));
	CHECK(fi_ep_bind(ep, &(*own)->fid, FI_TRANSMIT | FI_RECV));
}

static struct fid_ep *open_ep(struct fi_info *from, struct fid_cq **cq)
{
	struct fid_ep *ep;
	CHECK(fi_endpoint(domain, from, &ep, NULL));
	CHECK(fi_ep_bind(ep, &eq->fid, 0));
	bind_cq(ep, cq);
	CHECK(fi_enable(ep));
	return ep;
}

static struct conn *conn_of(fid_t fid, int n, int *is_client)
{
	for (int i = 0; i < n; i++) {
		if (conns[i].client && &conns[i].client->fid == fid) {
			*is_client = 1;
			return &conns[i];
		}
		if (conns[i].server && &conns[i].server->fid == fid) {
			*is_client = 0;
			return &conns[i];
		}
	}
	return NULL;
}

/* Not inlined: a profile shows what reading the EQ costs per event. */
__attribute__((noinline)) static void read_event(uint32_t *type, struct fi_eq_cm_entry *entry, size_t size)
{
	ssize_t rc;
	for (;;) {
		rc = fi_eq_sread(eq, type, entry, size, 30000, 0);
		if (rc >= 0)
			return;
		if (rc == -FI_EAVAIL) {
			struct fi_eq_err_entry err = { 0 };
			fi_eq_readerr(eq, &err, 0);
			fprintf(stderr, "EQ error: %s (provider %d)\n", fi_strerror(err.err),
				err.prov_errno);
			exit(1);
		}
		if (rc != -FI_EAGAIN) {
			fprintf(stderr, "fi_eq_sread: %s\n", fi_strerror((int)-rc));
			exit(1);
		}
		fprintf(stderr, "no EQ event for 30 s\n");
		exit(1);
	}
}

static int round_number;
static void exchange(int n, int round);

struct event_buf {
	struct fi_eq_cm_entry entry;
	uint8_t data[256];
};

/* Opens the n client endpoints and starts every fi_connect; the clock of
 * each runs from before its fi_endpoint: a provider may resolve the
 * address there (verbs does, blocking). */
static void start_clients(int n, const void *dest)
{
	for (int i = 0; i < n; i++) {
		conns[i].started = now_us();
		conns[i].client = open_ep(client_info, &conns[i].client_cq);
		if (remote_mode) {
			struct hello h = { remote_tag, i, round_number };
			CHECK(fi_connect(conns[i].client, dest, &h, sizeof(h)));
		} else {
			CHECK(fi_connect(conns[i].client, dest, &i, sizeof(i)));
		}
	}
}

/* Reads events until `expected` FI_CONNECTED arrived, accepting every
 * request on the way; returns the time of the last. */
static double establish(int n, int expected)
{
	struct event_buf buf;
	double last = now_us();
	for (int up = 0; up < expected;) {
		uint32_t type;
		read_event(&type, &buf.entry, sizeof(buf));
		double t = now_us();
		if (type == FI_CONNREQ) {
			int who;
			memcpy(&who, buf.entry.data, sizeof(who));
			if (who < 0 || who >= n) {
				fprintf(stderr, "request with bad data\n");
				exit(1);
			}
			conns[who].request_seen = t;
			conns[who].server = open_ep(buf.entry.info, &conns[who].server_cq);
			fi_freeinfo(buf.entry.info);
			CHECK(fi_accept(conns[who].server, NULL, 0));
		} else if (type == FI_CONNECTED) {
			int is_client;
			struct conn *c = conn_of(buf.entry.fid, n, &is_client);
			if (!c) {
				fprintf(stderr, "FI_CONNECTED for an unknown endpoint\n");
				exit(1);
			}
			if (is_client)
				c->client_up = t;
			else
				c->server_up = t;
			up++;
			last = t;
		} else {
			fprintf(stderr, "unexpected event %u\n", type);
			exit(1);
		}
	}
	return last;
}

static double mean_connect_us(int n)
{
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += conns[i].client_up - conns[i].started;
	return sum / n;
}

static double mean_accept_us(int n)
{
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += conns[i].server_up - conns[i].request_seen;
	return sum / n;
}

static void close_ep_and_cq(struct fid_ep **ep, struct fid_cq **cq)
{
	fi_close(&(*ep)->fid);
	if (*cq)
		fi_close(&(*cq)->fid);
	*ep = NULL;
	*cq = NULL;
}

static void close_client(struct conn *c)
{
	fi_shutdown(c->client, 0);
	close_ep_and_cq(&c->client, &c->client_cq);
}

static void close_server(struct conn *c)
{
	close_ep_and_cq(&c->server, &c->server_cq);
}

/* Events of closed endpoints never arrive; drain what may be queued. */
static void drain_eq(void)
{
	struct event_buf buf;
	for (;;) {
		uint32_t type;
		ssize_t rc = fi_eq_read(eq, &type, &buf, sizeof(buf), 0);
		if (rc == -FI_EAVAIL) {
			struct fi_eq_err_entry err = { 0 };
			fi_eq_readerr(eq, &err, 0);
		} else if (rc < 0) {
			break;
		}
	}
}

/* What the process holds at one moment (-m): resident memory, the part of
 * it that maps device queues (the verbs library maps a queue pair's or a
 * CQ's rings from /dev/infiniband/uverbsN), and open descriptors. */
struct footprint {
	long rss_kib, device_kib, heap_kib;
	int fds;
};

static long heap_in_use_kib(void);

/* Resident KiB of every mapping of the process (*all) and of those that
 * map device queues (returned), summed from /proc/self/smaps, which
 * walks the page tables at the moment it is read (the resident count of
 * /proc/self/statm is kept in counters that may lag). -1 where unreadable. */
static long resident_kib(long *all)
{
	FILE *smaps = fopen("/proc/self/smaps", "r");
	*all = -1;
	if (!smaps)
		return -1;
	char line[512];
	long kib = 0, total = 0, value;
	int device = 0;
	while (fgets(line, sizeof(line), smaps)) {
		/* A mapping's header line names its range first ("a-b perms"). */
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
			device = strstr(line, "/dev/infiniband/") != NULL;
		} else if (sscanf(line, "Rss: %ld kB", &value) == 1) {
			total += value;
			if (device)
				kib += value;
		}
	}
	fclose(smaps);
	*all = total;
	return kib;
}

/* ND_CM_BENCH_SMAPS=FILE (-m): a copy of /proc/self/smaps with the
 * connections open, to see where the memory went; ND_CM_BENCH_SMAPS_BEFORE,
 * one before the round's first endpoint, to see what grew. */
static void copy_smaps(const char *to)
{
	if (!to)
		return;
	FILE *in = fopen("/proc/self/smaps", "r"), *out = fopen(to, "w");
	char buf[4096];
	size_t got;
	while (in && out && (got = fread(buf, 1, sizeof(buf), in)) > 0)
		fwrite(buf, 1, got, out);
	if (in)
		fclose(in);
	if (out)
		fclose(out);
}

static struct footprint footprint_now(void)
{
	struct footprint f;
	f.device_kib = resident_kib(&f.rss_kib);
	f.heap_kib = heap_in_use_kib();
	f.fds = nd_count_fds();
	return f;
}

/* -m: the footprint before the round's first endpoint, with all its
 * connections up (and their messages exchanged with -x), and after all
 * closed; printed on one line per round for bench/nd_cm_scale.sh. */
static struct footprint before_round, while_open;

static void print_footprint(int n)
{
	struct footprint after = footprint_now();
	if (getenv("ND_CM_BENCH_MALLOC_INFO")) {
		/* Where freed heap went: what malloc keeps and could give back. */
		malloc_info(0, stdout);
		malloc_trim(0);
		struct footprint trimmed = footprint_now();
		printf("after malloc_trim: rss=%ld\n", trimmed.rss_kib);
	}
	printf("footprint: n=%d before rss=%ld dev=%ld heap=%ld fds=%d open rss=%ld dev=%ld heap=%ld fds=%d closed rss=%ld dev=%ld heap=%ld fds=%d\n",
	       n, before_round.rss_kib, before_round.device_kib, before_round.heap_kib, before_round.fds,
	       while_open.rss_kib, while_open.device_kib, while_open.heap_kib, while_open.fds, after.rss_kib,
	       after.device_kib, after.heap_kib, after.fds);
}

/* -m with one CQ (-O): what a fi_cq_read that finds nothing costs with the
 * round's connections open, the read a progress loop (ofi_rxm's, MPI's)
 * makes most often; printed for bench/nd_cm_scale.sh. */
static void print_empty_read(int n)
{
	if (!shared_cq)
		return;
	struct fi_cq_entry entry;
	enum { kReads = 20000 };
	int found = 0;
	double start = now_us();
	for (int i = 0; i < kReads; i++)
		found += fi_cq_read(shared_cq, &entry, 1) == 1;
	double ns = (now_us() - start) * 1000.0 / kReads;
	printf("empty read: n=%d %.1f ns per fi_cq_read (%d found an entry)\n", n, ns, found);
}

/* One round with both sides in this thread; returns connections per second. */
static double round_of(int n, double *connect_us, double *accept_us)
{
	struct sockaddr_storage addr;
	size_t addrlen = sizeof(addr);
	CHECK(fi_getname(&pep->fid, &addr, &addrlen));
	memset(conns, 0, sizeof(conns));
	if (measure_open) {
		before_round = footprint_now();
		copy_smaps(getenv("ND_CM_BENCH_SMAPS_BEFORE"));
	}

	double start = now_us();
	start_clients(n, &addr);
	double last = establish(n, 2 * n);
	*connect_us = mean_connect_us(n);
	*accept_us = mean_accept_us(n);
	if (transfer)
		exchange(n, round_number++);
	if (measure_open) {
		while_open = footprint_now();
		copy_smaps(getenv("ND_CM_BENCH_SMAPS"));
		/* ND_CM_BENCH_EXIT_OPEN: ends the process here in the first
		 * round after the warm-up's single connection, so that a heap
		 * profiler's "leaks" are what is held with the connections
		 * open. */
		if (n > 1 && getenv("ND_CM_BENCH_EXIT_OPEN")) {
			fflush(stdout);
			exit(0);
		}
		if (getenv("ND_CM_BENCH_MALLOC_INFO")) /* where the heap went, open */
			malloc_stats();
		print_empty_read(n);
	}

	for (int i = 0; i < n; i++) {
		close_client(&conns[i]);
		close_server(&conns[i]);
	}
	drain_eq();
	if (measure_open)
		print_footprint(n);
	return n / ((last - start) / 1e6);
}

/* ---- -2: the server in a process of its own ---- */

static void write_all(int fd, const void *buf, size_t len)
{
	if (write(fd, buf, len) != (ssize_t)len) {
		perror("nd_cm_bench: pipe write");
		exit(1);
	}
}

static void read_all(int fd, void *buf, size_t len)
{
	if (read(fd, buf, len) != (ssize_t)len) {
		fprintf(stderr, "nd_cm_bench: the other process is gone\n");
		exit(1);
	}
}

/* The client's side of a round: connect n endpoints, wait for their n
 * FI_CONNECTED (connections per second come from this), let the server
 * report its accept time (it has then seen all n established), shut
 * everything down and wait until the server has closed its side. */
static double client_round(int n, int from_server, double *connect_us, double *accept_us)
{
	memset(conns, 0, sizeof(conns));
	double start = now_us();
	start_clients(n, client_info->dest_addr);
	double last = establish(n, n);
	*connect_us = mean_connect_us(n);
	read_all(from_server, accept_us, sizeof(*accept_us));
	for (int i = 0; i < n; i++)
		close_client(&conns[i]);
	char closed;
	read_all(from_server, &closed, 1);
	drain_eq();
	return n / ((last - start) / 1e6);
}

/* The server's side of a round: accept n requests, report the mean accept
 * time once all n are established, close each endpoint at its
 * FI_SHUTDOWN, and say so. */
static void server_round(int n, int to_client)
{
	memset(conns, 0, sizeof(conns));
	establish(n, n);
	double accept_us = mean_accept_us(n);
	write_all(to_client, &accept_us, sizeof(accept_us));
	struct event_buf buf;
	for (int down = 0; down < n;) {
		uint32_t type;
		read_event(&type, &buf.entry, sizeof(buf));
		int is_client;
		struct conn *c = conn_of(buf.entry.fid, n, &is_client);
		if (type != FI_SHUTDOWN || !c) {
			fprintf(stderr, "server: unexpected event %u while shutting down\n", type);
			exit(1);
		}
		close_server(c);
		down++;
	}
	drain_eq();
	write_all(to_client, "c", 1);
}

/* Waits for one completion on cq (30 s at most). */
static void wait_completion(struct fid_cq *cq)
{
	struct fi_cq_entry entry;
	double give_up = now_us() + 30e6;
	for (;;) {
		ssize_t rc = fi_cq_read(cq, &entry, 1);
		if (rc == 1)
			return;
		if (rc == -FI_EAVAIL) {
			struct fi_cq_err_entry err = { 0 };
			fi_cq_readerr(cq, &err, 0);
			fprintf(stderr, "transfer failed: %s\n", fi_strerror(err.err));
			exit(1);
		}
		if (rc != -FI_EAGAIN || now_us() > give_up) {
			fprintf(stderr, "no completion: %s\n", fi_strerror((int)-rc));
			exit(1);
		}
	}
}

/* A message's bytes name its client process (tag; 0 with both sides in
 * one process), connection, round and direction. */
static void fill(uint8_t *buf, uint32_t tag, int conn, int round, int side)
{
	for (int i = 0; i < MSG_LEN; i++)
		buf[i] = (uint8_t)(conn * 7 + round * 13 + side * 101 + (tag >> (i % 4 * 8)) + i);
}

static void check(const uint8_t *buf, uint32_t tag, int conn, int round, int side)
{
	uint8_t want[MSG_LEN];
	fill(want, tag, conn, round, side);
	if (memcmp(buf, want, MSG_LEN)) {
		fprintf(stderr, "connection %d round %d: the message arrived corrupted\n", conn, round);
		exit(1);
	}
}

/* -O: the contexts of connection i's four operations: the server's
 * receive, the client's send, the client's receive, the server's send. */
static struct fi_context one_cq_ctx[MAX_CONN][4];
static uint8_t one_cq_done[MAX_CONN][4];

/* Completions of the current kind pair still to come. */
static int one_cq_missing;

/* Reads what the shared CQ holds, waiting up to timeout_ms for the first
 * entry (0: no wait), and checks each is of kind first or first + 1 and
 * arrives exactly once; returns how many it read. */
static int reap_one_cq(int n, int first, int timeout_ms)
{
	struct fi_cq_entry entries[64];
	ssize_t rc = timeout_ms ? fi_cq_sread(shared_cq, entries, 64, NULL, timeout_ms)
				: fi_cq_read(shared_cq, entries, 64);
	if (rc == -FI_EAVAIL) {
		struct fi_cq_err_entry err = { 0 };
		fi_cq_readerr(shared_cq, &err, 0);
		fprintf(stderr, "transfer failed: %s (provider %d)\n", fi_strerror(err.err), err.prov_errno);
		exit(1);
	}
	if (rc == -FI_EAGAIN && timeout_ms) {
		fprintf(stderr, "no completion on the shared CQ for %d ms; %d missing\n", timeout_ms,
			one_cq_missing);
		exit(1);
	}
	if (rc == -FI_EAGAIN)
		return 0;
	if (rc < 0) {
		fprintf(stderr, "fi_cq_sread: %s\n", fi_strerror((int)-rc));
		exit(1);
	}
	for (ssize_t e = 0; e < rc; e++) {
		/* Compared as integers: a context from elsewhere is no
		 * pointer into the array. */
		uintptr_t base = (uintptr_t)&one_cq_ctx[0][0], ctx = (uintptr_t)entries[e].op_context;
		size_t at = (ctx - base) / sizeof(struct fi_context);
		int conn = (int)(at / 4), kind = (int)(at % 4);
		if (ctx < base || (ctx - base) % sizeof(struct fi_context) || at >= (size_t)n * 4 ||
		    kind < first || kind > first + 1 || one_cq_done[conn][kind]++) {
			fprintf(stderr, "a completion with a context nothing posted, or twice\n");
			exit(1);
		}
		one_cq_missing--;
	}
	return (int)rc;
}

/* Posts through `post` (a fi_send or fi_recv in a macro below); on
 * -FI_EAGAIN reads the CQ, as fi_msg(3) asks, and tries again for 30 s. */
#define POST_ONE_CQ(n, first, call)                                                          \
	do {                                                                                 \
		double give_up_ = now_us() + 30e6;                                           \
		ssize_t rc_;                                                                 \
		while ((rc_ = (call)) == -FI_EAGAIN && now_us() < give_up_)                  \
			reap_one_cq(n, first, 0);                                            \
		if (rc_) {                                                                   \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,        \
				fi_strerror((int)-rc_));                                     \
			exit(1);                                                             \
		}                                                                            \
		one_cq_missing++;                                                            \
	} while (0)

/* -O -x, one direction (side 0: client to server, 1: back): every
 * message posted at once, all completions read from the one CQ, and each
 * arrived message checked. messages[i][side] is what is sent; the other
 * slot receives. */
static void one_cq_direction(int n, int round, int side)
{
	void *desc = fi_mr_desc(messages_mr);
	const int kind = 2 * side; /* the receive's; the send's is kind + 1 */
	for (int i = 0; i < n; i++) {
		struct fid_ep *sender = side ? conns[i].server : conns[i].client;
		struct fid_ep *receiver = side ? conns[i].client : conns[i].server;
		memset(messages[i][!side], 0, MSG_LEN);
		POST_ONE_CQ(n, kind, fi_recv(receiver, messages[i][!side], MSG_LEN, desc, 0, &one_cq_ctx[i][kind]));
		fill(messages[i][side], 0, i, round, side);
		POST_ONE_CQ(n, kind, fi_send(sender, messages[i][side], MSG_LEN, desc, 0, &one_cq_ctx[i][kind + 1]));
	}
	while (one_cq_missing)
		reap_one_cq(n, kind, 30000);
	for (int i = 0; i < n; i++)
		check(messages[i][!side], 0, i, round, side);
}

/* -O -x: a message each way on every connection, all read from one CQ. */
static void exchange_one_cq(int n, int round)
{
	memset(one_cq_done, 0, sizeof(one_cq_done));
	one_cq_missing = 0;
	one_cq_direction(n, round, 0);
	one_cq_direction(n, round, 1);
}

/* A message each way on every connection, checked byte by byte. */
static void exchange(int n, int round)
{
	void *desc = fi_mr_desc(messages_mr);
	if (one_cq) {
		exchange_one_cq(n, round);
		return;
	}
	for (int i = 0; i < n; i++) {
		memset(messages[i][1], 0, MSG_LEN);
		CHECK((int)fi_recv(conns[i].server, messages[i][1], MSG_LEN, desc, 0, NULL));
		fill(messages[i][0], 0, i, round, 0);
		CHECK((int)fi_send(conns[i].client, messages[i][0], MSG_LEN, desc, 0, NULL));
	}
	for (int i = 0; i < n; i++) {
		wait_completion(conns[i].server_cq); /* the receive */
		check(messages[i][1], 0, i, round, 0);
		wait_completion(conns[i].client_cq); /* the send */
		CHECK((int)fi_recv(conns[i].client, messages[i][0], MSG_LEN, desc, 0, NULL));
		fill(messages[i][1], 0, i, round, 1);
		CHECK((int)fi_send(conns[i].server, messages[i][1], MSG_LEN, desc, 0, NULL));
		wait_completion(conns[i].client_cq);
		wait_completion(conns[i].server_cq);
	}
	for (int i = 0; i < n; i++)
		check(messages[i][0], 0, i, round, 1);
}

/* rdma_cm ids this process holds, as the kernel lists them (iproute2's
 * `rdma res show cm_id`); -1 where the tool is missing. */
static int count_cm_ids(void)
{
	char cmd[128], line[512], mine[32];
	snprintf(cmd, sizeof(cmd), "rdma res show cm_id 2>/dev/null");
	snprintf(mine, sizeof(mine), " pid %d ", (int)getpid());
	FILE *out = popen(cmd, "r");
	if (!out)
		return -1;
	int n = 0, lines = 0;
	while (fgets(line, sizeof(line), out)) {
		lines++;
		if (strstr(line, mine))
			n++;
	}
	int status = pclose(out);
	return status == 0 || lines ? n : -1;
}

/* Resident memory of this process in KiB (/proc/self/statm); -1 where
 * unreadable. */
static long rss_kib(void)
{
	long pages_total, pages_resident;
	FILE *statm = fopen("/proc/self/statm", "r");
	if (!statm)
		return -1;
	int got = fscanf(statm, "%ld %ld", &pages_total, &pages_resident);
	fclose(statm);
	return got == 2 ? pages_resident * (sysconf(_SC_PAGESIZE) / 1024) : -1;
}

/* What malloc has handed out and not taken back, in KiB. */
static long heap_in_use_kib(void)
{
	struct mallinfo2 mi = mallinfo2();
	return (long)((mi.uordblks + mi.hblkhd) / 1024);
}

/* Prints the memory after the first and the last round; with -M, whether
 * both stayed within their bounds (true with one round, or without -M). */
static int memory_flat(const long *rss, const long *heap, int rounds)
{
	if (rounds < 2 || rss[0] < 0 || rss[rounds - 1] < 0)
		return 1;
	const long rss_grew = rss[rounds - 1] - rss[0], heap_grew = heap[rounds - 1] - heap[0];
	const long rss_allowed = rss[0] / 8 > 8192 ? rss[0] / 8 : 8192;
	const long heap_allowed = heap[0] / 64 > 256 ? heap[0] / 64 : 256;
	printf("memory: RSS %ld KiB after round 1, %ld KiB after round %d (%+ld KiB); malloc in use %ld KiB, then %ld KiB (%+ld KiB)\n",
	       rss[0], rss[rounds - 1], rounds, rss_grew, heap[0], heap[rounds - 1], heap_grew);
	if (!judge_memory)
		return 1;
	if (rss_grew > rss_allowed)
		fprintf(stderr, "the RSS grew by %ld KiB over %d rounds (at most %ld allowed)\n", rss_grew,
			rounds - 1, rss_allowed);
	if (heap_grew > heap_allowed)
		fprintf(stderr, "malloc's memory in use grew by %ld KiB over %d rounds (at most %ld allowed)\n",
			heap_grew, rounds - 1, heap_allowed);
	return rss_grew <= rss_allowed && heap_grew <= heap_allowed;
}

static int compare(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof(*v), compare);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static const char *prov = "nd";

/* fabric, domain and EQ from `from` (and the message buffer's MR for -x). */
static void open_domain(struct fi_info *from)
{
	CHECK(fi_fabric(from->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, from, &domain, NULL));
	if (transfer)
		CHECK(fi_mr_reg(domain, messages, sizeof(messages), FI_SEND | FI_RECV, 0, 0, 0,
				&messages_mr, NULL));
	struct fi_eq_attr eq_attr = { .wait_obj = FI_WAIT_FD, .size = 4 * MAX_CONN };
	CHECK(fi_eq_open(fabric, &eq_attr, &eq, NULL));
}

static void close_domain(void)
{
	if (shared_cq)
		fi_close(&shared_cq->fid);
	if (pep)
		fi_close(&pep->fid);
	if (messages_mr)
		fi_close(&messages_mr->fid);
	fi_close(&eq->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(client_info);
	fi_freeinfo(info);
}

/* A listener on an address the provider picks; returns its port. */
static unsigned listen_on(const char *address, const char *service)
{
	struct fi_info *hints = bench_hints(prov, FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
						     FI_MR_PROV_KEY);
	CHECK(fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), address, service, FI_SOURCE, hints, &info));
	fi_freeinfo(hints);
	open_domain(info);
	CHECK(fi_passive_ep(fabric, info, &pep, NULL));
	CHECK(fi_pep_bind(pep, &eq->fid, 0));
	int backlog = MAX_CONN;
	fi_control(&pep->fid, FI_BACKLOG, &backlog);
	CHECK(fi_listen(pep));
	struct sockaddr_in listen_addr;
	size_t listen_len = sizeof(listen_addr);
	CHECK(fi_getname(&pep->fid, &listen_addr, &listen_len));
	return ntohs(listen_addr.sin_port);
}

/* Clients use an info that names the listener as destination, the way
 * applications get one (fi_getinfo with node and service). */
static void client_info_for(const char *address, unsigned port, uint64_t mr_mode)
{
	char service[16];
	snprintf(service, sizeof(service), "%u", port);
	struct fi_info *hints = bench_hints(prov, mr_mode);
	CHECK(fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), address, service, 0, hints, &client_info));
	fi_freeinfo(hints);
}

/* The server process of -2: as many rounds as the client (and its
 * warm-up), then its own leak check as the exit status. */
static int serve(const char *address, int n, int rounds, int to_client)
{
	unsigned port = listen_on(address, "0");
	write_all(to_client, &port, sizeof(port));
	server_round(1, to_client); /* warm-up */
	int fds_before = nd_count_fds();
	for (int r = 0; r < rounds; r++)
		server_round(n, to_client);
	int fds_after = nd_count_fds();
	close_domain();
	if (fds_after != fds_before)
		fprintf(stderr, "server: fds %d -> %d\n", fds_before, fds_after);
	return fds_after == fds_before ? 0 : 1;
}

/* ---- -S and -C: the two sides on different hosts ---- */

/* The client's side of an exchange: a message to the server on every
 * connection, and the server's answer checked. */
static void remote_exchange(int n, int round)
{
	void *desc = fi_mr_desc(messages_mr);
	for (int i = 0; i < n; i++) {
		memset(messages[i][1], 0, MSG_LEN);
		CHECK((int)fi_recv(conns[i].client, messages[i][1], MSG_LEN, desc, 0, NULL));
		fill(messages[i][0], remote_tag, i, round, 0);
		CHECK((int)fi_send(conns[i].client, messages[i][0], MSG_LEN, desc, 0, NULL));
	}
	for (int i = 0; i < n; i++) {
		wait_completion(conns[i].client_cq); /* the send and the answer, */
		wait_completion(conns[i].client_cq); /* in either order */
		check(messages[i][1], remote_tag, i, round, 1);
	}
}

/* One round of -C: connect n, time their n FI_CONNECTED, exchange with -x,
 * shut down and close. */
static double remote_client_round(int n, double *connect_us)
{
	memset(conns, 0, sizeof(conns));
	double start = now_us();
	start_clients(n, client_info->dest_addr);
	double last = establish(n, n);
	*connect_us = mean_connect_us(n);
	if (transfer)
		remote_exchange(n, round_number);
	round_number++;
	for (int i = 0; i < n; i++)
		close_client(&conns[i]);
	drain_eq();
	return n / ((last - start) / 1e6);
}

/* The server's state of a connection slot (conns[slot].server). */
static struct {
	struct hello who;
	struct fi_context ctx[2]; /* the receive, the answer */
	int got;		   /* the client's message arrived and was checked */
} slots[MAX_CONN];

static int slot_of(fid_t fid)
{
	for (int s = 0; s < MAX_CONN; s++)
		if (conns[s].server && &conns[s].server->fid == fid)
			return s;
	return -1;
}

/* Reads slot s's CQ: checks the client's message and answers it. Returns
 * -1 on an error completion. */
static int serve_slot_cq(int s)
{
	struct fi_cq_entry e;
	ssize_t rc;
	while ((rc = fi_cq_read(conns[s].server_cq, &e, 1)) == 1) {
		if (e.op_context != &slots[s].ctx[0])
			continue; /* the answer went out */
		const struct hello *w = &slots[s].who;
		check(messages[s][1], w->tag, w->conn, w->round, 0);
		slots[s].got = 1;
		fill(messages[s][0], w->tag, w->conn, w->round, 1);
		CHECK((int)fi_send(conns[s].server, messages[s][0], MSG_LEN, fi_mr_desc(messages_mr), 0,
				   &slots[s].ctx[1]));
	}
	if (rc == -FI_EAVAIL) {
		struct fi_cq_err_entry err = { 0 };
		fi_cq_readerr(conns[s].server_cq, &err, 0);
		fprintf(stderr, "server: a transfer failed: %s (provider %d)\n", fi_strerror(err.err),
			err.prov_errno);
		return -1;
	}
	return 0;
}

/* -S: serves `clients` processes of -C until every one of their
 * connections came and went. */
static int serve_remote(const char *address, const char *service, int n, int rounds, int clients)
{
	listen_on(address, service);
	printf("nd_cm_bench: listening on %s port %s for %d client(s)\n", address, service, clients);
	fflush(stdout);
	const long expected = (long)clients * (1 + (long)rounds * n);
	long established = 0, down = 0, checked = 0;
	double quiet_since = now_us();
	while (down < expected) {
		struct event_buf buf;
		uint32_t type;
		/* With -x the CQs are read between events. */
		ssize_t rc = fi_eq_sread(eq, &type, &buf, sizeof(buf), transfer ? 1 : 1000, 0);
		if (rc == -FI_EAVAIL) {
			struct fi_eq_err_entry err = { 0 };
			fi_eq_readerr(eq, &err, 0);
			fprintf(stderr, "server: EQ error: %s (provider %d)\n", fi_strerror(err.err),
				err.prov_errno);
			return 1;
		}
		if (rc < 0 && rc != -FI_EAGAIN) {
			fprintf(stderr, "server: fi_eq_sread: %s\n", fi_strerror((int)-rc));
			return 1;
		}
		if (rc >= 0) {
			quiet_since = now_us();
			int s = type == FI_CONNREQ ? -1 : slot_of(buf.entry.fid);
			if (type == FI_CONNREQ) {
				if ((size_t)rc < sizeof(buf.entry) + sizeof(struct hello)) {
					fprintf(stderr, "server: a request without its connect data\n");
					return 1;
				}
				for (s = 0; s < MAX_CONN && conns[s].server; s++)
					;
				if (s == MAX_CONN) {
					fprintf(stderr, "server: more than %d connections at once\n", MAX_CONN);
					return 1;
				}
				memcpy(&slots[s].who, buf.entry.data, sizeof(slots[s].who));
				slots[s].got = 0;
				conns[s].server = open_ep(buf.entry.info, &conns[s].server_cq);
				fi_freeinfo(buf.entry.info);
				if (transfer) {
					memset(messages[s][1], 0, MSG_LEN);
					CHECK((int)fi_recv(conns[s].server, messages[s][1], MSG_LEN,
							   fi_mr_desc(messages_mr), 0, &slots[s].ctx[0]));
				}
				CHECK(fi_accept(conns[s].server, NULL, 0));
			} else if (type == FI_CONNECTED && s >= 0) {
				established++;
			} else if (type == FI_SHUTDOWN && s >= 0) {
				if (transfer && serve_slot_cq(s))
					return 1;
				if (transfer && !slots[s].got) {
					fprintf(stderr, "server: connection %d of client %08x (round %d) shut down before its message arrived\n",
						slots[s].who.conn, slots[s].who.tag, slots[s].who.round);
					return 1;
				}
				checked += slots[s].got;
				close_server(&conns[s]);
				down++;
			} else {
				fprintf(stderr, "server: unexpected event %u\n", type);
				return 1;
			}
		}
		if (transfer)
			for (int s = 0; s < MAX_CONN; s++)
				if (conns[s].server && !slots[s].got && serve_slot_cq(s))
					return 1;
		if (now_us() - quiet_since > 30e6) {
			fprintf(stderr, "server: no event for 30 s; %ld of %ld connections came and went\n",
				down, expected);
			return 1;
		}
	}
	printf("nd_cm_bench server: %ld connections from %d client(s) established and shut down%s\n",
	       established, clients, transfer ? ", each one's message checked and answered" : "");
	if (transfer && checked != expected) {
		fprintf(stderr, "server: %ld messages checked, %ld expected\n", checked, expected);
		return 1;
	}
	close_domain();
	return established == expected ? 0 : 1;
}

/* -C: rounds against a server on another host; exits non-zero when a
 * round fails (read_event and wait_completion exit) or resources leak. */
static int remote_client(const char *server, const char *service, int n, int rounds)
{
	char host[256] = "";
	gethostname(host, sizeof(host) - 1);
	remote_tag = (uint32_t)getpid() * 2654435761u;
	for (const char *c = host; *c; c++)
		remote_tag = (remote_tag ^ (uint8_t)*c) * 16777619u;
	remote_mode = 1;
	client_info_for(server, (unsigned)atoi(service),
			FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY);
	open_domain(client_info);
	double rate[1000], connect_us[1000];
	remote_client_round(1, &connect_us[0]); /* warm-up */
	int fds_before = nd_count_fds();
	int ids_before = count_cm_ids();
	for (int r = 0; r < rounds; r++) {
		rate[r] = remote_client_round(n, &connect_us[r]);
		if (!quiet)
			printf("round %d: %d connections, %.0f conn/s, connect %.0f us\n", r, n, rate[r],
			       connect_us[r]);
	}
	int fds_after = nd_count_fds();
	int ids_after = count_cm_ids();
	printf("%s n=%d rounds=%d%s to %s: %.0f conn/s, connect %.0f us (medians); fds %d -> %d\n",
	       prov, n, rounds, transfer ? " with transfers" : "", server, median(rate, rounds),
	       median(connect_us, rounds), fds_before, fds_after);
	if (ids_before >= 0)
		printf("rdma_cm ids of this process: %d before the rounds, %d after\n", ids_before,
		       ids_after);
	close_domain();
	return fds_after == fds_before && ids_after == ids_before ? 0 : 1;
}

/* The main's options beyond the globals above. */
static struct {
	const char *remote_server, *service;
	int n, rounds, serve_only, clients;
} args = { .service = "9250", .n = 16, .rounds = 5, .clients = 1 };

static int option(int opt, const char *arg)
{
	switch (opt) {
	case 'n': args.n = atoi(arg); return 0;
	case 'r': args.rounds = atoi(arg); return 0;
	case 'x': transfer = 1; return 0;
	case 'Q': small_queues = 1; return 0;
	case 'O': one_cq = 1; return 0;
	case 'M': judge_memory = 1; return 0;
	case 'm': measure_open = 1; return 0;
	case '2': split = 1; return 0;
	case 'c': own_cq_size = atoi(arg); return 0;
	case 'q': quiet = 1; return 0;
	case 'S': args.serve_only = 1; return 0;
	case 'C': args.remote_server = arg; return 0;
	case 'P': args.service = arg; return 0;
	case 'k': args.clients = atoi(arg); return 0;
	}
	return -1;
}

int main(int argc, char **argv)
{
	const char *address = nd_default_address();
	const struct nd_cli cli = {
		.optstring = "p:a:n:r:xQOMm2c:qSC:P:k:",
		.prov = &prov,
		.address = &address,
		.option = option,
		.usage = "usage: %s [-p provider] [-a address] [-n connections] [-r rounds] [-x] [-Q] [-O] [-M] [-m] [-2] [-c cq_size] [-q]\n"
			 "       %s -S [-a address] [-P port] [-k clients] [-n connections] [-r rounds] [-x] [-Q] [-p provider]\n"
			 "       %s -C server [-P port] [-n connections] [-r rounds] [-x] [-Q] [-p provider] [-q]\n",
	};
	if (nd_parse_options(&cli, argc, argv))
		return 2;
	const char *remote_server = args.remote_server, *service = args.service;
	int n = args.n, rounds = args.rounds, serve_only = args.serve_only, clients = args.clients;
	if (own_cq_size < 1) {
		fprintf(stderr, "-c: a CQ holds at least one entry\n");
		return 2;
	}
	if (n < 1 || n > MAX_CONN || rounds < 1 || rounds > MAX_ROUNDS) {
		fprintf(stderr, "1 <= connections <= %d, 1 <= rounds <= %d\n", MAX_CONN, MAX_ROUNDS);
		return 2;
	}
	if (split && transfer) {
		fprintf(stderr, "-x needs both sides in one process; leave out -2\n");
		return 2;
	}
	if (measure_open && (split || serve_only || remote_server)) {
		fprintf(stderr, "-m measures both sides in one process; leave out -2, -S and -C\n");
		return 2;
	}
	/* Thousands of endpoints: a provider may hold a descriptor or two
	 * for each; the soft limit (often 1,024) is not the test. */
	struct rlimit files;
	if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
		files.rlim_cur = files.rlim_max;
		setrlimit(RLIMIT_NOFILE, &files);
	}
	if ((serve_only || remote_server) && (split || (serve_only && remote_server))) {
		fprintf(stderr, "-S, -C and -2 exclude each other\n");
		return 2;
	}
	if (one_cq && (serve_only || remote_server)) {
		fprintf(stderr, "-O is for one host (leave out -S and -C)\n");
		return 2;
	}
	if (clients < 1 || clients * (long)n > MAX_CONN) {
		fprintf(stderr, "1 <= clients, clients x connections <= %d\n", MAX_CONN);
		return 2;
	}
	if (serve_only)
		return serve_remote(address, service, n, rounds, clients);
	if (remote_server)
		return remote_client(remote_server, service, n, rounds);

	/* -2 forks before anything opens a device: verbs resources do not
	 * survive fork. */
	int from_server = -1;
	pid_t server = -1;
	if (split) {
		int pipe_fds[2];
		if (pipe(pipe_fds)) {
			perror("pipe");
			return 1;
		}
		server = fork();
		if (server < 0) {
			perror("fork");
			return 1;
		}
		if (server == 0) {
			close(pipe_fds[0]);
			exit(serve(address, n, rounds, pipe_fds[1]));
		}
		close(pipe_fds[1]);
		from_server = pipe_fds[0];
		unsigned port;
		read_all(from_server, &port, sizeof(port));
		client_info_for(address, port,
				FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY);
		open_domain(client_info);
	} else {
		unsigned port = listen_on(address, "0");
		client_info_for(address, port, info->domain_attr->mr_mode);
	}

	double *rate = calloc(rounds, sizeof(*rate)), *connect_us = calloc(rounds, sizeof(*connect_us)),
	       *accept_us = calloc(rounds, sizeof(*accept_us));
	long *rss = calloc(rounds, sizeof(*rss)), *heap = calloc(rounds, sizeof(*heap));
	if (!rate || !connect_us || !accept_us || !rss || !heap) {
		fprintf(stderr, "nd_cm_bench: out of memory for %d rounds\n", rounds);
		return 1;
	}
	if (split)
		client_round(1, from_server, &connect_us[0], &accept_us[0]); /* warm-up */
	else
		round_of(1, &connect_us[0], &accept_us[0]);
	int fds_before = nd_count_fds();
	int ids_before = count_cm_ids();
	for (int r = 0; r < rounds; r++) {
		if (split)
			rate[r] = client_round(n, from_server, &connect_us[r], &accept_us[r]);
		else
			rate[r] = round_of(n, &connect_us[r], &accept_us[r]);
		rss[r] = rss_kib();
		heap[r] = heap_in_use_kib();
		if (!quiet)
			printf("round %d: %d connections, %.0f conn/s, connect %.0f us, accept %.0f us, RSS %ld KiB, malloc %ld KiB\n",
			       r, n, rate[r], connect_us[r], accept_us[r], rss[r], heap[r]);
	}
	int fds_after = nd_count_fds();
	int ids_after = count_cm_ids();
	printf("%s n=%d rounds=%d%s%s: %.0f conn/s, connect %.0f us, accept %.0f us (medians); fds %d -> %d\n",
	       prov, n, rounds, transfer ? " with transfers" : "", split ? " two processes" : "",
	       median(rate, rounds), median(connect_us, rounds), median(accept_us, rounds),
	       fds_before, fds_after);
	if (ids_before >= 0)
		printf("rdma_cm ids of this process: %d before the rounds, %d after\n", ids_before,
		       ids_after);
	int memory_kept = memory_flat(rss, heap, rounds);

	close_domain();
	int server_status = 0;
	if (split) {
		int status;
		server_status = waitpid(server, &status, 0) == server && WIFEXITED(status)
					? WEXITSTATUS(status)
					: 1;
	}
	free(rate);
	free(connect_us);
	free(accept_us);
	free(rss);
	free(heap);
	return fds_after == fds_before && ids_after == ids_before && memory_kept && !server_status ? 0 : 1;
}
