/*
 * nd_perf: data-path latency and bandwidth through libfabric, for any
 * FI_EP_MSG provider (-p nd, -p verbs), measured the way rdma-core's perftest
 * (ib_send_lat, ib_write_bw, ...) measures raw verbs, so the figures can be
 * set side by side (fabtests/scripts/nd_perf.sh does that).
 *
 *   server: nd_perf [-p PROVIDER] -s [-a LOCAL_ADDR] [-P PORT] [-q]
 *   client: nd_perf [-p PROVIDER] -c SERVER_ADDR [-a LOCAL_ADDR] [-P PORT]
 *                   [-t TEST] [-b] [-S SIZES] [-n ITERS] [-m MAX_BYTES]
 *                   [-I INLINE] [-Q CQ_MOD] [-l POST_LIST] [-F] [-C] [-q]
 *
 * Like perftest, server and client are separate processes; the server serves
 * one client and exits. The client chooses everything (test, sizes,
 * iterations, inline size) and tells the server: the test and the largest
 * size in the connect request's private data (the server needs them to size
 * its buffer and completion binding), the rest in messages. Buffer address
 * and key are exchanged in the first message each way (HELLO).
 *
 * TEST is one of (default send_lat):
 *   send_lat   ping-pong of sends; latency = round trip / 2 (ib_send_lat)
 *   write_lat  ping-pong of RDMA writes: each side writes into the other's
 *              buffer and polls the last byte for the iteration's value
 *              (ib_write_lat); latency = round trip / 2
 *   read_lat   one RDMA read at a time; latency = post to completion
 *              (ib_read_lat)
 *   send_bw, write_bw, read_bw   a window of up to 128 outstanding operations
 *              (perftest's tx depth, capped by the iterations and the
 *              provider's tx size), completion requested every CQ_MOD-th
 *              operation (FI_SELECTIVE_COMPLETION; default like perftest:
 *              100 up to 8 KiB, 1 above, capped by the window); bandwidth =
 *              size * iterations / (first post .. last completion), in MiB/s
 *              (perftest's MB/s is MiB/s) and message rate in Mpps.
 *              -b: both sides transmit at once; the figure is the sum of both
 *              directions, as perftest -b reports.
 *              -l POST_LIST: post in lists of POST_LIST, as perftest -l does
 *              with chained work requests: every post but the list's last
 *              (and the last before the window is full) carries FI_MORE,
 *              through fi_sendmsg / fi_writemsg / fi_readmsg (FI_INJECT for
 *              sizes <= INLINE). A provider may ring the doorbell once per
 *              list; one that ignores FI_MORE posts each at once. As in
 *              perftest, iterations are rounded down to whole lists and
 *              completions come once per list (unless -Q says otherwise).
 * Latency figures are per iteration: min, median (perftest's t_typical),
 * mean (t_avg), max, 99th percentile, in microseconds.
 *
 * SIZES: one size or a comma-separated list, K/M suffixes allowed (8,4K,1M);
 * default every power of two from 1 B to 4 MiB. ITERS (default 1000) applies
 * to every size; -m caps it so that size * iterations <= MAX_BYTES (at least
 * 8 iterations), to keep large sizes short on slow devices.
 *
 * Posting: sizes <= INLINE (default and maximum: the provider's
 * tx_attr->inject_size) go out with fi_inject / fi_inject_write when no
 * completion is wanted and with FI_INJECT when one is; larger ones with
 * fi_send / fi_write / fi_read, or the *msg calls with FI_COMPLETION.
 * Latency tests bind the transmit CQ without FI_SELECTIVE_COMPLETION, so every
 * fi_send / fi_write / fi_read completes (perftest signals every latency
 * post too), and fi_inject, as in libfabric ping-pongs, never does.
 *
 * Memory registration honours the domain's mr_mode: FI_MR_LOCAL (descriptors
 * from fi_mr_desc are passed), FI_MR_VIRT_ADDR (remote addresses are virtual
 * addresses, else offsets), FI_MR_PROV_KEY (keys from fi_mr_key; otherwise
 * requested keys). FI_RX_CQ_DATA is accepted: no remote CQ data is sent.
 *
 * Output, one line per size (client), e.g.
 *   nd_perf test=send_lat prov=verbs size=8 iters=1000 inline=256
 *           lat_min_us=... lat_med_us=... lat_mean_us=... lat_max_us=... lat_p99_us=...
 *   nd_perf test=write_bw prov=verbs size=8 iters=1000 inline=256 bidir=0
 *           tx_depth=128 cq_mod=100 post_list=1 bw_mib_s=... mpps=...
 *
 * -F (flow control): both sides run with ofi_rxm's credit-based flow control
 * on, as ofi_rxm runs every connection of a provider that offers it: the
 * domain's "ofix_flow_ctrl_v1" extension, enabled on the endpoint once it is
 * connected. Each side's credits are set beyond what the run can use and
 * the threshold beyond what it can post, so no credit message is ever due:
 * those are ofi_rxm's own sends, counted in rxm, not in the provider. What
 * is measured is what the provider does on every call with the credits on:
 * each send passes its credit check, each receive its count of what is
 * owed. A provider that does not offer the extension, or an endpoint that
 * cannot keep credits, ends the run with an error.
 *
 * -C (cost mode, for valgrind --tool=callgrind, see nd_perf.sh): the client
 * first polls its empty receive CQ 1000 times inside perf_cq_calibrate()
 * (callgrind --dump-after=perf_cq_calibrate separates that), and at the end
 * prints how often each data-path wrapper ran: every fi_send/fi_inject/
 * fi_sendmsg goes through perf_send(), writes through perf_write(), reads
 * through perf_read(), receives through perf_recv() (the count printed is
 * of those after the calibration), every fi_cq_read through
 * perf_cq_read(); they are never inlined, so callgrind's --toggle-collect=perf_send etc. counts
 * exactly those calls and everything they call. Callgrind's instrumentation
 * starts where the connection is made (CALLGRIND_START_INSTRUMENTATION, for
 * --instr-atstart=no): no wrapper runs before, and the start-up before it
 * (libfabric loading and initializing every provider it holds) then runs
 * under valgrind uninstrumented, several times faster.
 */
#include <arpa/inet.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nd_ft.h"
#include "nd_test_main.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define MAGIC 0x6e647066u /* "ndpf" */
#define MAX_SIZES 64
#define CTL_BYTES 4096
#define TX_DEPTH 128
#define RX_DEPTH 512
#define DEF_CQ_MOD 100
#define CQ_MOD_SIZE_LIMIT 8192
#define CALIBRATE_POLLS 1000
#define NOINLINE __attribute__((noinline, noclone))
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_START_INSTRUMENTATION do { } while (0)
#endif

enum test { SEND_LAT, WRITE_LAT, READ_LAT, SEND_BW, WRITE_BW, READ_BW, NTESTS };
static const char *test_names[NTESTS] = { "send_lat", "write_lat", "read_lat",
					  "send_bw",  "write_bw",  "read_bw" };
enum op { OP_SEND, OP_WRITE, OP_READ };

/* In the connect request: what the server must know before it accepts. */
struct conn_data {
	uint32_t magic;
	uint8_t test, bidir, flow_ctrl, pad;
	uint64_t max_size;
};

enum ctl_type { CTL_HELLO = 1, CTL_READY, CTL_GO, CTL_RESULT, CTL_DONE };
struct ctl {
	uint32_t magic, type;
	uint64_t size, iters, inline_size, cq_mod, post_list; /* READY */
	uint64_t addr, key; /* HELLO */
	double bytes, usec; /* RESULT: the server's own transmit in -b */
};

/* Operation context; FI_CONTEXT2 room first for providers that ask for it. */
struct op_ctx {
	struct fi_context2 fi;
	uint64_t covers; /* operations this completion accounts for */
	int done;
};

static struct {
	const char *prov, *server, *local;
	const char *port;
	int is_server, bidir, quiet, cost, flow_ctrl;
	enum test test;
	size_t sizes[MAX_SIZES];
	int nsizes;
	uint64_t iters, max_bytes;
	long inline_size, cq_mod;
	uint64_t post_list;
} opt = { .prov = "nd", .port = "9228", .test = SEND_LAT, .iters = 1000,
	  .inline_size = -1, .cq_mod = -1, .post_list = 1 };

static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_eq *eq;
static struct fid_pep *pep;
static struct fid_ep *ep;
static struct fid_cq *txcq, *rxcq;
static struct fid_mr *mr;
static void *desc;
static uint8_t *buf, *src, *rdst, *rbuf, *ctlbuf; /* send / RMA target / recv / control */
static size_t region; /* bytes per region: the largest size, rounded up */
static uint64_t peer_addr, peer_key;
static int virt_addr;
static size_t inject_max;
static struct op_ctx rx_ctx[RX_DEPTH], *tx_ring, ctl_ctx, scratch_ctx;
static size_t rx_depth, tx_depth, tx_ring_len, tx_ring_next;
static int selective;

/* Call counters for -C. */
static uint64_t n_send, n_write, n_read, n_recv, n_cq_read, n_cq_empty, n_cq_entries;

static double now_us(void) { return nd_now_us(); }


static void die(const char *what)
{
	fprintf(stderr, "nd_perf: %s\n", what);
	exit(1);
}

/* ------------------------------------------------------------ options */

static uint64_t parse_size(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 0);
	if (*end == 'k' || *end == 'K')
		v <<= 10, end++;
	else if (*end == 'm' || *end == 'M')
		v <<= 20, end++;
	else if (*end == 'g' || *end == 'G')
		v <<= 30, end++;
	if (end == s || (*end && *end != ',' && *end != ' '))
		die("bad size");
	return v;
}

static void parse_sizes(const char *list)
{
	opt.nsizes = 0;
	for (const char *p = list; *p;) {
		while (*p == ',' || *p == ' ')
			p++;
		if (!*p)
			break;
		if (opt.nsizes == MAX_SIZES)
			die("too many sizes");
		opt.sizes[opt.nsizes] = parse_size(p);
		if (!opt.sizes[opt.nsizes])
			die("sizes start at 1");
		opt.nsizes++;
		while (*p && *p != ',' && *p != ' ')
			p++;
	}
	if (!opt.nsizes)
		die("no sizes");
}

static int option(int c, const char *arg)
{
	switch (c) {
	case 's': opt.is_server = 1; return 0;
	case 'c': opt.server = arg; return 0;
	case 'P': opt.port = arg; return 0;
	case 't':
		for (opt.test = 0; opt.test < NTESTS; opt.test++)
			if (!strcmp(arg, test_names[opt.test]))
				return 0;
		return -1;
	case 'b': opt.bidir = 1; return 0;
	case 'S': parse_sizes(arg); return 0;
	case 'n': opt.iters = strtoull(arg, NULL, 0); return 0;
	case 'm': opt.max_bytes = parse_size(arg); return 0;
	case 'I': opt.inline_size = atol(arg); return 0;
	case 'Q': opt.cq_mod = atol(arg); return 0;
	case 'l':
		opt.post_list = strtoull(arg, NULL, 0);
		if (!opt.post_list)
			die("-l takes a list size of at least 1");
		return 0;
	case 'C': opt.cost = 1; return 0;
	case 'F': opt.flow_ctrl = 1; return 0;
	case 'q': opt.quiet = 1; return 0;
	}
	return -1;
}

static void parse_options(int argc, char **argv)
{
	const struct nd_cli cli = {
		.optstring = "p:sc:a:P:t:bS:n:m:I:Q:l:FCqh",
		.usage = "usage: %s [-p PROVIDER] (-s | -c SERVER_ADDR) [-a LOCAL_ADDR] [-P PORT]\n"
			 "       [-t send_lat|write_lat|read_lat|send_bw|write_bw|read_bw] [-b]\n"
			 "       [-S SIZES] [-n ITERS] [-m MAX_BYTES] [-I INLINE] [-Q CQ_MOD] [-l POST_LIST]\n"
			 "       [-F] [-C] [-q]\n",
		.prov = &opt.prov,
		.address = &opt.local,
		.option = option,
	};
	if (nd_parse_options(&cli, argc, argv))
		exit(2);
	if (optind != argc || opt.is_server == !!opt.server || !opt.iters)
		exit(nd_usage(&cli, argv[0]));
	/* The client binds to -a only when told to (or inside the guest). */
	if (!opt.local)
		opt.local = opt.is_server ? nd_default_address() : getenv("ND_GUEST_IP");
	if (!opt.nsizes) {
		for (size_t s = 1; s <= (4u << 20); s <<= 1)
			opt.sizes[opt.nsizes++] = s;
	}
}

static int is_lat(enum test t)
{
	return t <= READ_LAT;
}

static enum op op_of(enum test t)
{
	return t == SEND_LAT || t == SEND_BW ? OP_SEND : t == WRITE_LAT || t == WRITE_BW ? OP_WRITE : OP_READ;
}

static uint64_t iters_for(size_t size)
{
	uint64_t n = opt.iters;
	if (opt.max_bytes && n * size > opt.max_bytes) {
		n = opt.max_bytes / size;
		if (n < 8)
			n = 8;
	}
	/* perftest -l wants whole lists; so does the comparison. */
	if (opt.post_list > 1 && !is_lat(opt.test))
		n = n < opt.post_list ? opt.post_list : n - n % opt.post_list;
	return n;
}

/* --------------------------------------------------- data-path wrappers */

/* Every data-path call of the program goes through one of these four, never
 * inlined: callgrind --toggle-collect=perf_send measures exactly the sends. */
static NOINLINE ssize_t perf_send(size_t size, size_t inl, struct op_ctx *ctx, uint64_t more)
{
	n_send++;
	if (!ctx && !more) {
		if (size <= inl)
			return fi_inject(ep, src, size, 0);
		return fi_send(ep, src, size, desc, 0, &scratch_ctx.fi);
	}
	if (!selective && size > inl && !more)
		return fi_send(ep, src, size, desc, 0, ctx);
	struct iovec iov = { src, size };
	struct fi_msg msg = { .msg_iov = &iov, .desc = &desc, .iov_count = 1,
			      .context = ctx ? ctx : &scratch_ctx };
	return fi_sendmsg(ep, &msg, (ctx ? FI_COMPLETION : 0) | (size <= inl ? FI_INJECT : 0) | more);
}

static NOINLINE ssize_t perf_write(size_t size, size_t inl, struct op_ctx *ctx, uint64_t more)
{
	uint64_t raddr = (virt_addr ? peer_addr : 0) + region; /* peer's RMA target */
	n_write++;
	if (!ctx && !more) {
		if (size <= inl)
			return fi_inject_write(ep, src, size, 0, raddr, peer_key);
		return fi_write(ep, src, size, desc, 0, raddr, peer_key, &scratch_ctx.fi);
	}
	if (!selective && size > inl && !more)
		return fi_write(ep, src, size, desc, 0, raddr, peer_key, ctx);
	struct iovec iov = { src, size };
	struct fi_rma_iov rma = { raddr, size, peer_key };
	struct fi_msg_rma msg = { .msg_iov = &iov, .desc = &desc, .iov_count = 1,
				  .rma_iov = &rma, .rma_iov_count = 1,
				  .context = ctx ? ctx : &scratch_ctx };
	return fi_writemsg(ep, &msg, (ctx ? FI_COMPLETION : 0) | (size <= inl ? FI_INJECT : 0) | more);
}

/* Reads the peer's send region into the local RMA target region. */
static NOINLINE ssize_t perf_read(size_t size, struct op_ctx *ctx, uint64_t more)
{
	uint64_t raddr = virt_addr ? peer_addr : 0;
	n_read++;
	if ((!ctx || !selective) && !more)
		return fi_read(ep, rdst, size, desc, 0, raddr, peer_key, ctx ? ctx : &scratch_ctx);
	struct iovec iov = { rdst, size };
	struct fi_rma_iov rma = { raddr, size, peer_key };
	struct fi_msg_rma msg = { .msg_iov = &iov, .desc = &desc, .iov_count = 1,
				  .rma_iov = &rma, .rma_iov_count = 1,
				  .context = ctx ? ctx : &scratch_ctx };
	return fi_readmsg(ep, &msg, (ctx || !selective ? FI_COMPLETION : 0) | more);
}

static NOINLINE ssize_t perf_cq_read(struct fid_cq *cq, struct fi_cq_entry *e, size_t n)
{
	ssize_t rc = fi_cq_read(cq, e, n);
	n_cq_read++;
	if (rc == -FI_EAGAIN)
		n_cq_empty++;
	else if (rc > 0)
		n_cq_entries += rc;
	return rc;
}

static NOINLINE void perf_cq_calibrate(void)
{
	struct fi_cq_entry e;
	for (int i = 0; i < CALIBRATE_POLLS; i++)
		if (perf_cq_read(rxcq, &e, 1) != -FI_EAGAIN)
			die("receive CQ not empty during calibration");
}

/* ------------------------------------------------------------- queues */

static void cq_failed(struct fid_cq *cq, ssize_t rc)
{
	if (rc == -FI_EAVAIL) {
		struct fi_cq_err_entry err = { 0 };
		fi_cq_readerr(cq, &err, 0);
		fprintf(stderr, "nd_perf: %s completion error: %s (provider: %s; %s, flags 0x%llx)\n",
			cq == txcq ? "transmit" : "receive", fi_strerror(err.err),
			fi_cq_strerror(cq, err.prov_errno, err.err_data, NULL, 0),
			err.op_context == &ctl_ctx ? "the control message" :
			err.op_context ? "a data request" : "no context",
			(unsigned long long)err.flags);
	} else {
		fprintf(stderr, "nd_perf: fi_cq_read: %s\n", fi_strerror((int)-rc));
	}
	exit(1);
}

/* Every receive goes through here (a descriptor always given). */
static NOINLINE ssize_t perf_recv(struct op_ctx *c)
{
	n_recv++;
	return fi_recv(ep, rbuf, region, desc, 0, c);
}

static void post_recv(struct op_ctx *c)
{
	ssize_t rc;
	while ((rc = perf_recv(c)) == -FI_EAGAIN)
		;
	CHECK(rc);
}

/* Reads transmit completions once; returns the operations they account for. */
static uint64_t tx_poll(void)
{
	struct fi_cq_entry e[16];
	ssize_t rc = perf_cq_read(txcq, e, 16);
	uint64_t ops = 0;
	if (rc == -FI_EAGAIN)
		return 0;
	if (rc < 0)
		cq_failed(txcq, rc);
	for (ssize_t i = 0; i < rc; i++) {
		struct op_ctx *c = e[i].op_context;
		ops += c->covers;
		c->done = 1;
	}
	return ops;
}

/* Reads receive completions once, reposting each; returns how many. */
static uint64_t rx_poll(size_t max)
{
	struct fi_cq_entry e[16];
	ssize_t rc = perf_cq_read(rxcq, e, max < 16 ? max : 16);
	if (rc == -FI_EAGAIN)
		return 0;
	if (rc < 0)
		cq_failed(rxcq, rc);
	for (ssize_t i = 0; i < rc; i++)
		post_recv(e[i].op_context);
	return rc;
}

static void rx_wait(uint64_t n)
{
	while (n)
		n -= rx_poll(n);
}

static void tx_wait(struct op_ctx *c)
{
	while (!c->done)
		tx_poll();
}

static struct op_ctx *next_tx_ctx(uint64_t covers)
{
	struct op_ctx *c = &tx_ring[tx_ring_next++ % tx_ring_len];
	c->covers = covers;
	c->done = 0;
	return c;
}

/* Posts one operation; ctx NULL asks for no completion. Retries while the
 * provider has no room, reading completions to make progress. */
static void post_op(enum op op, size_t size, size_t inl, struct op_ctx *ctx, uint64_t more,
		    uint64_t *completed)
{
	for (;;) {
		ssize_t rc = op == OP_SEND ? perf_send(size, inl, ctx, more) :
			     op == OP_WRITE ? perf_write(size, inl, ctx, more) :
					      perf_read(size, ctx, more);
		if (!rc)
			return;
		if (rc != -FI_EAGAIN) {
			fprintf(stderr, "nd_perf: posting %s of %zu bytes: %s\n",
				op == OP_SEND ? "send" : op == OP_WRITE ? "write" : "read", size,
				fi_strerror((int)-rc));
			exit(1);
		}
		uint64_t ops = tx_poll();
		if (completed)
			*completed += ops;
	}
}

/* ------------------------------------------------------------ control */

static void send_ctl(struct ctl *m)
{
	m->magic = MAGIC;
	memcpy(ctlbuf, m, sizeof(*m));
	struct iovec iov = { ctlbuf, sizeof(*m) };
	struct fi_msg msg = { .msg_iov = &iov, .desc = &desc, .iov_count = 1, .context = &ctl_ctx };
	ctl_ctx.done = 0;
	ctl_ctx.covers = 0;
	ssize_t rc;
	while ((rc = fi_sendmsg(ep, &msg, FI_COMPLETION)) == -FI_EAGAIN)
		tx_poll();
	CHECK(rc);
	tx_wait(&ctl_ctx);
}

/* Waits for the next control message. The content of GO is not checked: in
 * -b send_bw the server's data may already have overwritten it.
 * Control waits are never timed, and the server spends a whole one-sided test
 * (write_bw, read_bw, read_lat) in one, so they nap between polls instead of
 * spinning: perftest's passive side sleeps too, and on a small machine (or
 * Soft-RoCE, whose protocol work runs in the kernel on the same CPUs) a
 * spinning idle peer takes the CPU the transfer needs. */
static void recv_ctl(struct ctl *m, uint32_t type)
{
	/* 20 us, doubling up to 1 ms: a short wait stays short, a whole
	 * test's wait costs its peer next to nothing. */
	struct timespec nap = { 0, 20000 };
	while (!rx_poll(1)) {
		nanosleep(&nap, NULL);
		if (nap.tv_nsec < 1000000)
			nap.tv_nsec *= 2;
	}
	memcpy(m, rbuf, sizeof(*m));
	if (type == CTL_GO)
		return;
	if (m->magic != MAGIC || (type && m->type != type)) {
		fprintf(stderr, "nd_perf: expected control message %u, got magic %#x type %u\n",
			type, m->magic, m->type);
		exit(1);
	}
}

/* ------------------------------------------------------------- set-up */

static struct fi_info *get_info(const char *node, const char *service, uint64_t flags)
{
	struct fi_info *hints = fi_allocinfo(), *fi;
	hints->fabric_attr->prov_name = strdup(opt.prov);
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG | FI_RMA;
	hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				      FI_MR_PROV_KEY;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	if (!flags && opt.local) {
		struct sockaddr_in *sin = calloc(1, sizeof(*sin));
		sin->sin_family = AF_INET;
		if (inet_pton(AF_INET, opt.local, &sin->sin_addr) != 1)
			die("-a takes an IPv4 address");
		hints->src_addr = sin;
		hints->src_addrlen = sizeof(*sin);
	}
	CHECK(fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), node, service, flags, hints, &fi));
	fi_freeinfo(hints);
	return fi;
}

/* One buffer, one registration: [send][RMA target][receive][control]. */
static void register_buffer(size_t max_size)
{
	/* Control messages land in the receive region too. */
	region = ((max_size > sizeof(struct ctl) ? max_size : sizeof(struct ctl)) + 63) & ~(size_t)63;
	size_t len = 3 * region + CTL_BYTES;
	if (posix_memalign((void **)&buf, 4096, len))
		die("out of memory");
	memset(buf, 0, len);
	src = buf;
	rdst = buf + region;
	rbuf = buf + 2 * region;
	ctlbuf = buf + 3 * region;
	uint64_t access = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
	uint64_t requested_key = opt.is_server ? 2 : 1;
	CHECK(fi_mr_reg(domain, buf, len, access, 0, requested_key, 0, &mr, NULL));
	desc = info->domain_attr->mr_mode & FI_MR_LOCAL ? fi_mr_desc(mr) : NULL;
	virt_addr = !!(info->domain_attr->mr_mode & FI_MR_VIRT_ADDR);
	if (info->domain_attr->mr_key_size > sizeof(uint64_t))
		die("provider's MR keys are longer than 64 bits");
}

static void open_endpoint(struct fi_info *fi)
{
	struct fi_cq_attr attr = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE };
	tx_depth = fi->tx_attr->size < TX_DEPTH ? fi->tx_attr->size : TX_DEPTH;
	rx_depth = fi->rx_attr->size < RX_DEPTH ? fi->rx_attr->size : RX_DEPTH;
	attr.size = fi->tx_attr->size + 16;
	CHECK(fi_cq_open(domain, &attr, &txcq, NULL));
	attr.size = fi->rx_attr->size + 16;
	CHECK(fi_cq_open(domain, &attr, &rxcq, NULL));
	CHECK(fi_endpoint(domain, fi, &ep, NULL));
	CHECK(fi_ep_bind(ep, &eq->fid, 0));
	/* Latency tests complete every non-inject post, bandwidth tests only
	 * those asked for (FI_COMPLETION every CQ_MOD-th). */
	selective = !is_lat(opt.test);
	CHECK(fi_ep_bind(ep, &txcq->fid, FI_TRANSMIT | (selective ? FI_SELECTIVE_COMPLETION : 0)));
	CHECK(fi_ep_bind(ep, &rxcq->fid, FI_RECV));
	CHECK(fi_enable(ep));
	for (size_t i = 0; i < rx_depth; i++)
		post_recv(&rx_ctx[i]);
	tx_ring_len = tx_depth + 2;
	tx_ring = calloc(tx_ring_len, sizeof(*tx_ring));
}

static void close_endpoint(void)
{
	fi_close(&ep->fid);
	fi_close(&txcq->fid);
	fi_close(&rxcq->fid);
	free(tx_ring);
	ep = NULL;
}

/* Reads one CM event; returns 0, or the error of an error entry. */
static int read_cm_event(uint32_t *type, struct fi_eq_cm_entry *entry, size_t size)
{
	ssize_t rc = fi_eq_sread(eq, type, entry, size, 120000, 0);
	if (rc >= 0)
		return 0;
	if (rc == -FI_EAVAIL) {
		struct fi_eq_err_entry err = { 0 };
		fi_eq_readerr(eq, &err, 0);
		return err.err ? err.err : FI_EOTHER;
	}
	fprintf(stderr, "nd_perf: fi_eq_sread: %s\n",
		rc == -FI_EAGAIN ? "no connection event for 120 s" : fi_strerror((int)-rc));
	exit(1);
}

static void exchange_hello(void)
{
	struct ctl m = { .type = CTL_HELLO, .addr = (uintptr_t)buf, .key = fi_mr_key(mr) };
	if (m.key == FI_KEY_NOTAVAIL)
		die("fi_mr_key: no key");
	if (opt.is_server) {
		struct ctl peer;
		recv_ctl(&peer, CTL_HELLO);
		peer_addr = peer.addr;
		peer_key = peer.key;
		send_ctl(&m);
	} else {
		send_ctl(&m);
		struct ctl peer;
		recv_ctl(&peer, CTL_HELLO);
		peer_addr = peer.addr;
		peer_key = peer.key;
	}
}

/* ------------------------------------------------------------- tests */

static int compare(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Ping-pong of sends or writes; the client (initiator) records times. */
static void pingpong(enum op op, size_t size, uint64_t iters, size_t inl, double *t)
{
	volatile uint8_t *poll_byte = rdst + size - 1;
	for (uint64_t i = 0; i < iters; i++) {
		uint8_t v = (uint8_t)(i % 255 + 1);
		if (!opt.is_server) {
			if (t)
				t[i] = now_us();
		} else if (op == OP_SEND) {
			rx_wait(1);
		} else {
			while (*poll_byte != v)
				;
		}
		struct op_ctx *c = size <= inl ? NULL : next_tx_ctx(1);
		if (op == OP_WRITE)
			src[size - 1] = v;
		post_op(op, size, inl, c, 0, NULL);
		if (!opt.is_server) {
			if (op == OP_SEND)
				rx_wait(1);
			else
				while (*poll_byte != v)
					;
		}
		if (c)
			tx_wait(c);
	}
	if (t)
		t[iters] = now_us();
}

static void read_lat(size_t size, uint64_t iters, double *lat)
{
	for (uint64_t i = 0; i < iters; i++) {
		double t0 = now_us();
		struct op_ctx *c = next_tx_ctx(1);
		post_op(OP_READ, size, 0, c, 0, NULL);
		tx_wait(c);
		lat[i] = now_us() - t0;
	}
}

/* Transmits iters operations (if tx) with a window of tx_depth and a
 * completion every cq_mod, while receiving rx_expect messages; returns
 * microseconds from the first post to the last completion. */
static double bw_loop(enum op op, size_t size, uint64_t iters, size_t inl, uint64_t cq_mod,
		      uint64_t post_list, int tx, uint64_t rx_expect)
{
	uint64_t window = tx_depth < iters ? tx_depth : iters;
	uint64_t posted = 0, completed = 0, received = 0, last_signaled = 0;
	double start = now_us();
	while ((tx && completed < iters) || received < rx_expect) {
		while (tx && posted < iters && posted - completed < window) {
			int signal = posted % cq_mod == cq_mod - 1 || posted == iters - 1;
			struct op_ctx *c = NULL;
			if (signal) {
				c = next_tx_ctx(posted + 1 - last_signaled);
				last_signaled = posted + 1;
			}
			/* Lists end every post_list posts, at the last post
			 * and where the window fills. */
			int list_end = (posted + 1) % post_list == 0 || posted + 1 == iters ||
				       posted + 1 - completed >= window;
			post_op(op, size, inl, c, list_end ? 0 : FI_MORE, &completed);
			posted++;
		}
		if (tx)
			completed += tx_poll();
		if (received < rx_expect)
			received += rx_poll(rx_expect - received);
	}
	return now_us() - start;
}

static uint64_t cq_mod_for(size_t size, uint64_t iters)
{
	uint64_t window = tx_depth < iters ? tx_depth : iters;
	/* perftest -l moderates completions by the list size. */
	uint64_t m = opt.cq_mod > 0	 ? (uint64_t)opt.cq_mod :
		     opt.post_list > 1	 ? opt.post_list :
		     size > CQ_MOD_SIZE_LIMIT ? 1 : DEF_CQ_MOD;
	return m > window ? window : m;
}

static void report_lat(size_t size, uint64_t iters, size_t inl, double *lat)
{
	double sum = 0;
	for (uint64_t i = 0; i < iters; i++)
		sum += lat[i];
	qsort(lat, iters, sizeof(*lat), compare);
	double med = iters % 2 ? lat[iters / 2] : (lat[iters / 2 - 1] + lat[iters / 2]) / 2;
	uint64_t p99 = (uint64_t)(iters * 0.99);
	if (p99 >= iters)
		p99 = iters - 1;
	printf("nd_perf test=%s prov=%s size=%zu iters=%lu inline=%zu lat_min_us=%.2f "
	       "lat_med_us=%.2f lat_mean_us=%.2f lat_max_us=%.2f lat_p99_us=%.2f\n",
	       test_names[opt.test], opt.prov, size, (unsigned long)iters, inl, lat[0], med,
	       sum / iters, lat[iters - 1], lat[p99]);
	fflush(stdout);
}

/* Client side of one size. */
static void client_size(size_t size)
{
	uint64_t iters = iters_for(size);
	size_t inl = opt.inline_size < 0 ? inject_max : (size_t)opt.inline_size;
	enum op op = op_of(opt.test);
	if (op == OP_READ)
		inl = 0;
	uint64_t cq_mod = cq_mod_for(size, iters);
	memset(rdst, 0, region);
	struct ctl m = { .type = CTL_READY, .size = size, .iters = iters, .inline_size = inl,
			 .cq_mod = cq_mod, .post_list = opt.post_list };
	send_ctl(&m);
	recv_ctl(&m, CTL_GO);

	if (is_lat(opt.test)) {
		double *t = calloc(iters + 1, sizeof(double));
		if (opt.test == READ_LAT) {
			read_lat(size, iters, t);
		} else {
			pingpong(op, size, iters, inl, t);
			for (uint64_t i = 0; i < iters; i++)
				t[i] = (t[i + 1] - t[i]) / 2;
		}
		report_lat(size, iters, inl, t);
		free(t);
		return;
	}
	uint64_t rx = opt.test == SEND_BW && opt.bidir ? iters : 0;
	double usec = bw_loop(op, size, iters, inl, cq_mod, opt.post_list, 1, rx);
	double bytes = (double)size * iters, msgs = iters;
	double mib_s = bytes / usec * 1e6 / (1 << 20), mpps = msgs / usec;
	if (opt.bidir) {
		recv_ctl(&m, CTL_RESULT);
		mib_s += m.bytes / m.usec * 1e6 / (1 << 20);
		mpps += m.bytes / size / m.usec;
	}
	printf("nd_perf test=%s prov=%s size=%zu iters=%lu inline=%zu bidir=%d tx_depth=%zu "
	       "cq_mod=%lu post_list=%lu bw_mib_s=%.2f mpps=%.6f\n",
	       test_names[opt.test], opt.prov, size, (unsigned long)iters, inl, opt.bidir,
	       tx_depth < iters ? tx_depth : (size_t)iters, (unsigned long)cq_mod,
	       (unsigned long)opt.post_list, mib_s, mpps);
	fflush(stdout);
}

/* Server side of one size, as the client's READY describes it. */
static void server_size(const struct ctl *r)
{
	size_t size = r->size, inl = r->inline_size;
	uint64_t iters = r->iters;
	enum op op = op_of(opt.test);
	if (size > region)
		die("size beyond the announced maximum");
	memset(rdst, 0, region);
	struct ctl m = { .type = CTL_GO };
	send_ctl(&m);
	if (opt.test == SEND_LAT || opt.test == WRITE_LAT) {
		pingpong(op, size, iters, inl, NULL);
	} else if (!is_lat(opt.test)) {
		uint64_t rx = opt.test == SEND_BW ? iters : 0;
		double usec = bw_loop(op, size, iters, inl, r->cq_mod, r->post_list ? r->post_list : 1,
				      opt.bidir, rx);
		if (opt.bidir) {
			struct ctl res = { .type = CTL_RESULT, .bytes = (double)size * iters,
					   .usec = usec };
			send_ctl(&res);
		}
	}
	/* read_lat: nothing to do; the next control message ends it. */
}

/* ------------------------------------------------- ofi_rxm's flow control */

/* The extension's table, as libfabric's internal include/ofi_util.h lays it
 * out (libfabric installs no header for it). */
struct flow_ctrl_ops {
	size_t size;
	bool (*available)(struct fid_ep *ep);
	int (*enable)(struct fid_ep *ep, uint64_t threshold);
	void (*add_credits)(struct fid_ep *ep, uint64_t credits);
	void (*set_send_handler)(struct fid_domain *domain,
				 ssize_t (*send_handler)(struct fid_ep *ep, uint64_t credits));
};

/* Never called: no credit message is due in a run (-F). */
static ssize_t no_credit_message(struct fid_ep *e, uint64_t credits)
{
	(void)e;
	fprintf(stderr, "nd_perf: the provider asked for a credit message of %lu credits\n",
		(unsigned long)credits);
	return -FI_EAGAIN;
}

/* -F, on the connected endpoint: as ofi_rxm enables it (threshold and
 * credits beyond the run, see the top of this file). */
static void enable_flow_ctrl(void)
{
	struct flow_ctrl_ops *ops = NULL;
	int ret = fi_open_ops(&domain->fid, "ofix_flow_ctrl_v1", 0, (void **)&ops, NULL);
	if (ret) {
		fprintf(stderr, "nd_perf: -F: the %s domain offers no flow control: %s\n", opt.prov,
			fi_strerror(-ret));
		exit(1);
	}
	if (!ops->available(ep))
		die("-F: the endpoint cannot keep flow-control credits");
	ops->set_send_handler(domain, no_credit_message);
	CHECK(ops->enable(ep, UINT64_MAX / 4));
	ops->add_credits(ep, UINT64_MAX / 4);
}

/* ------------------------------------------------------------- roles */

static int run_server(void)
{
	info = get_info(opt.local, opt.port, FI_SOURCE);
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	struct fi_eq_attr eq_attr = { .wait_obj = FI_WAIT_UNSPEC, .size = 64 };
	CHECK(fi_eq_open(fabric, &eq_attr, &eq, NULL));
	CHECK(fi_passive_ep(fabric, info, &pep, NULL));
	CHECK(fi_pep_bind(pep, &eq->fid, 0));
	CHECK(fi_listen(pep));
	if (!opt.quiet)
		printf("nd_perf: %s server listening on %s port %s\n", opt.prov, opt.local, opt.port);
	fflush(stdout);

	struct {
		struct fi_eq_cm_entry entry;
		uint8_t data[256];
	} ev;
	uint32_t type;
	int err;
	do {
		err = read_cm_event(&type, &ev.entry, sizeof(ev));
		if (err)
			fprintf(stderr, "nd_perf: listener error: %s\n", fi_strerror(err));
	} while (err);
	if (type != FI_CONNREQ)
		die("expected a connection request");
	struct conn_data cd;
	memcpy(&cd, ev.entry.data, sizeof(cd));
	if (cd.magic != MAGIC || cd.test >= NTESTS)
		die("connection request from something that is not nd_perf");
	opt.test = cd.test;
	opt.bidir = cd.bidir;
	opt.flow_ctrl = cd.flow_ctrl;
	struct fi_info *listen_info = info;
	info = ev.entry.info;
	CHECK(fi_domain(fabric, info, &domain, NULL));
	inject_max = info->tx_attr->inject_size;
	register_buffer(cd.max_size);
	open_endpoint(info);
	CHECK(fi_accept(ep, NULL, 0));
	if ((err = read_cm_event(&type, &ev.entry, sizeof(ev))) || type != FI_CONNECTED) {
		fprintf(stderr, "nd_perf: accept failed: %s\n", err ? fi_strerror(err) : "event");
		return 1;
	}
	if (opt.flow_ctrl)
		enable_flow_ctrl();
	exchange_hello();
	for (;;) {
		struct ctl r;
		recv_ctl(&r, 0);
		if (r.type == CTL_DONE)
			break;
		if (r.type != CTL_READY)
			die("unexpected control message");
		server_size(&r);
	}
	/* The client disconnects once its DONE completed: closing first could
	 * end its send while the adapter still holds it (soft-iWARP then
	 * completes it with a local QP error, though its bytes arrived). */
	ssize_t rc = fi_eq_sread(eq, &type, &ev.entry, sizeof(ev), 10000, 0);
	if (rc == -FI_EAVAIL) {
		struct fi_eq_err_entry err = { 0 };
		fi_eq_readerr(eq, &err, 0);
	} else if (rc < 0 && !opt.quiet) {
		fprintf(stderr, "nd_perf: no disconnect from the client within 10 s: %s\n",
			fi_strerror((int)-rc));
	}
	fi_shutdown(ep, 0);
	close_endpoint();
	fi_close(&mr->fid);
	fi_close(&pep->fid);
	fi_close(&eq->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	fi_freeinfo(listen_info);
	free(buf);
	return 0;
}

/* Connects, retrying while the server is not listening yet (10 s). */
static void client_connect(size_t max_size)
{
	struct conn_data cd = { .magic = MAGIC, .test = opt.test, .bidir = opt.bidir,
				.flow_ctrl = (uint8_t)opt.flow_ctrl, .max_size = max_size };
	struct {
		struct fi_eq_cm_entry entry;
		uint8_t data[256];
	} ev;
	for (int attempt = 0;; attempt++) {
		open_endpoint(info);
		CHECK(fi_connect(ep, info->dest_addr, &cd, sizeof(cd)));
		uint32_t type;
		int err = read_cm_event(&type, &ev.entry, sizeof(ev));
		if (!err && type == FI_CONNECTED)
			return;
		if (err != FI_ECONNREFUSED || attempt >= 50) {
			fprintf(stderr, "nd_perf: connect failed: %s\n",
				err ? fi_strerror(err) : "unexpected event");
			exit(1);
		}
		close_endpoint();
		usleep(200000);
	}
}

static int run_client(void)
{
	size_t max_size = 0;
	for (int i = 0; i < opt.nsizes; i++)
		if (opt.sizes[i] > max_size)
			max_size = opt.sizes[i];
	info = get_info(opt.server, opt.port, 0);
	if (max_size > info->ep_attr->max_msg_size)
		die("size beyond the provider's max_msg_size");
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	struct fi_eq_attr eq_attr = { .wait_obj = FI_WAIT_UNSPEC, .size = 64 };
	CHECK(fi_eq_open(fabric, &eq_attr, &eq, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	inject_max = info->tx_attr->inject_size;
	if (opt.inline_size > (long)inject_max) {
		if (!opt.quiet)
			fprintf(stderr, "nd_perf: -I %ld above the provider's inject_size %zu; using that\n",
				opt.inline_size, inject_max);
		opt.inline_size = (long)inject_max;
	}
	register_buffer(max_size);
	if (opt.cost)
		CALLGRIND_START_INSTRUMENTATION;
	client_connect(max_size);
	if (opt.flow_ctrl)
		enable_flow_ctrl();
	if (opt.cost) {
		perf_cq_calibrate();
		printf("nd_perf_calibrate prov=%s cq_read=%lu cq_read_empty=%lu\n", opt.prov,
		       (unsigned long)n_cq_read, (unsigned long)n_cq_empty);
		/* The receives posted at connection setup were collected
		 * before the calibration's dump too. */
		n_cq_read = n_cq_empty = n_cq_entries = n_recv = 0;
	}
	exchange_hello();
	for (int i = 0; i < opt.nsizes; i++)
		client_size(opt.sizes[i]);
	struct ctl m = { .type = CTL_DONE };
	send_ctl(&m);
	if (opt.cost)
		printf("nd_perf_calls test=%s prov=%s send=%lu write=%lu read=%lu recv=%lu cq_read=%lu "
		       "cq_read_empty=%lu cq_entries=%lu\n",
		       test_names[opt.test], opt.prov, (unsigned long)n_send, (unsigned long)n_write,
		       (unsigned long)n_read, (unsigned long)n_recv, (unsigned long)n_cq_read,
		       (unsigned long)n_cq_empty, (unsigned long)n_cq_entries);
	fi_shutdown(ep, 0);
	close_endpoint();
	fi_close(&mr->fid);
	fi_close(&eq->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	parse_options(argc, argv);
	return opt.is_server ? run_server() : run_client();
}
