/*
 * nd_fabric.h: the fabric (fid_fabric). One per IP network the application
 * opens; parent of domains, EQs and passive endpoints, which it counts.
 */
#ifndef ND_FABRIC_H
#define ND_FABRIC_H

#include "nd.h"

#include <rdma/fabric.h>

namespace nd {

struct Fabric {
	fid_fabric fabric;			/* first: from_fid<Fabric> */
	uint32_t api_version;
	char name[64];
	ChildCount children;

	int close();
};

/* The provider's fabric entry point (fi_provider::fabric). */
int open_fabric(fi_fabric_attr *attr, fid_fabric **fabric, void *context) noexcept;

} // namespace nd

#endif /* ND_FABRIC_H */
