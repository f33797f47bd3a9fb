/* nd_ft.h: what the project's fabtests programs share: a CHECK that exits
 * on a failed setup call, a monotonic clock, and the default address. C. */
#ifndef ND_FT_H
#define ND_FT_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

/* A setup call that must succeed; otherwise the program stops, saying where. */
#define CHECK(call)                                                                   \
	do {                                                                          \
		int rc_ = (int)(call);                                                \
		if (rc_) {                                                            \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
				fi_strerror(rc_ < 0 ? -rc_ : rc_));                   \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

/* The guest's IPv4 address as util/nd-guest sets it up: what -a defaults to. */
#define ND_GUEST_IP_DEFAULT "10.0.2.15"

/* $ND_GUEST_IP when set, else ND_GUEST_IP_DEFAULT. */
static inline const char *nd_default_address(void)
{
	const char *ip = getenv("ND_GUEST_IP");
	return ip ? ip : ND_GUEST_IP_DEFAULT;
}

static inline double nd_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Hints for an FI_EP_MSG program of PROV that sends and does RMA: the
 * contexts and the registration modes an RDMA adapter's provider may ask
 * for, IPv4 addresses. The caller frees them (fi_freeinfo). */
static inline struct fi_info *nd_msg_rma_hints(const char *prov)
{
	struct fi_info *hints = fi_allocinfo();
	if (!hints)
		return NULL;
	hints->fabric_attr->prov_name = strdup(prov);
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG | FI_RMA;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	return hints;
}

#endif /* ND_FT_H */
