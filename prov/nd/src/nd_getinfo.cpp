/*
 * nd_getinfo.cpp: the provider's getinfo: discover adapters, work out the
 * addressing the call asks for, keep the adapter addresses that satisfy the
 * hints (logging why each other one was skipped), order them nearest-first,
 * and build one fi_info per adapter address.
 */
#include "nd.h"
#include "nd_addr.h"
#include "nd_device.h"
#include "nd_getinfo.h"
#include "nd_info.h"
#include "nd_params.h"
#include "nd_pep.h"

#include <cstring>

namespace nd {

namespace {

int getinfo_impl(uint32_t version, const char *node, const char *service, uint64_t flags,
		 const fi_info *hints, fi_info **info)
{
	if (!info) {
		ND_WARN(FI_LOG_CORE, "fi_getinfo: info must not be NULL\n");
		return -FI_EINVAL;
	}
	*info = nullptr;
	if (std::string why = api_refusal(version); !why.empty()) {
		ND_WARN(FI_LOG_CORE, "fi_getinfo: %s\n", why.c_str());
		return -FI_ENODATA;
	}
	const Params params = read_params();

	AddressRequest request;
	int ret = address_request(node, service, flags, hints, &request);
	if (ret)
		return ret;

	/* fi_getinfo(3): a passive endpoint as hints->handle lends its
	 * address, port included, to the endpoint the info will open. */
	const fid *lender = nullptr;
	if (hints && hints->handle) {
		SockAddr lent;
		ret = pep_address(hints->handle, &lent);
		if (ret == 0) {
			/* A source asked for as well must agree: the same IP (or
			 * any), the same port (or any). */
			if (request.has_src &&
			    ((!request.src.is_any() && !request.src.same_ip(lent)) ||
			     (request.src.port() && request.src.port() != lent.port()))) {
				ND_INFO(FI_LOG_CORE, "hints->handle is bound to %s, not the source %s asked for\n",
					lent.to_string().c_str(), request.src.to_string().c_str());
				return -FI_ENODATA;
			}
			request.has_src = true;
			request.src = lent;
			lender = hints->handle;
		} else if (ret == -FI_EADDRNOTAVAIL) {
			lender = hints->handle;
		}
	}

	std::vector<Adapter> adapters = recent_adapters(params);
	if (adapters.empty()) {
		ND_INFO(FI_LOG_CORE, "no active RDMA adapter port with an IP address\n");
		return -FI_ENODATA;
	}

	/* A destination without a source: the source is the address the
	 * routing table picks, as a connect from it would. */
	if (request.has_dest && !request.has_src) {
		SockAddr src;
		ret = route_source(request.dest, &src);
		if (ret) {
			ND_INFO(FI_LOG_CORE, "no route to %s: %s\n", request.dest.to_string().c_str(),
				strerror_fi(ret));
			return -FI_ENODATA;
		}
		request.has_src = true;
		request.src = src;
	}

	if (params.topology)
		order_by_locality(adapters);

	fi_info *head = nullptr, *tail = nullptr;
	for (const Adapter &adapter : adapters) {
		for (const PortAddress &address : adapter.addresses) {
			if (!address_matches(request, address)) {
				ND_INFO(FI_LOG_CORE, "%s %s: not the address asked for; skipped\n",
					adapter.name.c_str(), address.addr.ip_string().c_str());
				continue;
			}
			std::string why = hints_mismatch(version, hints, adapter, address, params);
			if (!why.empty()) {
				ND_INFO(FI_LOG_CORE, "%s %s: %s; skipped\n", adapter.name.c_str(),
					address.addr.ip_string().c_str(), why.c_str());
				continue;
			}
			fi_info *one;
			try {
				one = build_info(version, hints, adapter, address, request, params);
			} catch (...) {
				fi_freeinfo(head);
				throw;
			}
			one->handle = const_cast<fid *>(lender);
			if (tail)
				tail->next = one;
			else
				head = one;
			tail = one;
		}
	}
	if (!head)
		return -FI_ENODATA;
	*info = head;
	return 0;
}

} // namespace

int getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
	    const fi_info *hints, fi_info **info) noexcept
{
	return guarded("fi_getinfo",
		       [&] { return getinfo_impl(version, node, service, flags, hints, info); });
}

} // namespace nd
