/*
 * nd_info.h: from adapters to fi_info, and the matching of hints.
 *
 * Pure logic over the structures of nd_device.h: no device is touched here,
 * so every rule is unit-tested on the host. nd_getinfo.cpp glues discovery
 * and these rules into the provider's getinfo.
 */
#ifndef ND_INFO_H
#define ND_INFO_H

#include "nd_addr.h"
#include "nd_device.h"
#include "nd_params.h"

#include "nd_api.h"

#include <rdma/fabric.h>

#include <string>

namespace nd {

/* What the provider offers; a hint outside these is not satisfiable. */
constexpr uint64_t kPrimaryCaps = FI_MSG | FI_RMA | FI_ATOMIC | FI_SEND | FI_RECV | FI_READ |
				  FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
constexpr uint64_t kSecondaryCaps = FI_LOCAL_COMM | FI_REMOTE_COMM;
/* Offered to an application that asks for it, and only then: a multi-receive
 * buffer holds back every receive posted behind it (nd_multi_recv.h), which
 * an application that did not ask (ofi_rxm, say) should not meet by surprise;
 * FI_TAGGED frames every message and matches it in software
 * (nd_framing.h), which costs a copy and caps max_msg_size. */
constexpr uint64_t kAskedCaps = FI_MULTI_RECV | FI_TAGGED;
constexpr uint64_t kCaps = kPrimaryCaps | kSecondaryCaps | kAskedCaps;
constexpr uint64_t kDomainCaps = FI_LOCAL_COMM | FI_REMOTE_COMM;
/* The capabilities that let a peer reach registered memory. */
constexpr uint64_t kRmaCaps = FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
/* The capabilities each direction's context reports (fi_endpoint(3)). */
constexpr uint64_t kTxCaps = FI_MSG | FI_RMA | FI_ATOMIC | FI_SEND | FI_READ | FI_WRITE | FI_TAGGED;
constexpr uint64_t kRxCaps = FI_MSG | FI_RMA | FI_ATOMIC | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE |
			     FI_MULTI_RECV | FI_TAGGED;
/* The orders nd can give. An RC queue pair executes requests in order,
 * except that a send or RDMA write that follows an RDMA read may run at the
 * responder before the read has fetched its data (IBTA ordering rules): the
 * orders of kFencedOrder hold only where the later request carries
 * IBV_SEND_FENCE. nd fences (Endpoint::read_fence) when the endpoint's
 * msg_order holds them, and reports them only to an application whose
 * hints ask for them, as the verbs provider reports neither. */
constexpr uint64_t kFencedOrder = FI_ORDER_WAR | FI_ORDER_SAR;
constexpr uint64_t kMsgOrder = FI_ORDER_RAR | FI_ORDER_RAW | FI_ORDER_RAS | FI_ORDER_WAR |
			       FI_ORDER_WAW | FI_ORDER_WAS | FI_ORDER_SAR | FI_ORDER_SAW |
			       FI_ORDER_SAS;
/* Accepted in hints (an RC queue pair completes in order); reported only to
 * applications of API 1.x: 2.x deprecated comp_order. */
constexpr uint64_t kCompOrder = api::kOrderStrict | api::kOrderData;
constexpr uint64_t kTxOpFlags = FI_INJECT | FI_COMPLETION | FI_INJECT_COMPLETE |
				FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_MORE |
				FI_REMOTE_CQ_DATA;
constexpr uint64_t kRxOpFlags = FI_COMPLETION | FI_MULTI_RECV;
/* Registration as verbs requires it: local descriptors, remote virtual
 * addresses, backed memory, keys chosen by the device. */
constexpr int kMrMode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
/* Immediate data is 4 bytes; so are lkeys/rkeys. */
constexpr size_t kCqDataSize = 4;
constexpr size_t kMrKeySize = 4;

/* The addressing a getinfo call asks for, from node/service/flags/hints. */
struct AddressRequest {
	bool has_src = false;
	SockAddr src;		/* IP may be the wildcard; port may be 0 */
	bool has_dest = false;
	SockAddr dest;
	/* AF_UNSPEC, AF_INET or AF_INET6, from hints->addr_format. */
	int family = AF_UNSPEC;
};

/*
 * Works out the addressing of a getinfo call. Returns 0, -FI_ENODATA for a
 * node that does not resolve or an address format the provider does not
 * speak, -FI_EINVAL for an address inconsistent with its own length or with
 * hints->addr_format. Logs why. Resolves names with getaddrinfo; the rest is
 * pure.
 */
int address_request(const char *node, const char *service, uint64_t flags,
		    const fi_info *hints, AddressRequest *out);

/* True when an adapter address can serve the request's source constraint
 * and family (the destination's reachability is the caller's business). */
bool address_matches(const AddressRequest &request, const PortAddress &address) noexcept;

/* The fabric name of an address: its IP network ("10.0.2.0/24"). */
std::string fabric_name(const PortAddress &address);


/*
 * Why an application asking for API `version` cannot be served by this
 * build of the provider, in words for the log; empty when it can. A newer
 * API than the headers nd was built with has meanings nd does not know:
 * libfabric's core offers no such provider to the application (it logs
 * "fi_version ... < requested"); nd refuses the same, should a core pass
 * the call on, and says how to fix it.
 */
std::string api_refusal(uint32_t version);

/*
 * Why `hints` cannot be satisfied by this adapter/address, in words for the
 * log; empty when they can. `version` is the API version of the call.
 */
std::string hints_mismatch(uint32_t version, const fi_info *hints, const Adapter &adapter,
			   const PortAddress &address, const Params &params);

/*
 * Builds one fi_info for an adapter address that satisfies `hints` (check
 * hints_mismatch first). Allocated so that fi_freeinfo releases all of it.
 * Returns nullptr when out of memory.
 */
fi_info *build_info(uint32_t version, const fi_info *hints, const Adapter &adapter,
		    const PortAddress &address, const AddressRequest &request,
		    const Params &params);

/* MR mode check of libfabric's rules for API versions before and after 1.5.
 * Returns the mr_mode to report, or -1 when the application cannot satisfy
 * the provider's registration requirements. Pure. */
int negotiate_mr_mode(uint32_t version, const fi_info *hints) noexcept;

} // namespace nd

#endif /* ND_INFO_H */
