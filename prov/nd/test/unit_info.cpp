/* unit_info.cpp: fi_info construction and hint matching, on a fixture adapter. */
#include <criterion/criterion.h>

#include "fixtures.h"
#include "nd.h"
#include "nd_info.h"

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext_nd.h>
#include <infiniband/verbs.h>

#include <cstring>
#include <memory>
#include <string>

using namespace nd;
using namespace nd::test;

namespace {

constexpr uint32_t kVersion = FI_VERSION(1, 17);

using InfoPtr = UniqueInfo;

/* Hints as a typical application fills them for a verbs-class provider. */
InfoPtr app_hints()
{
	InfoPtr hints(fi_allocinfo());
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG | FI_RMA;
	hints->mode = FI_CONTEXT | FI_RX_CQ_DATA;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				      FI_MR_PROV_KEY;
	return hints;
}

std::string mismatch(const fi_info *hints, uint32_t version = kVersion)
{
	Adapter a = rxe_adapter();
	return hints_mismatch(version, hints, a, a.addresses[0], Params{});
}

InfoPtr build(const fi_info *hints, const AddressRequest &request = {}, size_t address = 0)
{
	Adapter a = rxe_adapter();
	return InfoPtr(build_info(kVersion, hints, a, a.addresses[address], request, Params{}));
}

/* The same adapter as soft-iWARP (siw0) shows it. */
Adapter siw_adapter()
{
	Adapter a = rxe_adapter();
	a.iwarp = true;
	a.name = "siw0";
	a.limits.max_sge_rd = 1;
	a.limits.atomics = false; /* discovery: never on iWARP */
	return a;
}

} // namespace

Test(hints, none_and_typical_hints_match)
{
	cr_assert(mismatch(nullptr).empty());
	InfoPtr hints = app_hints();
	cr_assert(mismatch(hints.get()).empty());
}

Test(hints, endpoint_types_other_than_msg_do_not_match)
{
	InfoPtr hints = app_hints();
	hints->ep_attr->type = FI_EP_RDM;
	cr_assert(mismatch(hints.get()).find("ep_attr->type") != std::string::npos);
	hints->ep_attr->type = FI_EP_DGRAM;
	cr_assert_not(mismatch(hints.get()).empty());
	hints->ep_attr->type = FI_EP_UNSPEC;
	cr_assert(mismatch(hints.get()).empty());
}

Test(hints, capabilities_beyond_the_provider_do_not_match)
{
	InfoPtr hints = app_hints();
	hints->caps = FI_COLLECTIVE;
	cr_assert(mismatch(hints.get()).find("caps") != std::string::npos);
	hints->caps = FI_MSG | FI_SEND | FI_RECV | FI_READ | FI_REMOTE_WRITE | FI_LOCAL_COMM;
	cr_assert(mismatch(hints.get()).empty());
}

/* The adapter's atomics (nd_atomic.h): where it has them, by default and to
 * hints that ask; never on iWARP, nor on a device whose atomic_cap is none. */
Test(info, atomics_where_the_device_has_them)
{
	InfoPtr hints = app_hints();
	hints->caps = FI_MSG | FI_ATOMIC;
	cr_assert(mismatch(hints.get()).empty());
	InfoPtr info = build(hints.get());
	cr_assert_eq(info->caps & (FI_ATOMIC | FI_RMA), FI_ATOMIC);
	cr_assert(info->tx_attr->caps & FI_ATOMIC);
	cr_assert(info->rx_attr->caps & FI_ATOMIC);
	info = build(nullptr);
	cr_assert(info->caps & FI_ATOMIC, "offered by default");
	hints->caps = FI_MSG | FI_RMA;
	info = build(hints.get());
	cr_assert_not(info->caps & FI_ATOMIC, "not to hints that ask for other primary caps only");

	Adapter siw = siw_adapter();
	hints->caps = FI_MSG | FI_ATOMIC;
	const std::string why = hints_mismatch(kVersion, hints.get(), siw, siw.addresses[0], Params{});
	cr_assert(why.find("iWARP has no atomics") != std::string::npos, "%s", why.c_str());
	info.reset(build_info(kVersion, nullptr, siw, siw.addresses[0], {}, Params{}));
	cr_assert_not(info->caps & FI_ATOMIC);
	cr_assert_not(info->tx_attr->caps & FI_ATOMIC);

	Adapter none = rxe_adapter();
	none.limits.atomics = false;
	cr_assert_not(hints_mismatch(kVersion, hints.get(), none, none.addresses[0], Params{}).empty());

	/* Atomics reach registered memory as RMA does: not without keys and
	 * virtual addresses. */
	hints->caps = FI_MSG | FI_ATOMIC;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED;
	cr_assert_not(mismatch(hints.get()).empty());
}

Test(hints, names_must_match_the_device_and_network)
{
	InfoPtr hints = app_hints();
	hints->fabric_attr->name = strdup("192.168.0.0/16");
	cr_assert(mismatch(hints.get()).find("fabric name") != std::string::npos);
	free(hints->fabric_attr->name);
	hints->fabric_attr->name = strdup("10.0.2.0/24");
	cr_assert(mismatch(hints.get()).empty());
	hints->domain_attr->name = strdup("mlx5_0");
	cr_assert(mismatch(hints.get()).find("domain name") != std::string::npos);
	free(hints->domain_attr->name);
	hints->domain_attr->name = strdup("rxe0");
	cr_assert(mismatch(hints.get()).empty());
}

Test(hints, sizes_above_the_device_do_not_match)
{
	Adapter a = rxe_adapter();
	InfoPtr hints = app_hints();
	hints->tx_attr->size = a.limits.max_qp_wr + 1;
	cr_assert(mismatch(hints.get()).find("tx_attr->size") != std::string::npos);
	hints->tx_attr->size = a.limits.max_qp_wr;
	cr_assert(mismatch(hints.get()).empty());
	hints->tx_attr->inject_size = a.limits.max_inline + 1;
	cr_assert(mismatch(hints.get()).find("inject_size") != std::string::npos);
	hints->tx_attr->inject_size = a.limits.max_inline;
	hints->rx_attr->iov_limit = a.limits.max_sge + 1;
	cr_assert(mismatch(hints.get()).find("rx_attr->iov_limit") != std::string::npos);
	hints->rx_attr->iov_limit = 1;
	hints->ep_attr->max_msg_size = (size_t)a.max_msg_sz + 1;
	cr_assert(mismatch(hints.get()).find("max_msg_size") != std::string::npos);
	hints->ep_attr->max_msg_size = 0;
	hints->tx_attr->rma_iov_limit = 2;
	cr_assert_not(mismatch(hints.get()).empty());
}

Test(hints, progress_and_threading)
{
	InfoPtr hints = app_hints();
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->domain_attr->data_progress = FI_PROGRESS_AUTO;
	hints->domain_attr->control_progress = FI_PROGRESS_MANUAL;
	cr_assert(mismatch(hints.get()).empty());
	hints->domain_attr->control_progress = FI_PROGRESS_AUTO;
	cr_assert(mismatch(hints.get()).find("control_progress") != std::string::npos);
	hints->domain_attr->control_progress = FI_PROGRESS_UNSPEC;
	hints->domain_attr->threading = static_cast<fi_threading>(7); /* no such model */
	cr_assert(mismatch(hints.get()).find("threading") != std::string::npos);
}

/* A C application may store any int in an enum field; nd reads it as the
 * int (api::enum_value) and refuses it, where loading it as the C++ enum
 * was undefined (found by fuzz_getinfo; the UBSan build checks it). */
Test(hints, enum_fields_outside_every_enumerator_are_refused)
{
	InfoPtr hints = app_hints();
	const int junk = 0x11500000;
	std::memcpy(&hints->ep_attr->type, &junk, sizeof(junk));
	cr_assert(mismatch(hints.get()).find("ep_attr->type") != std::string::npos);
	hints->ep_attr->type = FI_EP_MSG;
	std::memcpy(&hints->domain_attr->threading, &junk, sizeof(junk));
	cr_assert(mismatch(hints.get()).find("threading") != std::string::npos);
	hints->domain_attr->threading = FI_THREAD_UNSPEC;
	std::memcpy(&hints->domain_attr->data_progress, &junk, sizeof(junk));
	cr_assert(mismatch(hints.get()).find("data_progress") != std::string::npos);
	hints->domain_attr->data_progress = FI_PROGRESS_UNSPEC;
	std::memcpy(&hints->domain_attr->resource_mgmt, &junk, sizeof(junk));
	cr_assert(mismatch(hints.get()).empty(), "resource management is a preference");
	InfoPtr info = build(hints.get());
	cr_assert_eq(info->domain_attr->resource_mgmt, FI_RM_ENABLED);
}

/* FI_ORDER_WAR and _SAR hold only with a fence after reads, which nd adds
 * when asked: reported to hints that ask, never by default (as verbs). */
Test(info, write_and_send_after_read_only_when_asked)
{
	InfoPtr info = build(app_hints().get());
	const uint64_t fenced = FI_ORDER_WAR | FI_ORDER_SAR;
	cr_assert_eq(info->tx_attr->msg_order & fenced, 0u);
	cr_assert_eq(info->rx_attr->msg_order & fenced, 0u);
	cr_assert(info->tx_attr->msg_order & FI_ORDER_SAS);
	cr_assert(info->tx_attr->msg_order & FI_ORDER_RAW);
	InfoPtr hints = app_hints();
	hints->tx_attr->msg_order = FI_ORDER_WAR;
	info = build(hints.get());
	cr_assert_eq(info->tx_attr->msg_order & fenced, FI_ORDER_WAR);
	hints->tx_attr->msg_order = 0;
	hints->rx_attr->msg_order = FI_ORDER_SAR | FI_ORDER_SAS;
	info = build(hints.get());
	cr_assert_eq(info->tx_attr->msg_order & fenced, FI_ORDER_SAR);
	cr_assert_eq(info->rx_attr->msg_order & fenced, FI_ORDER_SAR);
}

Test(mr_mode, modern_api_needs_every_required_bit)
{
	InfoPtr hints = app_hints();
	cr_assert_eq(negotiate_mr_mode(kVersion, hints.get()), kMrMode);
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	cr_assert_eq(negotiate_mr_mode(kVersion, hints.get()), -1, "FI_MR_LOCAL is required");
	hints->mode |= api::kModeLocalMr;
	const int by_mode_bit = FI_VERSION_LT(kVersion, FI_VERSION(2, 0)) ? kMrMode & ~FI_MR_LOCAL : -1;
	cr_assert_eq(negotiate_mr_mode(kVersion, hints.get()), by_mode_bit,
		     "before 2.0 the old FI_LOCAL_MR mode bit stands for FI_MR_LOCAL, and the "
		     "reported mr_mode holds only bits the application offered");
	cr_assert_eq(negotiate_mr_mode(FI_VERSION(2, 0), hints.get()), -1,
		     "libfabric 2.0 removed the FI_LOCAL_MR mode bit");
	hints->mode &= ~api::kModeLocalMr;
	hints->domain_attr->mr_mode = 0;
	cr_assert_eq(negotiate_mr_mode(kVersion, hints.get()), -1);
	cr_assert_not(mismatch(hints.get()).empty());
	hints->domain_attr->mr_mode = ~(api::kMrBasic | api::kMrScalable);
	cr_assert_eq(negotiate_mr_mode(kVersion, hints.get()), kMrMode);
}

Test(mr_mode, basic_and_scalable)
{
	InfoPtr hints = app_hints();
	hints->domain_attr->mr_mode = api::kMrBasic | FI_MR_LOCAL;
	cr_assert_eq(negotiate_mr_mode(kVersion, hints.get()), api::kMrBasic | FI_MR_LOCAL);
	hints->domain_attr->mr_mode = api::kMrBasic;
	cr_assert_eq(negotiate_mr_mode(kVersion, hints.get()), -1);
	hints->domain_attr->mr_mode = api::kMrScalable | FI_MR_LOCAL;
	cr_assert_eq(negotiate_mr_mode(kVersion, hints.get()), -1);
}

Test(mr_mode, api_before_1_5)
{
	InfoPtr hints = app_hints();
	hints->domain_attr->mr_mode = api::kMrBasic;
	hints->mode = api::kModeLocalMr;
	cr_assert_eq(negotiate_mr_mode(FI_VERSION(1, 4), hints.get()), api::kMrBasic);
	cr_assert(mismatch(hints.get(), FI_VERSION(1, 4)).empty());
	hints->mode = 0;
	cr_assert_eq(negotiate_mr_mode(FI_VERSION(1, 4), hints.get()), -1);
	cr_assert_not(mismatch(hints.get(), FI_VERSION(1, 4)).empty());
	cr_assert_eq(negotiate_mr_mode(FI_VERSION(1, 4), nullptr), api::kMrBasic);
}

Test(address_request, node_and_service)
{
	AddressRequest r;
	cr_assert_eq(address_request(nullptr, nullptr, 0, nullptr, &r), 0);
	cr_assert_not(r.has_src);
	cr_assert_not(r.has_dest);
	cr_assert_eq(r.family, AF_UNSPEC);

	cr_assert_eq(address_request("10.0.2.15", "7471", 0, nullptr, &r), 0);
	cr_assert(r.has_dest && !r.has_src);
	cr_assert(r.dest == ipv4("10.0.2.15", 7471));
	cr_assert_eq(r.family, AF_INET);

	cr_assert_eq(address_request("10.0.2.15", "7471", FI_SOURCE, nullptr, &r), 0);
	cr_assert(r.has_src && !r.has_dest);
	cr_assert(r.src == ipv4("10.0.2.15", 7471));

	cr_assert_eq(address_request(nullptr, "7471", 0, nullptr, &r), 0);
	cr_assert(r.has_src && r.src.is_any());
	cr_assert_eq(r.src.port(), 7471);
}

Test(address_request, formats_and_hint_addresses)
{
	InfoPtr hints(fi_allocinfo());
	AddressRequest r;
	hints->addr_format = FI_ADDR_STR;
	cr_assert_eq(address_request(nullptr, nullptr, 0, hints.get(), &r), -FI_ENODATA);
	hints->addr_format = FI_SOCKADDR_IN6;
	cr_assert_eq(address_request(nullptr, nullptr, 0, hints.get(), &r), 0);
	cr_assert_eq(r.family, AF_INET6);
	cr_assert_eq(address_request("10.0.2.15", nullptr, 0, hints.get(), &r), -FI_ENODATA,
		     "an IPv4 node cannot satisfy FI_SOCKADDR_IN6");

	SockAddr src = ipv4("10.0.2.15", 1);
	hints->addr_format = FI_SOCKADDR_IN;
	hints->src_addr = malloc(sizeof(sockaddr_in));
	memcpy(hints->src_addr, &src.in, sizeof(sockaddr_in));
	hints->src_addrlen = sizeof(sockaddr_in) - 1;
	cr_assert_eq(address_request(nullptr, nullptr, 0, hints.get(), &r), -FI_EINVAL);
	hints->src_addrlen = sizeof(sockaddr_in);
	cr_assert_eq(address_request(nullptr, nullptr, 0, hints.get(), &r), 0);
	cr_assert(r.has_src && r.src == src);
	hints->addr_format = FI_SOCKADDR_IN6;
	cr_assert_eq(address_request(nullptr, nullptr, 0, hints.get(), &r), -FI_EINVAL,
		     "an IPv4 src_addr contradicts FI_SOCKADDR_IN6");
}

Test(address_request, matching_addresses)
{
	Adapter a = rxe_adapter();
	AddressRequest r;
	cr_assert(address_matches(r, a.addresses[0]));
	cr_assert(address_matches(r, a.addresses[1]));
	r.family = AF_INET6;
	cr_assert_not(address_matches(r, a.addresses[0]));
	cr_assert(address_matches(r, a.addresses[1]));
	r.family = AF_UNSPEC;
	r.has_src = true;
	r.src = ipv4("10.0.2.99");
	cr_assert_not(address_matches(r, a.addresses[0]));
	r.src = ipv4("10.0.2.15", 9);
	cr_assert(address_matches(r, a.addresses[0]));
	r.src = ipv4("0.0.0.0", 9);
	cr_assert(address_matches(r, a.addresses[0]));
}

Test(build_info, attributes_come_from_the_adapter)
{
	Adapter a = rxe_adapter();
	InfoPtr info = build(nullptr);
	cr_assert_not_null(info.get());
	cr_assert_eq(info->ep_attr->type, FI_EP_MSG);
	cr_assert_eq(info->ep_attr->protocol, (uint32_t)FI_PROTO_RDMA_CM_IB_RC);
	cr_assert_eq(info->ep_attr->max_msg_size, a.max_msg_sz);
	cr_assert_eq(info->tx_attr->iov_limit, 4u, "FI_ND_IOV_LIMIT default");
	cr_assert_eq(info->rx_attr->iov_limit, 4u);
	cr_assert_eq(info->tx_attr->inject_size, a.limits.max_inline);
	cr_assert_eq(info->tx_attr->size, 384u, "FI_ND_TX_SIZE default");
	cr_assert_eq(info->domain_attr->mr_cnt, a.limits.max_mr);
	cr_assert_eq(info->domain_attr->cq_cnt, a.limits.max_cq);
	cr_assert_eq(info->domain_attr->ep_cnt, a.limits.max_qp);
	cr_assert_eq(info->domain_attr->mr_mode, kMrMode);
	cr_assert_eq(info->domain_attr->max_err_data, 147u, "REJ 148 bytes minus framing");
	cr_assert_eq(info->domain_attr->cq_data_size, 4u);
	cr_assert_eq(info->domain_attr->threading, FI_THREAD_SAFE);
	cr_assert_eq(info->domain_attr->control_progress, FI_PROGRESS_MANUAL);
	cr_assert_str_eq(info->domain_attr->name, "rxe0");
	cr_assert_str_eq(info->fabric_attr->name, "10.0.2.0/24");
	cr_assert_null(info->fabric_attr->prov_name, "libfabric fills in the provider name");
	cr_assert_eq(info->fabric_attr->api_version, ND_API_VERSION,
		     "the API of the headers the provider was built with");
	cr_assert_eq(info->addr_format, (uint32_t)FI_SOCKADDR_IN);
	cr_assert_eq(info->src_addrlen, sizeof(sockaddr_in));
	cr_assert_null(info->dest_addr);
	cr_assert_eq(info->mode, (uint64_t)FI_RX_CQ_DATA);
	cr_assert_eq(info->caps, kCaps & ~kAskedCaps, "FI_MULTI_RECV only when asked");
}

Test(build_info, queue_depth_defaults_are_capped_by_the_device)
{
	Adapter a = rxe_adapter();
	a.limits.max_qp_wr = 100;
	Params p;
	InfoPtr info(build_info(kVersion, nullptr, a, a.addresses[0], {}, p));
	cr_assert_eq(info->tx_attr->size, 100u);
	cr_assert_eq(info->rx_attr->size, 100u);
}

Test(build_info, comp_order_follows_the_api_the_application_asked_for)
{
	Adapter a = rxe_adapter();
	Params p;
	InfoPtr v1(build_info(FI_VERSION(1, 17), nullptr, a, a.addresses[0], {}, p));
	cr_assert_eq(v1->tx_attr->comp_order, kCompOrder, "1.x: RC completes in order");
	cr_assert_eq(v1->rx_attr->comp_order, kCompOrder);
	InfoPtr v2(build_info(FI_VERSION(2, 0), nullptr, a, a.addresses[0], {}, p));
	cr_assert_eq(v2->tx_attr->comp_order, 0u, "2.x: deprecated, set to 0 (fi_endpoint(3))");
	cr_assert_eq(v2->rx_attr->comp_order, 0u);

	/* An application of either generation that still asks for strict
	 * completion order is served: the queue pair gives it. */
	InfoPtr hints = app_hints();
	hints->tx_attr->comp_order = api::kOrderStrict;
	hints->rx_attr->comp_order = api::kOrderStrict | api::kOrderData;
	for (uint32_t version : {FI_VERSION(1, 17), FI_VERSION(2, 0)})
		cr_assert_eq(hints_mismatch(version, hints.get(), a, a.addresses[0], p), "");
	hints->tx_attr->comp_order = 1ULL << 40;
	cr_assert_neq(hints_mismatch(FI_VERSION(2, 0), hints.get(), a, a.addresses[0], p), "",
		      "an order bit nobody defined is refused");
}

/* fabtests multi_recv: FI_MULTI_RECV is offered to receives, and reported
 * only to an application that asks for it (in caps or as a default flag). */
Test(hints, multi_recv_is_offered_when_asked)
{
	Adapter a = rxe_adapter();
	InfoPtr hints = app_hints();
	hints->rx_attr->op_flags = FI_MULTI_RECV;
	cr_assert_eq(hints_mismatch(kVersion, hints.get(), a, a.addresses[0], Params{}), "");
	cr_assert(build(hints.get())->caps & FI_MULTI_RECV);
	cr_assert(build(hints.get())->rx_attr->caps & FI_MULTI_RECV);
	hints->rx_attr->op_flags = 0;
	hints->tx_attr->op_flags = FI_MULTI_RECV;
	std::string why = hints_mismatch(kVersion, hints.get(), a, a.addresses[0], Params{});
	cr_assert(why.find("tx_attr->op_flags") != std::string::npos, "%s", why.c_str());
	hints->tx_attr->op_flags = FI_COMPLETION;
	cr_assert_not(build(hints.get())->caps & FI_MULTI_RECV, "not asked: not reported");
	cr_assert_not(build(nullptr)->caps & FI_MULTI_RECV);
	hints->caps = FI_MSG | FI_MULTI_RECV;
	InfoPtr info = build(hints.get());
	cr_assert(info->caps & FI_MULTI_RECV);
	cr_assert(info->rx_attr->caps & FI_MULTI_RECV);
	cr_assert_not(info->tx_attr->caps & FI_MULTI_RECV);
}

Test(hints, tagged_is_offered_when_asked_with_its_limits)
{
	Adapter a = rxe_adapter();
	InfoPtr hints = app_hints();
	cr_assert_not(build(hints.get())->caps & FI_TAGGED, "not asked: not reported");
	cr_assert_not(build(nullptr)->caps & FI_TAGGED);
	hints->caps = FI_TAGGED;
	cr_assert_eq(mismatch(hints.get()), "");
	InfoPtr info = build(hints.get());
	cr_assert(info->caps & FI_TAGGED);
	cr_assert(info->tx_attr->caps & FI_TAGGED);
	cr_assert(info->rx_attr->caps & FI_TAGGED);
	/* A framed message is at most a receive buffer; its header rides inline. */
	cr_assert_eq(info->ep_attr->max_msg_size, Params{}.tagged_msg_size);
	cr_assert_eq(info->tx_attr->inject_size, a.limits.max_inline - kFrameHeaderSize);
	cr_assert_lt(info->tx_attr->iov_limit, a.limits.max_sge);

	hints->caps = FI_TAGGED | FI_MULTI_RECV;
	cr_assert(mismatch(hints.get()).find("FI_MULTI_RECV") != std::string::npos);
	hints->caps = FI_TAGGED;
	hints->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
	cr_assert(mismatch(hints.get()).find("shared receive") != std::string::npos);
	hints->ep_attr->rx_ctx_cnt = 0;
	hints->ep_attr->max_msg_size = Params{}.tagged_msg_size + 1;
	cr_assert(mismatch(hints.get()).find("FI_ND_TAGGED_MSG_SIZE") != std::string::npos);
	hints->ep_attr->max_msg_size = 0;
	hints->tx_attr->inject_size = a.limits.max_inline;
	cr_assert(mismatch(hints.get()).find("inject_size") != std::string::npos);
}

Test(build_info, api_version_is_the_headers_one)
{
	cr_assert_eq(ND_API_VERSION, FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION));
	cr_assert(!api::is_v2(FI_VERSION(1, 17)));
	cr_assert(!api::is_v2(FI_VERSION(1, 99)));
	cr_assert(api::is_v2(FI_VERSION(2, 0)));
	cr_assert(api::is_v2(FI_VERSION(2, 3)));
}

Test(build_info, an_api_newer_than_the_build_is_refused_with_the_reason)
{
	cr_assert_eq(api_refusal(ND_API_VERSION), "");
	cr_assert_eq(api_refusal(FI_VERSION(1, 0)), "", "old applications keep old meanings");
	cr_assert_eq(api_refusal(FI_VERSION(1, 5)), "");
	uint32_t newer = FI_VERSION(FI_MAJOR(ND_API_VERSION), FI_MINOR(ND_API_VERSION) + 1);
	std::string why = api_refusal(newer);
	cr_assert(why.find("rebuild") != std::string::npos, "%s", why.c_str());
	cr_assert_neq(api_refusal(FI_VERSION(FI_MAJOR(ND_API_VERSION) + 1, 0)), "");
}

Test(build_info, hints_shape_the_result)
{
	InfoPtr hints = app_hints();
	hints->mode = 0;
	hints->caps = FI_MSG;
	hints->tx_attr->size = 64;
	hints->tx_attr->iov_limit = 32;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	InfoPtr info = build(hints.get());
	cr_assert_eq(info->tx_attr->iov_limit, 32u, "up to max_sge when asked");
	cr_assert_eq(info->rx_attr->iov_limit, 4u);
	cr_assert_eq(info->mode, 0u);
	cr_assert_eq(info->domain_attr->cq_data_size, 0u,
		     "remote CQ data needs FI_RX_CQ_DATA: not offered without it");
	cr_assert_eq(info->caps, FI_MSG | kSecondaryCaps);
	cr_assert_eq(info->tx_attr->size, 64u);
	cr_assert_eq(info->domain_attr->threading, FI_THREAD_DOMAIN);
}

Test(build_info, addresses_of_the_request)
{
	AddressRequest r;
	r.has_src = true;
	r.src = ipv4("0.0.0.0", 7471);
	r.has_dest = true;
	r.dest = ipv4("10.0.2.20", 9);
	InfoPtr info = build(nullptr, r);
	SockAddr src, dest;
	cr_assert_eq(sockaddr_copy(info->src_addr, info->src_addrlen, &src), 0);
	cr_assert(src == ipv4("10.0.2.15", 7471), "the adapter's IP with the asked-for port");
	cr_assert_eq(sockaddr_copy(info->dest_addr, info->dest_addrlen, &dest), 0);
	cr_assert(dest == ipv4("10.0.2.20", 9));

	InfoPtr six = build(nullptr, {}, 1);
	cr_assert_eq(six->addr_format, (uint32_t)FI_SOCKADDR_IN6);
	cr_assert_str_eq(six->fabric_attr->name, "fd00::/64");
}

Test(build_info, nic_carries_device_and_nd_attributes)
{
	Adapter a = rxe_adapter();
	InfoPtr info = build(nullptr);
	fid_nic *nic = info->nic;
	cr_assert_not_null(nic);
	cr_assert_eq(nic->fid.fclass, (size_t)FI_CLASS_NIC);
	cr_assert_str_eq(nic->device_attr->name, "rxe0");
	cr_assert_str_eq(nic->device_attr->driver, "soft-roce");
	cr_assert_str_eq(nic->device_attr->firmware, "0.0.0");
	cr_assert_str_eq(nic->link_attr->address, "10.0.2.15");
	cr_assert_str_eq(nic->link_attr->network_type, "Ethernet");
	cr_assert_eq(nic->link_attr->mtu, 1024u);
	cr_assert_eq(nic->link_attr->state, FI_LINK_UP);
	cr_assert_eq(nic->bus_attr->bus_type, FI_BUS_UNKNOWN);
	auto *nd = static_cast<const fi_nd_nic_attr *>(nic->prov_attr);
	cr_assert_eq(nd->version, (uint32_t)FI_ND_NIC_ATTR_VERSION);
	cr_assert_eq(nd->max_inbound_read_limit, a.limits.max_qp_rd_atom);
	cr_assert_eq(nd->max_outbound_read_limit, a.limits.max_qp_init_rd_atom);
	cr_assert_eq(nd->max_connect_data, 55u);
	cr_assert_eq(nd->max_accept_data, 195u);
	cr_assert_eq(nd->max_reject_data, 147u);
	cr_assert_str_eq(nd->netdev, "eth0");
}

Test(build_info, dupinfo_and_tostr_handle_the_nic)
{
	InfoPtr info = build(nullptr);
	InfoPtr copy(fi_dupinfo(info.get()));
	cr_assert_not_null(copy.get());
	cr_assert_not_null(copy->nic);
	cr_assert_neq(copy->nic, info->nic, "FI_DUP makes a copy");
	cr_assert_str_eq(copy->nic->device_attr->name, "rxe0");
	cr_assert_neq(copy->nic->device_attr->name, info->nic->device_attr->name,
		      "the copy owns its strings");
	auto *nd = static_cast<const fi_nd_nic_attr *>(copy->nic->prov_attr);
	cr_assert_eq(nd->max_reject_data, 147u);
	info.reset();
	cr_assert_str_eq(copy->nic->device_attr->name, "rxe0", "the copy outlives the original");
	const char *text = fi_tostr(copy.get(), FI_TYPE_INFO);
	cr_assert(strstr(text, "fi_nd_nic_attr") != nullptr);
	cr_assert(strstr(text, "max_inbound_read_limit: 128") != nullptr);
	cr_assert(strstr(text, "name: rxe0") != nullptr);
}

Test(build_info, pci_bus_attributes)
{
	Adapter a = rxe_adapter();
	cr_assert(parse_pci_address("0000:3b:00.1", &a.pci));
	InfoPtr info(build_info(kVersion, nullptr, a, a.addresses[0], {}, Params{}));
	cr_assert_eq(info->nic->bus_attr->bus_type, FI_BUS_PCI);
	cr_assert_eq(info->nic->bus_attr->attr.pci.bus_id, 0x3b);
	cr_assert_eq(info->nic->bus_attr->attr.pci.function_id, 1);
}

Test(device, pci_address_parsing_rejects_other_names)
{
	PciAddress pci;
	cr_assert(parse_pci_address("0001:02:1f.7", &pci));
	cr_assert_eq(pci.domain, 1);
	cr_assert_eq(pci.device, 0x1f);
	cr_assert_not(parse_pci_address("virtio0", &pci));
	cr_assert_not(parse_pci_address("0000:00:02", &pci));
	cr_assert_not(parse_pci_address("0000:00:02.0x", &pci));
	cr_assert_not(parse_pci_address("pci0000:00", &pci));
}

Test(device, speed_and_mtu_codes)
{
	cr_assert_eq(port_speed_bps(4, 2), 40000000000ull, "4x QDR");
	cr_assert_eq(port_speed_bps(32, 2), 103124000000ull, "4x EDR");
	cr_assert_eq(port_speed_bps(3, 2), 0u, "unknown speed code");
	cr_assert_eq(port_speed_bps(1, 3), 0u, "unknown width code");
	cr_assert_eq(mtu_bytes(IBV_MTU_1024), 1024u);
	cr_assert_eq(mtu_bytes(IBV_MTU_4096), 4096u);
	cr_assert_eq(mtu_bytes(99), 0u);
}

Test(device, cm_data_limits_per_transport)
{
	Adapter a = rxe_adapter();
	CmDataLimits t = transport_cm_limits(a);
	cr_assert_eq(t.connect, 56u);
	cr_assert_eq(t.accept, 196u);
	cr_assert_eq(t.reject, 148u);
	a.iwarp = true;
	/* MPA in Linux carries 256 bytes, 8 of them MPA v2's IRD/ORD; 1 is
	 * nd's length byte, and connect and accept carry nd's 19-byte
	 * receive-credit, data-slot and read-limit offer. */
	CmDataLimits u = user_cm_limits(a);
	cr_assert_eq(u.connect, 228u);
	cr_assert_eq(u.accept, 228u);
	cr_assert_eq(u.reject, 247u);
}

/* What iWARP cannot carry is not reported there, and hints that ask for it
 * do not match, with the reason. */
Test(build_info, iwarp_carries_cq_data_and_keeps_rm_by_credits)
{
	Adapter a = siw_adapter();
	InfoPtr info(build_info(kVersion, nullptr, a, a.addresses[0], {}, Params{}));
	/* Remote CQ data in the receive credits' slots (nd_credits.h). */
	cr_assert_eq(info->domain_attr->cq_data_size, 4u);
	/* Receive credits (nd_credits.h) stand in for RNR retries. */
	cr_assert_eq(info->domain_attr->resource_mgmt, FI_RM_ENABLED);
	cr_assert_eq(info->ep_attr->protocol, static_cast<uint32_t>(FI_PROTO_IWARP));
	cr_assert_eq(info->domain_attr->max_err_data, 247u);

	InfoPtr hints = app_hints();
	hints->domain_attr->cq_data_size = 8;
	std::string why = hints_mismatch(kVersion, hints.get(), a, a.addresses[0], Params{});
	cr_assert(why.find("cq_data_size 8 > 4") != std::string::npos, "%s", why.c_str());
	hints->domain_attr->cq_data_size = 4;
	cr_assert(hints_mismatch(kVersion, hints.get(), a, a.addresses[0], Params{}).empty());
	/* Without credits, no slots: FI_RM_DISABLED asks for none. */
	hints->domain_attr->resource_mgmt = FI_RM_DISABLED;
	why = hints_mismatch(kVersion, hints.get(), a, a.addresses[0], Params{});
	cr_assert(why.find("receive credits") != std::string::npos, "%s", why.c_str());
	hints->domain_attr->cq_data_size = 0;
	cr_assert_eq(InfoPtr(build_info(kVersion, hints.get(), a, a.addresses[0], {}, Params{}))->domain_attr->cq_data_size,
		     0u);
	hints->domain_attr->resource_mgmt = FI_RM_ENABLED;
	cr_assert(hints_mismatch(kVersion, hints.get(), a, a.addresses[0], Params{}).empty());
	/* Credits need the endpoint's own receive queue: not with a shared
	 * receive context, where FI_RM_ENABLED is then refused. */
	hints->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
	why = hints_mismatch(kVersion, hints.get(), a, a.addresses[0], Params{});
	cr_assert(why.find("resource_mgmt") != std::string::npos, "%s", why.c_str());
	hints->domain_attr->resource_mgmt = FI_RM_UNSPEC;
	InfoPtr shared(build_info(kVersion, hints.get(), a, a.addresses[0], {}, Params{}));
	cr_assert_eq(shared->domain_attr->resource_mgmt, FI_RM_DISABLED);
	cr_assert_eq(shared->domain_attr->cq_data_size, 0u, "no credits, no slots for remote CQ data");
	hints->ep_attr->rx_ctx_cnt = 0;
	hints->domain_attr->resource_mgmt = FI_RM_DISABLED;
	cr_assert(hints_mismatch(kVersion, hints.get(), a, a.addresses[0], Params{}).empty());
	/* The same hints on RoCE get both. */
	hints->domain_attr->resource_mgmt = FI_RM_ENABLED;
	hints->domain_attr->cq_data_size = 4;
	cr_assert(mismatch(hints.get()).empty());
	cr_assert_eq(build(hints.get())->domain_attr->cq_data_size, 4u);
}

/* fabtests getinfo_test mr_mode6: for every combination of mr_mode bits an
 * application offers, the reported mr_mode holds none it did not offer, and
 * local registration asked through the old mode bit is reported there. */
Test(build_info, reported_mr_mode_is_within_the_offer)
{
	const uint64_t bits[] = {FI_MR_LOCAL, FI_MR_RAW, FI_MR_VIRT_ADDR, FI_MR_ALLOCATED,
				 FI_MR_PROV_KEY, FI_MR_MMU_NOTIFY, FI_MR_RMA_EVENT, FI_MR_ENDPOINT};
	int served = 0;
	for (uint64_t mode_bit : {uint64_t(0), api::kModeLocalMr}) {
		for (unsigned combo = 0; combo < (1u << 8); combo++) {
			InfoPtr hints = app_hints();
			hints->mode = mode_bit | FI_CONTEXT;
			int offer = 0;
			for (unsigned b = 0; b < 8; b++)
				if (combo & (1u << b))
					offer |= int(bits[b]);
			hints->domain_attr->mr_mode = offer;
			if (!mismatch(hints.get()).empty())
				continue;
			InfoPtr info = build(hints.get());
			cr_assert_not_null(info.get());
			const int reported = info->domain_attr->mr_mode;
			cr_assert_eq(reported & ~offer, 0, "offer 0x%x, reported 0x%x", offer, reported);
			if (!(reported & FI_MR_LOCAL))
				cr_assert(info->mode & api::kModeLocalMr,
					  "local registration must be asked for somewhere");
			served++;
		}
	}
	cr_assert_gt(served, 0);
}

/* fabtests getinfo_test caps1/caps2: each context reports its own
 * direction's capabilities, a subset of the endpoint's, and the endpoint
 * the primary capabilities asked for and no other. */
Test(build_info, context_caps_are_per_direction)
{
	InfoPtr info = build(nullptr);
	cr_assert_eq(info->tx_attr->caps, FI_MSG | FI_RMA | FI_ATOMIC | FI_SEND | FI_READ | FI_WRITE);
	cr_assert_eq(info->rx_attr->caps, FI_MSG | FI_RMA | FI_ATOMIC | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE);
	for (uint64_t asked : {FI_MSG, FI_RMA, FI_MSG | FI_RMA}) {
		InfoPtr hints = app_hints();
		hints->caps = asked;
		InfoPtr shaped = build(hints.get());
		cr_assert_eq(shaped->caps & (FI_MSG | FI_RMA), asked);
		cr_assert_eq(shaped->tx_attr->caps & ~shaped->caps, 0u);
		cr_assert_eq(shaped->rx_attr->caps & ~shaped->caps, 0u);
		cr_assert_eq(shaped->tx_attr->caps & (FI_MSG | FI_RMA), asked);
		cr_assert_eq(shaped->rx_attr->caps & (FI_MSG | FI_RMA), asked);
	}
}

/* fi_domain(3) resource management: nd reserves CQ room at fi_enable and
 * retries a send that finds no receive forever, so it offers FI_RM_ENABLED,
 * and reports FI_RM_DISABLED only to an application that asked for it. */
Test(build_info, resource_management)
{
	InfoPtr info = build(nullptr);
	cr_assert_eq(info->domain_attr->resource_mgmt, FI_RM_ENABLED);
	InfoPtr hints = app_hints();
	hints->domain_attr->resource_mgmt = FI_RM_ENABLED;
	cr_assert(mismatch(hints.get()).empty());
	cr_assert_eq(build(hints.get())->domain_attr->resource_mgmt, FI_RM_ENABLED);
	hints->domain_attr->resource_mgmt = FI_RM_DISABLED;
	cr_assert_eq(build(hints.get())->domain_attr->resource_mgmt, FI_RM_DISABLED);
}

/* fabtests shared_ctx -e msg: shared transmit and receive contexts. */
Test(build_info, shared_contexts_when_asked)
{
	InfoPtr info = build(nullptr);
	cr_assert_eq(info->ep_attr->tx_ctx_cnt, 1u);
	cr_assert_eq(info->ep_attr->rx_ctx_cnt, 1u);
	cr_assert_eq(info->domain_attr->max_ep_stx_ctx, 1u);
	cr_assert_eq(info->domain_attr->max_ep_srx_ctx, 1u);
	InfoPtr hints = app_hints();
	hints->ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT;
	hints->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
	cr_assert(mismatch(hints.get()).empty());
	info = build(hints.get());
	cr_assert_eq(info->ep_attr->tx_ctx_cnt, FI_SHARED_CONTEXT);
	cr_assert_eq(info->ep_attr->rx_ctx_cnt, FI_SHARED_CONTEXT);
	hints->ep_attr->tx_ctx_cnt = 2;
	cr_assert(mismatch(hints.get()).find("more than one") != std::string::npos);
	hints->ep_attr->tx_ctx_cnt = 1;
	hints->domain_attr->max_ep_stx_ctx = 2;
	cr_assert_not(mismatch(hints.get()).empty());
}

/* fabtests unexpected_msg: an application that asks for no RMA and offers
 * only FI_MR_LOCAL | FI_MR_ALLOCATED gets messages only; one that asks for
 * RMA must still offer keys and virtual addresses. */
Test(build_info, messages_only_need_no_remote_registration_modes)
{
	InfoPtr hints = app_hints();
	hints->caps = 0;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED;
	cr_assert(mismatch(hints.get()).empty());
	InfoPtr info = build(hints.get());
	cr_assert_eq(info->domain_attr->mr_mode, FI_MR_LOCAL | FI_MR_ALLOCATED);
	cr_assert_eq(info->caps & kRmaCaps, 0u, "no RMA without its registration modes");
	cr_assert(info->caps & FI_MSG);
	cr_assert_eq(info->tx_attr->caps & kRmaCaps, 0u);
	cr_assert_eq(info->rx_attr->caps & kRmaCaps, 0u);
	hints->caps = FI_MSG | FI_RMA;
	cr_assert_not(mismatch(hints.get()).empty(), "RMA needs FI_MR_VIRT_ADDR and FI_MR_PROV_KEY");
	hints->caps = FI_MSG;
	hints->domain_attr->mr_mode = FI_MR_LOCAL;
	cr_assert_not(mismatch(hints.get()).empty(), "registration needs allocated memory");
}
