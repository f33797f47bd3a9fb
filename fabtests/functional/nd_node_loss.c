/*
 * nd_node_loss: what the survivor sees when its peer's host dies mid-transfer
 * (a node of util/nd-cluster powered off: no disconnect, no reply, ever).
 *
 *   server (the node that dies): nd_node_loss -p PROV -s [-a LOCAL_ADDR] [-P PORT]
 *     accepts one connection, gives its buffer's address and key in the
 *     accept data, keeps receives posted, and serves until it is gone.
 *   client (the survivor): nd_node_loss -p PROV -c SERVER [-P PORT] [-T SECONDS] [-S]
 *     keeps sends, RDMA writes and RDMA reads outstanding (a window of 32)
 *     until requests fail, then waits for every request it posted to
 *     complete, one way or the other, and closes everything.
 *
 * The client prints the time from the last success to the first error, the
 * requests posted, succeeded and failed (with the first error), how many
 * FI_SHUTDOWN came and when, and exits 0 only when errors came within -T
 * seconds (default 60) of the last success, every request completed, and
 * every close returned 0; with -S, also only when exactly one FI_SHUTDOWN
 * came within 5 s of the first error (nd's promise, fi_nd(7)). Plain
 * libfabric API: runs with any MSG provider.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

#define WINDOW 32
#define MSG_BYTES 4096
#define RMA_BYTES 65536
#define REGION (RMA_BYTES * 2)

struct peer_region {
	uint64_t addr, key;
};

static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_eq *eq;
static struct fid_pep *pep;
static struct fid_ep *ep;
static struct fid_cq *cq;
static struct fid_mr *mr;
static uint8_t *buf;

static void open_common(const char *prov, const char *node, const char *port, int server)
{
	struct fi_info *hints = fi_allocinfo();
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG | FI_RMA;
	hints->mode = FI_CONTEXT | FI_RX_CQ_DATA;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(prov);
	CHECK(fi_getinfo(FI_VERSION(1, 5), node, port, server ? FI_SOURCE : 0, hints, &info));
	fi_freeinfo(hints);
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	struct fi_eq_attr eq_attr = { .wait_obj = FI_WAIT_UNSPEC };
	CHECK(fi_eq_open(fabric, &eq_attr, &eq, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	buf = calloc(1, REGION);
	CHECK(fi_mr_reg(domain, buf, REGION, FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
			0, 0, 0, &mr, NULL));
}

static void open_ep(struct fi_info *from)
{
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT, .size = 4 * WINDOW };
	CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHECK(fi_endpoint(domain, from, &ep, NULL));
	CHECK(fi_ep_bind(ep, &eq->fid, 0));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_enable(ep));
}

static int wait_event(uint32_t want, void *data, size_t size, int timeout_ms)
{
	uint32_t event;
	struct {
		struct fi_eq_cm_entry cm;
		uint8_t data[256];
	} entry;
	ssize_t rc = fi_eq_sread(eq, &event, &entry, sizeof(entry), timeout_ms, 0);
	if (rc < 0) {
		fprintf(stderr, "nd_node_loss: fi_eq_sread: %s\n", fi_strerror((int)-rc));
		return -1;
	}
	if (event != want) {
		fprintf(stderr, "nd_node_loss: event %u, wanted %u\n", event, want);
		return -1;
	}
	if (event == FI_CONNREQ)
		info = entry.cm.info;
	if (data && (size_t)rc >= sizeof(entry.cm) + size)
		memcpy(data, entry.data, size);
	return 0;
}

static int serve(const char *prov, const char *local, const char *port)
{
	open_common(prov, local, port, 1);
	CHECK(fi_passive_ep(fabric, info, &pep, NULL));
	CHECK(fi_pep_bind(pep, &eq->fid, 0));
	CHECK(fi_listen(pep));
	printf("nd_node_loss: listening\n");
	fflush(stdout);
	fi_freeinfo(info);
	info = NULL;
	if (wait_event(FI_CONNREQ, NULL, 0, -1))
		return 1;
	open_ep(info);
	struct fi_context rx[WINDOW];
	for (int i = 0; i < WINDOW; i++)
		CHECK(fi_recv(ep, buf + (size_t)i * MSG_BYTES % RMA_BYTES, MSG_BYTES, fi_mr_desc(mr), 0, &rx[i]));
	struct peer_region mine = { (uintptr_t)buf, fi_mr_key(mr) };
	CHECK(fi_accept(ep, &mine, sizeof(mine)));
	if (wait_event(FI_CONNECTED, NULL, 0, 30000))
		return 1;
	printf("nd_node_loss: connected, serving\n");
	fflush(stdout);
	for (;;) { /* until this host is gone */
		struct fi_cq_entry e;
		if (fi_cq_read(cq, &e, 1) == 1)
			fi_recv(ep, buf, MSG_BYTES, fi_mr_desc(mr), 0, e.op_context);
	}
}

/* One look at the EQ: counts FI_SHUTDOWN (the time of the first in
 * *first_at), prints an error entry. */
static void poll_eq(struct fid_eq *eq, int *shutdowns, double *first_at)
{
	uint32_t event;
	struct fi_eq_cm_entry cm;
	ssize_t rc = fi_eq_read(eq, &event, &cm, sizeof(cm), 0);
	if (rc > 0 && event == FI_SHUTDOWN && !(*shutdowns)++)
		*first_at = nd_now_us();
	if (rc == -FI_EAVAIL) {
		struct fi_eq_err_entry err = { 0 };
		if (fi_eq_readerr(eq, &err, 0) == 1)
			printf("nd_node_loss: EQ error entry: %s (provider %d)\n", fi_strerror(err.err),
			       err.prov_errno);
	}
}

static int survive(const char *prov, const char *server, const char *port, int limit_s, int want_shutdown)
{
	open_common(prov, server, port, 0);
	open_ep(info);
	CHECK(fi_connect(ep, info->dest_addr, NULL, 0));
	struct peer_region peer;
	if (wait_event(FI_CONNECTED, &peer, sizeof(peer), 30000))
		return 1;
	printf("nd_node_loss: connected; keeping %d sends, writes and reads outstanding\n", WINDOW);
	fflush(stdout);

	struct fi_context ctx[WINDOW];
	uint64_t posted = 0, succeeded = 0, failed = 0;
	int first_err = 0, shutdown_seen = 0, stop_posting = 0;
	double shutdown_at = 0;
	double last_success = nd_now_us(), first_error = 0, deadline = 0;
	void *desc = fi_mr_desc(mr);
	for (;;) {
		while (!stop_posting && posted - succeeded - failed < WINDOW) {
			ssize_t rc;
			struct fi_context *c = &ctx[posted % WINDOW];
			switch (posted % 3) {
			case 0:
				rc = fi_send(ep, buf, MSG_BYTES, desc, 0, c);
				break;
			case 1:
				rc = fi_write(ep, buf, RMA_BYTES, desc, 0, peer.addr, peer.key, c);
				break;
			default:
				rc = fi_read(ep, buf + RMA_BYTES, RMA_BYTES, desc, 0, peer.addr, peer.key, c);
				break;
			}
			if (rc == -FI_EAGAIN)
				break;
			if (rc) {
				printf("nd_node_loss: posting stops: %s\n", fi_strerror((int)-rc));
				stop_posting = 1;
				break;
			}
			posted++;
		}
		struct fi_cq_entry e;
		ssize_t n = fi_cq_read(cq, &e, 1);
		if (n == 1) {
			succeeded++;
			last_success = nd_now_us();
		} else if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err = { 0 };
			if (fi_cq_readerr(cq, &err, 0) == 1) {
				if (!failed) {
					first_error = nd_now_us();
					first_err = err.err;
					deadline = first_error + 30e6; /* the rest must follow */
				}
				failed++;
				stop_posting = 1;
			}
		} else if (n != -FI_EAGAIN) {
			fprintf(stderr, "nd_node_loss: fi_cq_read: %s\n", fi_strerror((int)-n));
			return 1;
		}
		poll_eq(eq, &shutdown_seen, &shutdown_at);
		const double now = nd_now_us();
		if (failed && succeeded + failed == posted)
			break;
		if (!failed && now - last_success > limit_s * 1e6) {
			printf("nd_node_loss: FAIL: no completion for %d s and no error: the survivor would hang\n",
			       limit_s);
			return 1;
		}
		if (failed && now > deadline) {
			printf("nd_node_loss: FAIL: %llu requests never completed\n",
			       (unsigned long long)(posted - succeeded - failed));
			return 1;
		}
	}
	/* FI_SHUTDOWN may follow the errors; a second one may not come at
	 * all: read for 5 s after the first error. */
	while (nd_now_us() < first_error + 5e6) {
		poll_eq(eq, &shutdown_seen, &shutdown_at);
		usleep(20000);
	}
	const double detect_ms = (first_error - last_success) / 1e3;
	printf("nd_node_loss: last success to first error %.0f ms; posted %llu, succeeded %llu, failed %llu "
	       "(first: %s), outstanding 0\n",
	       detect_ms, (unsigned long long)posted, (unsigned long long)succeeded, (unsigned long long)failed,
	       fi_strerror(first_err));
	if (shutdown_seen)
		printf("nd_node_loss: FI_SHUTDOWN %d time(s), the first %.0f ms after the first error\n",
		       shutdown_seen, (shutdown_at - first_error) / 1e3);
	else
		printf("nd_node_loss: FI_SHUTDOWN not seen within 5 s of the first error\n");
	const int shutdown_ok = !want_shutdown || shutdown_seen == 1;
	if (!shutdown_ok)
		printf("nd_node_loss: FAIL: -S wants exactly one FI_SHUTDOWN\n");
	int closes = fi_close(&ep->fid) | fi_close(&cq->fid) | fi_close(&mr->fid) | fi_close(&eq->fid) |
		     fi_close(&domain->fid) | fi_close(&fabric->fid);
	fi_freeinfo(info);
	free(buf);
	printf("nd_node_loss: every close %s\n", closes ? "did NOT return 0" : "returned 0");
	return closes || detect_ms > limit_s * 1e3 || !shutdown_ok ? 1 : 0;
}

/* The program's own options. */
static struct {
	const char *server, *port;
	int is_server, limit_s, want_shutdown;
} args = { .port = "9240", .limit_s = 60 };

static int option(int opt, const char *arg)
{
	switch (opt) {
	case 's': args.is_server = 1; return 0;
	case 'c': args.server = arg; return 0;
	case 'P': args.port = arg; return 0;
	case 'T': args.limit_s = atoi(arg); return 0;
	case 'S': args.want_shutdown = 1; return 0;
	}
	return -1;
}

int main(int argc, char **argv)
{
	const char *prov = "nd", *local = NULL;
	const struct nd_cli cli = { .optstring = "p:sc:a:P:T:S", .prov = &prov, .address = &local, .option = option,
				    .usage = "usage: %s [-p PROV] (-s [-a LOCAL] | -c SERVER [-S]) [-P PORT] [-T SECONDS]\n" };
	if (nd_parse_options(&cli, argc, argv))
		return 2;
	if (args.is_server == !!args.server) {
		fprintf(stderr, "nd_node_loss: one of -s and -c\n");
		return 2;
	}
	return args.is_server ? serve(prov, local, args.port)
			      : survive(prov, args.server, args.port, args.limit_s, args.want_shutdown);
}
