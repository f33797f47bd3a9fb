/*
 * nd_client.c: the connecting side of NetworkDirect's connection model over
 * libfabric's nd provider, against nd_server.
 *
 *   cc -Wall -Werror -o nd_client nd_client.c $(pkg-config --cflags --libs libfabric)
 *   ./nd_client [-p PORT] SERVER-ADDRESS
 *
 * Its first request is refused: the reject's private data arrives with the
 * FI_ECONNREFUSED error entry. Its second asks for manual completion (ND's
 * CompleteConnect): the server's answer (the address and key of a buffer)
 * and both sides' RDMA read limits are looked at before the connection is
 * completed. It then writes a pattern into the server's buffer with RDMA
 * write, reads it back with RDMA read, compares, tells the server, reads
 * its reply, and shuts the connection down. Exits 0 when every byte came
 * back and every step went as ND says it should.
 *
 * <rdma/fi_ext_nd.h> comes with the provider's package (libfabric-nd).
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext_nd.h>
#include <rdma/fi_rma.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What the server's accept carries (nd_server.c). */
struct offer {
	uint64_t addr;
	uint64_t key;
	uint32_t len;
};

#define BUF_LEN 4096
#define MSG_LEN 64

#define CHECK(call)                                                                          \
	do {                                                                                 \
		int ret_ = (int)(call);                                                      \
		if (ret_) {                                                                  \
			fprintf(stderr, "nd_client: %s: %s\n", #call, fi_strerror(-ret_));   \
			exit(1);                                                             \
		}                                                                            \
	} while (0)

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_eq *eq;
static struct fid_cq *cq;
static struct fi_info *info;

/* One completion from the CQ; exits on an error completion. */
static void wait_completion(void)
{
	struct fi_cq_entry done;
	ssize_t n;
	while ((n = fi_cq_sread(cq, &done, 1, NULL, -1)) == -FI_EAGAIN)
		;
	if (n != 1) {
		struct fi_cq_err_entry err = {0};
		fi_cq_readerr(cq, &err, 0);
		fprintf(stderr, "nd_client: completion error %s\n", fi_strerror(err.err ? err.err : (int)-n));
		exit(1);
	}
}

static struct fid_ep *open_endpoint(void)
{
	struct fid_ep *ep;
	CHECK(fi_endpoint(domain, info, &ep, NULL));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_ep_bind(ep, &eq->fid, 0));
	return ep;
}

int main(int argc, char **argv)
{
	const char *port = "7471";
	int opt;
	while ((opt = getopt(argc, argv, "p:h")) != -1) {
		switch (opt) {
		case 'p': port = optarg; break;
		default:
			fprintf(stderr, "usage: nd_client [-p PORT] SERVER-ADDRESS\n");
			return opt == 'h' ? 0 : 2;
		}
	}
	if (optind + 1 != argc) {
		fprintf(stderr, "usage: nd_client [-p PORT] SERVER-ADDRESS\n");
		return 2;
	}

	struct fi_info *hints = fi_allocinfo();
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG | FI_RMA;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(FI_ND_PROV_NAME);
	CHECK(fi_getinfo(FI_VERSION(1, 17), argv[optind], port, 0, hints, &info));
	fi_freeinfo(hints);

	struct fi_eq_attr eq_attr = {.wait_obj = FI_WAIT_UNSPEC};
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_UNSPEC};
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_eq_open(fabric, &eq_attr, &eq, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));

	struct {
		struct fi_eq_cm_entry entry;
		char data[256];
	} cm;
	uint32_t event;
	ssize_t n;

	/* 1. A request the server refuses: its reason comes in err_data. */
	struct fid_ep *ep = open_endpoint();
	CHECK(fi_enable(ep));
	static const char ask[] = "reject me";
	CHECK(fi_connect(ep, info->dest_addr, ask, sizeof(ask) - 1));
	n = fi_eq_sread(eq, &event, &cm.entry, sizeof(cm), -1, 0);
	if (n != -FI_EAVAIL) {
		fprintf(stderr, "nd_client: expected a refusal, got event %u (%zd)\n", event, n);
		return 1;
	}
	char reason[256] = "";
	struct fi_eq_err_entry err = {.err_data = reason, .err_data_size = sizeof(reason) - 1};
	if (fi_eq_readerr(eq, &err, 0) < 0 || err.err != FI_ECONNREFUSED) {
		fprintf(stderr, "nd_client: expected FI_ECONNREFUSED, got %s\n", fi_strerror(err.err));
		return 1;
	}
	printf("nd_client: refused, with \"%.*s\"\n", (int)err.err_data_size, reason);
	fi_close(&ep->fid);

	/* 2. A request completed by hand (CompleteConnect), with our read
	 * limits offered: at most 4 reads of ours in flight. */
	ep = open_endpoint();
	int manual = 1;
	uint32_t outbound = 4;
	CHECK(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_ND_MANUAL_COMPLETE, &manual, sizeof(manual)));
	CHECK(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_ND_OUTBOUND_READ_LIMIT, &outbound, sizeof(outbound)));
	CHECK(fi_enable(ep));

	static uint8_t local[2][BUF_LEN]; /* what is written, what is read back */
	static char msgs[2][MSG_LEN];     /* our message, the server's reply */
	struct fid_mr *local_mr, *msg_mr;
	CHECK(fi_mr_reg(domain, local, sizeof(local), FI_WRITE | FI_READ, 0, 0, 0, &local_mr, NULL));
	CHECK(fi_mr_reg(domain, msgs, sizeof(msgs), FI_SEND | FI_RECV, 0, 0, 0, &msg_mr, NULL));
	CHECK(fi_recv(ep, msgs[1], MSG_LEN, fi_mr_desc(msg_mr), 0, NULL));

	static const char name[] = "nd_client";
	CHECK(fi_connect(ep, info->dest_addr, name, sizeof(name) - 1));
	n = fi_eq_sread(eq, &event, &cm.entry, sizeof(cm), -1, 0);
	if (n < 0 || event != FI_ND_CONNRESP || (size_t)n - sizeof(cm.entry) < sizeof(struct offer)) {
		fprintf(stderr, "nd_client: expected FI_ND_CONNRESP with an offer, got event %u (%zd)\n", event, n);
		return 1;
	}
	struct offer offer;
	memcpy(&offer, cm.data, sizeof(offer));
	struct fi_nd_read_limits peer;
	CHECK(fi_nd_peer_read_limits(&ep->fid, &peer));
	uint32_t in, out;
	size_t optlen = sizeof(in);
	CHECK(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_ND_INBOUND_READ_LIMIT, &in, &optlen));
	optlen = sizeof(out);
	CHECK(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_ND_OUTBOUND_READ_LIMIT, &out, &optlen));
	/* peer.outbound: reads of ours the server serves at once; out: ours,
	 * negotiated down to that. */
	printf("nd_client: accepted: %u bytes at 0x%" PRIx64 "; the server serves %u reads at once, "
	       "so we issue at most %u (and serve %u)\n",
	       offer.len, offer.addr, peer.outbound, out, in);
	if (offer.len < BUF_LEN || out > outbound) {
		/* Not what we asked for: ND lets the connector say no here. */
		static const char no[] = "not enough";
		fi_nd_reject_connect(ep, no, sizeof(no) - 1);
		fprintf(stderr, "nd_client: rejected the server's answer\n");
		return 1;
	}
	CHECK(fi_nd_complete_connect(ep));
	n = fi_eq_sread(eq, &event, &cm.entry, sizeof(cm), -1, 0);
	if (n < 0 || event != FI_CONNECTED) {
		fprintf(stderr, "nd_client: expected FI_CONNECTED, got event %u (%zd)\n", event, n);
		return 1;
	}
	printf("nd_client: connected\n");

	/* RDMA write a pattern into the server's buffer, read it back. */
	for (size_t i = 0; i < BUF_LEN; i++)
		local[0][i] = (uint8_t)(i * 7 + 1);
	void *desc = fi_mr_desc(local_mr);
	CHECK(fi_write(ep, local[0], BUF_LEN, desc, 0, offer.addr, offer.key, NULL));
	wait_completion();
	CHECK(fi_read(ep, local[1], BUF_LEN, desc, 0, offer.addr, offer.key, NULL));
	wait_completion();
	const int same = memcmp(local[0], local[1], BUF_LEN) == 0;
	printf("nd_client: wrote %d bytes and read them back: %s\n", BUF_LEN, same ? "the same" : "DIFFERENT");

	/* Tell the server; its reply says what it found in its buffer. */
	snprintf(msgs[0], MSG_LEN, "wrote %d bytes", BUF_LEN);
	CHECK(fi_send(ep, msgs[0], strlen(msgs[0]) + 1, fi_mr_desc(msg_mr), 0, NULL));
	wait_completion();
	wait_completion();
	msgs[1][MSG_LEN - 1] = '\0';
	printf("nd_client: server says \"%s\"\n", msgs[1]);

	CHECK(fi_shutdown(ep, 0));
	fi_close(&ep->fid);
	fi_close(&local_mr->fid);
	fi_close(&msg_mr->fid);
	fi_close(&cq->fid);
	fi_close(&domain->fid);
	fi_close(&eq->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	return same ? 0 : 1;
}
