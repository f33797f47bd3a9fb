/* nd_pair.h: one process's connected pair of FI_EP_MSG endpoints (the
 * first connects, the second accepts) on one domain, EQ and CQ, for the
 * programs with subtests (nd_subtest.h); every wait bounded. C; one
 * translation unit per program. */
#ifndef ND_PAIR_H
#define ND_PAIR_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "nd_subtest.h"

enum { ND_PAIR_WAIT_MS = 20000 };

struct pair {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_eq *eq;
	struct fid_pep *pep;
	struct fid_cq *cq;
	struct fid_ep *ep[2]; /* 0 connects, 1 accepts */
	uint64_t mr_mode;
	struct fi_info *connect_info; /* the listener as destination */
};

static inline int next_event(struct pair *p, uint32_t want, const char *what)
{
	struct {
		struct fi_eq_cm_entry cm;
		uint8_t data[256];
	} e;
	uint32_t event;
	ssize_t rc = fi_eq_sread(p->eq, &event, &e, sizeof(e), ND_PAIR_WAIT_MS, 0);
	if (rc == -FI_EAVAIL) {
		struct fi_eq_err_entry err = { 0 };
		fi_eq_readerr(p->eq, &err, 0);
		FAIL("%s: EQ error %s", what, fi_strerror(err.err));
	}
	if (rc < (ssize_t)sizeof(e.cm))
		FAIL("%s: fi_eq_sread: %s", what, fi_strerror((int)-rc));
	if (event != want)
		FAIL("%s: event %u, expected %u", what, event, want);
	if (event == FI_CONNREQ) {
		TRY(fi_endpoint(p->domain, e.cm.info, &p->ep[1], NULL));
		fi_freeinfo(e.cm.info);
	}
	return T_PASS;
}

static inline int bind_enable(struct pair *p, struct fid_ep *ep)
{
	TRY(fi_ep_bind(ep, &p->eq->fid, 0));
	TRY(fi_ep_bind(ep, &p->cq->fid, FI_TRANSMIT | FI_RECV));
	TRY(fi_enable(ep));
	return T_PASS;
}

static inline int open_pair(struct pair *p, const char *prov, const char *address, uint64_t caps)
{
	memset(p, 0, sizeof(*p));
	struct fi_info *hints = nd_msg_rma_hints(prov);
	if (!hints)
		FAIL("fi_allocinfo");
	hints->caps |= caps;
	int rc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), address, "0", FI_SOURCE, hints,
			    &p->info);
	if (rc) {
		fi_freeinfo(hints);
		FAIL("fi_getinfo(%s, %s): %s", prov, address, fi_strerror(-rc));
	}
	p->mr_mode = p->info->domain_attr->mr_mode;
	TRY(fi_fabric(p->info->fabric_attr, &p->fabric, NULL));
	TRY(fi_domain(p->fabric, p->info, &p->domain, NULL));
	struct fi_eq_attr eq_attr = { .wait_obj = FI_WAIT_UNSPEC, .size = 16 };
	TRY(fi_eq_open(p->fabric, &eq_attr, &p->eq, NULL));
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_DATA, .size = 64 };
	TRY(fi_cq_open(p->domain, &cq_attr, &p->cq, NULL));
	TRY(fi_passive_ep(p->fabric, p->info, &p->pep, NULL));
	TRY(fi_pep_bind(p->pep, &p->eq->fid, 0));
	TRY(fi_listen(p->pep));
	char addr[128];
	size_t alen = sizeof(addr);
	TRY(fi_getname(&p->pep->fid, addr, &alen));
	/* The connecting side's info names the listener as its destination:
	 * the verbs provider resolves the route when it opens the endpoint. */
	char port[8];
	snprintf(port, sizeof(port), "%u", ntohs(((struct sockaddr_in *)addr)->sin_port));
	rc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), address, port, 0, hints, &p->connect_info);
	fi_freeinfo(hints);
	if (rc)
		FAIL("fi_getinfo(%s, %s:%s): %s", prov, address, port, fi_strerror(-rc));
	TRY(fi_endpoint(p->domain, p->connect_info, &p->ep[0], NULL));
	RUN(bind_enable(p, p->ep[0]));
	TRY(fi_connect(p->ep[0], addr, NULL, 0));
	RUN(next_event(p, FI_CONNREQ, "the request"));
	RUN(bind_enable(p, p->ep[1]));
	TRY(fi_accept(p->ep[1], NULL, 0));
	RUN(next_event(p, FI_CONNECTED, "connected (1)"));
	RUN(next_event(p, FI_CONNECTED, "connected (2)"));
	return T_PASS;
}

static inline void close_pair(struct pair *p)
{
	for (int s = 0; s < 2; s++)
		if (p->ep[s])
			fi_close(&p->ep[s]->fid);
	if (p->pep)
		fi_close(&p->pep->fid);
	if (p->cq)
		fi_close(&p->cq->fid);
	if (p->eq)
		fi_close(&p->eq->fid);
	if (p->domain)
		fi_close(&p->domain->fid);
	if (p->fabric)
		fi_close(&p->fabric->fid);
	fi_freeinfo(p->info);
	fi_freeinfo(p->connect_info);
	memset(p, 0, sizeof(*p));
}

/* A send that may find no credit yet: on iWARP the peer's count of posted
 * receives arrives by RDMA write after its fi_recv returns, and until then
 * nd answers -FI_EAGAIN (fi_nd(7), iWARP). Retried within ND_PAIR_WAIT_MS;
 * the count needs no call here to arrive, so nothing is read meanwhile. */
static inline ssize_t send_when_credited(struct fid_ep *ep, const void *buf, size_t len, void *desc, void *context)
{
	double deadline = now_ms() + ND_PAIR_WAIT_MS;
	ssize_t rc;
	while ((rc = fi_send(ep, buf, len, desc, 0, context)) == -FI_EAGAIN && now_ms() < deadline)
		;
	return rc;
}

/* N successful completions on P's CQ within ND_PAIR_WAIT_MS. */
static inline int completions(struct pair *p, int n, const char *what)
{
	double deadline = now_ms() + ND_PAIR_WAIT_MS;
	while (n > 0) {
		struct fi_cq_data_entry e;
		ssize_t rc = fi_cq_read(p->cq, &e, 1);
		if (rc == 1) {
			n--;
			continue;
		}
		if (rc == -FI_EAVAIL) {
			struct fi_cq_err_entry err = { 0 };
			fi_cq_readerr(p->cq, &err, 0);
			FAIL("%s: error completion %s", what, fi_strerror(err.err));
		}
		if (rc != -FI_EAGAIN)
			FAIL("%s: fi_cq_read: %s", what, fi_strerror((int)-rc));
		if (now_ms() > deadline)
			FAIL("%s: %d completions missing after %d ms", what, n, ND_PAIR_WAIT_MS);
	}
	return T_PASS;
}

#endif /* ND_PAIR_H */
