/*
 * nd_server.c: the accepting side of NetworkDirect's connection model over
 * libfabric's nd provider. Run nd_client against it.
 *
 *   cc -Wall -Werror -o nd_server nd_server.c $(pkg-config --cflags --libs libfabric)
 *   ./nd_server [-a ADDRESS] [-p PORT]
 *
 * It listens, refuses the first request with private data of its own, and
 * accepts the second: it reads the requester's offered RDMA read limits
 * before accepting (ND GetReadLimits), sets its own, and answers with the
 * address and key of a buffer the client may write and read. It then
 * waits for the client's message, checks the bytes the client wrote into
 * the buffer, replies, and waits for the client to shut the connection
 * down. Exits 0 when all of that happened as it should.
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

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What the accept carries: where the client may write and read. */
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
			fprintf(stderr, "nd_server: %s: %s\n", #call, fi_strerror(-ret_));   \
			exit(1);                                                             \
		}                                                                            \
	} while (0)

/* The next event on the EQ, which must be `expected`; its entry in *entry
 * and the length of its private data in *data_len. */
static void wait_event(struct fid_eq *eq, uint32_t expected, struct fi_eq_cm_entry *entry,
		       size_t entry_size, size_t *data_len)
{
	uint32_t event;
	ssize_t n = fi_eq_sread(eq, &event, entry, entry_size, -1, 0);
	if (n == -FI_EAVAIL) {
		struct fi_eq_err_entry err = {0};
		fi_eq_readerr(eq, &err, 0);
		fprintf(stderr, "nd_server: EQ error %s\n", fi_strerror(err.err));
		exit(1);
	}
	if (n < 0 || event != expected) {
		fprintf(stderr, "nd_server: expected event %u, got %u (%zd)\n", expected, event, n);
		exit(1);
	}
	if (data_len)
		*data_len = (size_t)n - sizeof(*entry);
}

/* One completion from the CQ; exits on an error completion. */
static void wait_completion(struct fid_cq *cq)
{
	struct fi_cq_entry done;
	ssize_t n;
	while ((n = fi_cq_sread(cq, &done, 1, NULL, -1)) == -FI_EAGAIN)
		;
	if (n != 1) {
		struct fi_cq_err_entry err = {0};
		fi_cq_readerr(cq, &err, 0);
		fprintf(stderr, "nd_server: completion error %s\n", fi_strerror(err.err ? err.err : (int)-n));
		exit(1);
	}
}

int main(int argc, char **argv)
{
	const char *address = NULL, *port = "7471";
	int opt;
	while ((opt = getopt(argc, argv, "a:p:h")) != -1) {
		switch (opt) {
		case 'a': address = optarg; break;
		case 'p': port = optarg; break;
		default:
			fprintf(stderr, "usage: nd_server [-a ADDRESS] [-p PORT]\n");
			return opt == 'h' ? 0 : 2;
		}
	}

	struct fi_info *hints = fi_allocinfo(), *info;
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG | FI_RMA;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(FI_ND_PROV_NAME);
	CHECK(fi_getinfo(FI_VERSION(1, 17), address, port, FI_SOURCE, hints, &info));
	fi_freeinfo(hints);

	struct fid_fabric *fabric;
	struct fid_eq *eq;
	struct fid_pep *pep;
	struct fi_eq_attr eq_attr = {.wait_obj = FI_WAIT_UNSPEC};
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_eq_open(fabric, &eq_attr, &eq, NULL));
	CHECK(fi_passive_ep(fabric, info, &pep, NULL));
	CHECK(fi_pep_bind(pep, &eq->fid, 0));
	CHECK(fi_listen(pep));
	printf("nd_server: listening on %s port %s (%s)\n", address ? address : "any", port,
	       info->domain_attr->name);
	fflush(stdout);

	/* Room for the largest private data a request may carry. */
	struct {
		struct fi_eq_cm_entry entry;
		char data[256];
	} cm;
	size_t len;

	/* The first request is refused, with a reason the requester reads. */
	wait_event(eq, FI_CONNREQ, &cm.entry, sizeof(cm), &len);
	printf("nd_server: request 1 says \"%.*s\": rejecting it\n", (int)len, cm.data);
	static const char reason[] = "come back with a name";
	CHECK(fi_reject(pep, cm.entry.info->handle, reason, sizeof(reason)));
	fi_freeinfo(cm.entry.info);

	/* The second is accepted. */
	wait_event(eq, FI_CONNREQ, &cm.entry, sizeof(cm), &len);
	printf("nd_server: request 2 from \"%.*s\"\n", (int)len, cm.data);
	struct fi_info *request = cm.entry.info;
	struct fi_nd_read_limits offered;
	CHECK(fi_nd_peer_read_limits(request->handle, &offered));
	/* Seen from here: inbound = reads it would issue to us, outbound =
	 * reads of ours it would serve. */
	printf("nd_server: it would issue up to %u RDMA reads to us and serve %u of ours\n", offered.inbound,
	       offered.outbound);

	struct fid_domain *domain;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_UNSPEC};
	CHECK(fi_domain(fabric, request, &domain, NULL));
	CHECK(fi_endpoint(domain, request, &ep, NULL));
	CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_ep_bind(ep, &eq->fid, 0));
	/* Serve at most 2 of the client's reads at once (capped by its offer). */
	uint32_t inbound = 2;
	CHECK(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_ND_INBOUND_READ_LIMIT, &inbound, sizeof(inbound)));
	CHECK(fi_enable(ep));

	/* The buffer the client writes and reads, and the messages. */
	static uint8_t buffer[BUF_LEN];
	static char msgs[2][MSG_LEN]; /* the client's message, the reply */
	struct fid_mr *buffer_mr, *msg_mr;
	CHECK(fi_mr_reg(domain, buffer, sizeof(buffer), FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0, &buffer_mr,
			NULL));
	CHECK(fi_mr_reg(domain, msgs, sizeof(msgs), FI_RECV | FI_SEND, 0, 0, 0, &msg_mr, NULL));
	CHECK(fi_recv(ep, msgs[0], MSG_LEN, fi_mr_desc(msg_mr), 0, NULL));

	struct offer offer = {(uintptr_t)buffer, fi_mr_key(buffer_mr), sizeof(buffer)};
	CHECK(fi_accept(ep, &offer, sizeof(offer)));
	wait_event(eq, FI_CONNECTED, &cm.entry, sizeof(cm), NULL);
	fi_freeinfo(request);
	uint32_t in, out;
	size_t optlen = sizeof(in);
	CHECK(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_ND_INBOUND_READ_LIMIT, &in, &optlen));
	optlen = sizeof(out);
	CHECK(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_ND_OUTBOUND_READ_LIMIT, &out, &optlen));
	printf("nd_server: connected; read limits inbound %u, outbound %u\n", in, out);
	fflush(stdout);

	/* The client's message comes after its RDMA write: the bytes are there. */
	wait_completion(cq);
	size_t good = 0;
	while (good < sizeof(buffer) && buffer[good] == (uint8_t)(good * 7 + 1))
		good++;
	msgs[0][MSG_LEN - 1] = '\0';
	printf("nd_server: client says \"%s\"; %zu of %zu bytes written as expected\n", msgs[0], good,
	       sizeof(buffer));
	snprintf(msgs[1], MSG_LEN, "%zu bytes checked", good);
	CHECK(fi_send(ep, msgs[1], strlen(msgs[1]) + 1, fi_mr_desc(msg_mr), 0, NULL));
	wait_completion(cq);

	wait_event(eq, FI_SHUTDOWN, &cm.entry, sizeof(cm), NULL);
	printf("nd_server: the client shut the connection down\n");

	fi_close(&ep->fid);
	fi_close(&buffer_mr->fid);
	fi_close(&msg_mr->fid);
	fi_close(&cq->fid);
	fi_close(&domain->fid);
	fi_close(&pep->fid);
	fi_close(&eq->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	return good == sizeof(buffer) ? 0 : 1;
}
