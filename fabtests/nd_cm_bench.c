/*
 * nd_cm_bench: connection setup through libfabric, server and client in one
 * process on one device, for any FI_EP_MSG provider (-p nd, -p verbs).
 *
 *   nd_cm_bench [-p PROVIDER] [-a ADDRESS] [-n CONNECTIONS] [-r ROUNDS] [-x] [-Q] [-q]
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
 * hints), so that the comparison with cmtime creates the same queue pairs;
 * without it they take the provider's default sizes, as applications
 * usually do.
 * It also counts file descriptors before and after all rounds, so the
 * same program run under valgrind checks that cycles leave nothing behind.
 *
 * Completion queues are bound only where the provider offers them (verbs
 * requires them to enable an endpoint; nd does not need them to connect).
 */
#include <arpa/inet.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nd_fds.h"
#include "nd_ft.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#define MAX_CONN 1024

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


/* Binds a CQ to the endpoint if the provider has CQs. */
static struct fid_cq *maybe_bind_cq(struct fid_ep *ep)
{
	struct fi_cq_attr attr = { .format = FI_CQ_FORMAT_CONTEXT, .size = 16 };
	struct fid_cq *cq = NULL;
	if (fi_cq_open(domain, &attr, &cq, NULL))
		return NULL;
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	return cq;
}

static struct fid_ep *open_ep(struct fi_info *from, struct fid_cq **cq)
{
	struct fid_ep *ep;
	CHECK(fi_endpoint(domain, from, &ep, NULL));
	CHECK(fi_ep_bind(ep, &eq->fid, 0));
	*cq = maybe_bind_cq(ep);
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

static void read_event(uint32_t *type, struct fi_eq_cm_entry *entry, size_t size)
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

/* One round; returns connections per second. */
static double round_of(int n, double *connect_us, double *accept_us)
{
	struct sockaddr_storage addr;
	size_t addrlen = sizeof(addr);
	CHECK(fi_getname(&pep->fid, &addr, &addrlen));
	memset(conns, 0, sizeof(conns));

	/* The clock runs from before each client endpoint is opened: a
	 * provider may resolve the address there (verbs does, blocking). */
	double start = now_us();
	for (int i = 0; i < n; i++) {
		conns[i].started = now_us();
		conns[i].client = open_ep(client_info, &conns[i].client_cq);
		CHECK(fi_connect(conns[i].client, &addr, &i, sizeof(i)));
	}
	int up = 0;
	double last = start;
	struct {
		struct fi_eq_cm_entry entry;
		uint8_t data[256];
	} buf;
	while (up < 2 * n) {
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
	double sum_connect = 0, sum_accept = 0;
	for (int i = 0; i < n; i++) {
		sum_connect += conns[i].client_up - conns[i].started;
		sum_accept += conns[i].server_up - conns[i].request_seen;
	}
	*connect_us = sum_connect / n;
	*accept_us = sum_accept / n;
	if (transfer)
		exchange(n, round_number++);

	for (int i = 0; i < n; i++) {
		fi_shutdown(conns[i].client, 0);
		fi_close(&conns[i].client->fid);
		fi_close(&conns[i].server->fid);
		if (conns[i].client_cq)
			fi_close(&conns[i].client_cq->fid);
		if (conns[i].server_cq)
			fi_close(&conns[i].server_cq->fid);
	}
	/* Events of closed endpoints never arrive; drain what may be queued. */
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
	return n / ((last - start) / 1e6);
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

static void fill(uint8_t *buf, int conn, int round, int side)
{
	for (int i = 0; i < MSG_LEN; i++)
		buf[i] = (uint8_t)(conn * 7 + round * 13 + side * 101 + i);
}

static void check(const uint8_t *buf, int conn, int round, int side)
{
	uint8_t want[MSG_LEN];
	fill(want, conn, round, side);
	if (memcmp(buf, want, MSG_LEN)) {
		fprintf(stderr, "connection %d round %d: the message arrived corrupted\n", conn, round);
		exit(1);
	}
}

/* A message each way on every connection, checked byte by byte. */
static void exchange(int n, int round)
{
	void *desc = fi_mr_desc(messages_mr);
	for (int i = 0; i < n; i++) {
		memset(messages[i][1], 0, MSG_LEN);
		CHECK((int)fi_recv(conns[i].server, messages[i][1], MSG_LEN, desc, 0, NULL));
		fill(messages[i][0], i, round, 0);
		CHECK((int)fi_send(conns[i].client, messages[i][0], MSG_LEN, desc, 0, NULL));
	}
	for (int i = 0; i < n; i++) {
		wait_completion(conns[i].server_cq); /* the receive */
		check(messages[i][1], i, round, 0);
		wait_completion(conns[i].client_cq); /* the send */
		CHECK((int)fi_recv(conns[i].client, messages[i][0], MSG_LEN, desc, 0, NULL));
		fill(messages[i][1], i, round, 1);
		CHECK((int)fi_send(conns[i].server, messages[i][1], MSG_LEN, desc, 0, NULL));
		wait_completion(conns[i].client_cq);
		wait_completion(conns[i].server_cq);
	}
	for (int i = 0; i < n; i++)
		check(messages[i][0], i, round, 1);
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

int main(int argc, char **argv)
{
	const char *prov = "nd", *address = getenv("ND_GUEST_IP");
	int n = 16, rounds = 5, opt;
	if (!address)
		address = "10.0.2.15";
	while ((opt = getopt(argc, argv, "p:a:n:r:xQq")) != -1) {
		switch (opt) {
		case 'p': prov = optarg; break;
		case 'a': address = optarg; break;
		case 'n': n = atoi(optarg); break;
		case 'r': rounds = atoi(optarg); break;
		case 'x': transfer = 1; break;
		case 'Q': small_queues = 1; break;
		case 'q': quiet = 1; break;
		default:
			fprintf(stderr, "usage: %s [-p provider] [-a address] [-n connections] [-r rounds] [-x] [-Q] [-q]\n",
				argv[0]);
			return 2;
		}
	}
	if (n < 1 || n > MAX_CONN || rounds < 1 || rounds > 1000) {
		fprintf(stderr, "1 <= connections <= %d, 1 <= rounds <= 1000\n", MAX_CONN);
		return 2;
	}

	struct fi_info *hints = bench_hints(prov, FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
						     FI_MR_PROV_KEY);
	CHECK(fi_getinfo(FI_VERSION(1, 17), address, "0", FI_SOURCE, hints, &info));
	fi_freeinfo(hints);
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	if (transfer)
		CHECK(fi_mr_reg(domain, messages, sizeof(messages), FI_SEND | FI_RECV, 0, 0, 0,
				&messages_mr, NULL));
	struct fi_eq_attr eq_attr = { .wait_obj = FI_WAIT_FD, .size = 4 * MAX_CONN };
	CHECK(fi_eq_open(fabric, &eq_attr, &eq, NULL));
	CHECK(fi_passive_ep(fabric, info, &pep, NULL));
	CHECK(fi_pep_bind(pep, &eq->fid, 0));
	int backlog = MAX_CONN;
	fi_control(&pep->fid, FI_BACKLOG, &backlog);
	CHECK(fi_listen(pep));

	/* Clients use an info that names the listener as destination, the
	 * way applications get one (fi_getinfo with node and service). */
	struct sockaddr_in listen_addr;
	size_t listen_len = sizeof(listen_addr);
	CHECK(fi_getname(&pep->fid, &listen_addr, &listen_len));
	char service[16];
	snprintf(service, sizeof(service), "%u", ntohs(listen_addr.sin_port));
	hints = bench_hints(prov, info->domain_attr->mr_mode);
	CHECK(fi_getinfo(FI_VERSION(1, 17), address, service, 0, hints, &client_info));
	fi_freeinfo(hints);

	double rate[1000], connect_us[1000], accept_us[1000];
	round_of(1, &connect_us[0], &accept_us[0]); /* warm-up */
	int fds_before = nd_count_fds();
	int ids_before = count_cm_ids();
	for (int r = 0; r < rounds; r++) {
		rate[r] = round_of(n, &connect_us[r], &accept_us[r]);
		if (!quiet)
			printf("round %d: %d connections, %.0f conn/s, connect %.0f us, accept %.0f us\n",
			       r, n, rate[r], connect_us[r], accept_us[r]);
	}
	int fds_after = nd_count_fds();
	int ids_after = count_cm_ids();
	printf("%s n=%d rounds=%d%s: %.0f conn/s, connect %.0f us, accept %.0f us (medians); fds %d -> %d\n",
	       prov, n, rounds, transfer ? " with transfers" : "", median(rate, rounds), median(connect_us, rounds),
	       median(accept_us, rounds), fds_before, fds_after);
	if (ids_before >= 0)
		printf("rdma_cm ids of this process: %d before the rounds, %d after\n", ids_before,
		       ids_after);

	fi_close(&pep->fid);
	if (messages_mr)
		fi_close(&messages_mr->fid);
	fi_close(&eq->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(client_info);
	fi_freeinfo(info);
	return fds_after == fds_before && ids_after == ids_before ? 0 : 1;
}
