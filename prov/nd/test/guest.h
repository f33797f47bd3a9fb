/*
 * guest.h: helpers for the device tests, which run where a real RDMA device
 * exists (the Soft-RoCE guest, or a host with an RDMA NIC). The device to
 * test is ND_TEST_DEVICE (default rxe0) and its IPv4 address ND_GUEST_IP
 * (default 10.0.2.15), as util/nd-guest sets them up.
 */
#ifndef ND_TEST_GUEST_H
#define ND_TEST_GUEST_H

#include "nd_api.h"
#include "nd_ft.h" /* ND_GUEST_IP_DEFAULT */

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <cstdlib>
#include <cstring>
#include <memory>

namespace nd::test {

namespace api = nd::api;

/* What an application built against these headers asks for. */
constexpr uint32_t kApi = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);

inline const char *device_name()
{
	const char *name = std::getenv("ND_TEST_DEVICE");
	return name && *name ? name : "rxe0";
}

inline const char *guest_ip()
{
	const char *ip = std::getenv("ND_GUEST_IP");
	return ip && *ip ? ip : ND_GUEST_IP_DEFAULT;
}

inline const char *guest_ip6()
{
	const char *ip = std::getenv("ND_GUEST_IP6");
	return ip && *ip ? ip : "fd00::15";
}

struct InfoDeleter {
	void operator()(fi_info *info) const noexcept { fi_freeinfo(info); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

/* Hints that select the nd provider on the test device, MSG endpoints. */
inline InfoPtr nd_hints()
{
	InfoPtr hints(fi_allocinfo());
	hints->fabric_attr->prov_name = strdup("nd");
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG | FI_RMA;
	hints->mode = FI_CONTEXT | FI_RX_CQ_DATA;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				      FI_MR_PROV_KEY;
	hints->domain_attr->name = strdup(device_name());
	return hints;
}

inline int getinfo(const char *node, const char *service, uint64_t flags, const fi_info *hints,
		   InfoPtr *out)
{
	fi_info *info = nullptr;
	int ret = fi_getinfo(kApi, node, service, flags, hints, &info);
	out->reset(info);
	return ret;
}

} // namespace nd::test

#endif /* ND_TEST_GUEST_H */
