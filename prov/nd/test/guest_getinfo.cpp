/*
 * guest_getinfo.cpp: fi_getinfo against a real RDMA device. Attributes are
 * checked against what libibverbs reports for the same device; bad hints
 * must give -FI_ENODATA or -FI_EINVAL, never a crash.
 */
#include <criterion/criterion.h>

#include "guest.h"

#include <rdma/fi_atomic.h>
#include <rdma/fi_ext_nd.h>
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <string>

using namespace nd::test;

namespace {

struct DeviceTruth {
	ibv_device_attr dev{};
	ibv_port_attr port{};
};

/* What libibverbs itself says about the test device, port 1. */
DeviceTruth query_device()
{
	DeviceTruth truth;
	int count = 0;
	ibv_device **list = ibv_get_device_list(&count);
	cr_assert_not_null(list, "ibv_get_device_list");
	ibv_context *ctx = nullptr;
	for (int i = 0; i < count && !ctx; i++)
		if (std::strcmp(ibv_get_device_name(list[i]), device_name()) == 0)
			ctx = ibv_open_device(list[i]);
	cr_assert_not_null(ctx, "device %s not found", device_name());
	cr_assert_eq(ibv_query_device(ctx, &truth.dev), 0);
	cr_assert_eq(ibv_query_port(ctx, 1, &truth.port), 0);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return truth;
}

uint16_t port_of(const void *addr)
{
	auto *sa = static_cast<const sockaddr *>(addr);
	if (sa->sa_family == AF_INET)
		return ntohs(static_cast<const sockaddr_in *>(addr)->sin_port);
	return ntohs(static_cast<const sockaddr_in6 *>(addr)->sin6_port);
}

std::string ip_of(const void *addr)
{
	char text[INET6_ADDRSTRLEN] = "";
	auto *sa = static_cast<const sockaddr *>(addr);
	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &static_cast<const sockaddr_in *>(addr)->sin_addr, text, sizeof(text));
	else
		inet_ntop(AF_INET6, &static_cast<const sockaddr_in6 *>(addr)->sin6_addr, text,
			  sizeof(text));
	return text;
}

} // namespace

Test(getinfo, lists_the_device_for_ipv4_and_ipv6)
{
	InfoPtr hints = nd_hints(), info;
	cr_assert_eq(getinfo(nullptr, nullptr, 0, hints.get(), &info), 0);
	bool v4 = false, v6 = false;
	for (fi_info *cur = info.get(); cur; cur = cur->next) {
		cr_assert_str_eq(cur->fabric_attr->prov_name, "nd");
		cr_assert_str_eq(cur->domain_attr->name, device_name());
		cr_assert_eq(cur->ep_attr->type, FI_EP_MSG);
		if (cur->addr_format == FI_SOCKADDR_IN && ip_of(cur->src_addr) == guest_ip()) {
			v4 = true;
			cr_assert_str_eq(cur->fabric_attr->name, "10.0.2.0/24");
		}
		if (cur->addr_format == FI_SOCKADDR_IN6 && ip_of(cur->src_addr) == guest_ip6())
			v6 = true;
	}
	cr_assert(v4, "an IPv4 info for %s", guest_ip());
	cr_assert(v6, "an IPv6 info for %s", guest_ip6());
}

Test(getinfo, attributes_are_the_devices)
{
	DeviceTruth truth = query_device();
	InfoPtr hints = nd_hints(), info;
	cr_assert_eq(getinfo(nullptr, nullptr, 0, hints.get(), &info), 0);
	fi_info *i = info.get();
	cr_assert_leq(i->tx_attr->iov_limit, (size_t)truth.dev.max_sge);
	cr_assert_leq(i->rx_attr->iov_limit, (size_t)truth.dev.max_sge);
	/* The device's max_sge is offered when asked for, one more is not. */
	hints->tx_attr->iov_limit = truth.dev.max_sge;
	hints->rx_attr->iov_limit = truth.dev.max_sge;
	InfoPtr wide;
	cr_assert_eq(getinfo(nullptr, nullptr, 0, hints.get(), &wide), 0);
	cr_assert_eq(wide->tx_attr->iov_limit, (size_t)truth.dev.max_sge);
	cr_assert_eq(wide->rx_attr->iov_limit, (size_t)truth.dev.max_sge);
	hints->tx_attr->iov_limit = truth.dev.max_sge + 1;
	cr_assert_eq(getinfo(nullptr, nullptr, 0, hints.get(), &wide), -FI_ENODATA);
	cr_assert_eq(i->ep_attr->max_msg_size, (size_t)truth.port.max_msg_sz);
	cr_assert_eq(i->domain_attr->mr_cnt, (size_t)truth.dev.max_mr);
	cr_assert_eq(i->domain_attr->cq_cnt, (size_t)truth.dev.max_cq);
	cr_assert_eq(i->domain_attr->ep_cnt, (size_t)truth.dev.max_qp);
	cr_assert_leq(i->tx_attr->size, (size_t)truth.dev.max_qp_wr);
	cr_assert_gt(i->tx_attr->inject_size, 0u, "an inline limit was probed");
	auto *nd = static_cast<const fi_nd_nic_attr *>(i->nic->prov_attr);
	cr_assert_eq(nd->max_inbound_read_limit, (uint32_t)truth.dev.max_qp_rd_atom);
	cr_assert_eq(nd->max_outbound_read_limit, (uint32_t)truth.dev.max_qp_init_rd_atom);
	/* fi_nd(7), LIMITS: what the transport carries, less nd's length
	 * byte and, on iWARP, its receive-credit offer. */
	const bool iwarp = i->ep_attr->protocol == FI_PROTO_IWARP;
	cr_assert_eq(nd->max_connect_data, iwarp ? 228u : 55u);
	cr_assert_eq(nd->max_accept_data, iwarp ? 228u : 195u);
	cr_assert_eq(nd->max_reject_data, iwarp ? 247u : 147u);
	cr_assert_eq(nd->max_inline_data, i->tx_attr->inject_size);
	cr_assert_eq(i->nic->link_attr->state, FI_LINK_UP);
	cr_assert_str_eq(i->nic->device_attr->firmware, truth.dev.fw_ver);
	cr_assert_str_eq(i->nic->link_attr->network_type,
			 iwarp ? "iWARP"
			 : truth.port.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand");
}

Test(getinfo, source_node_and_service)
{
	InfoPtr hints = nd_hints(), info;
	cr_assert_eq(getinfo(guest_ip(), "7471", FI_SOURCE, hints.get(), &info), 0);
	cr_assert_eq(info->next, nullptr, "exactly the one address asked for");
	cr_assert_eq(info->addr_format, (uint32_t)FI_SOCKADDR_IN);
	cr_assert(ip_of(info->src_addr) == guest_ip());
	cr_assert_eq(port_of(info->src_addr), 7471);
	cr_assert_null(info->dest_addr);
}

Test(getinfo, destination_node_picks_the_routed_source)
{
	InfoPtr hints = nd_hints(), info;
	cr_assert_eq(getinfo(guest_ip(), "7471", 0, hints.get(), &info), 0);
	cr_assert_not_null(info->dest_addr);
	cr_assert_eq(port_of(info->dest_addr), 7471);
	cr_assert(ip_of(info->src_addr) == guest_ip());
	cr_assert_eq(port_of(info->src_addr), 0);
}

Test(getinfo, ipv6_node_and_format)
{
	InfoPtr hints = nd_hints(), info;
	cr_assert_eq(getinfo(guest_ip6(), "7471", FI_SOURCE, hints.get(), &info), 0);
	cr_assert_eq(info->addr_format, (uint32_t)FI_SOCKADDR_IN6);
	cr_assert(ip_of(info->src_addr) == guest_ip6());
	hints->addr_format = FI_SOCKADDR_IN6;
	cr_assert_eq(getinfo(nullptr, nullptr, 0, hints.get(), &info), 0);
	for (fi_info *cur = info.get(); cur; cur = cur->next)
		cr_assert_eq(cur->addr_format, (uint32_t)FI_SOCKADDR_IN6);
}

Test(getinfo, service_alone_is_a_local_port)
{
	InfoPtr hints = nd_hints(), info;
	hints->addr_format = FI_SOCKADDR_IN;
	cr_assert_eq(getinfo(nullptr, "9228", 0, hints.get(), &info), 0);
	cr_assert_eq(port_of(info->src_addr), 9228);
	cr_assert_null(info->dest_addr);
}

/* The adapter's atomics (nd_atomic.h): offered by default and to hints that
 * ask, on a device that has them; never on iWARP, where hints that ask get
 * nothing. */
Test(getinfo, atomics_where_the_device_has_them)
{
	InfoPtr info;
	InfoPtr hints = nd_hints();
	hints->caps = 0;
	cr_assert_eq(getinfo(nullptr, nullptr, 0, hints.get(), &info), 0);
	const bool iwarp = info->ep_attr->protocol == FI_PROTO_IWARP;
	cr_assert_eq(!!(info->caps & FI_ATOMIC), !iwarp, "FI_ATOMIC by default: %s", iwarp ? "not on iWARP" : "yes");
	cr_assert_eq(!!(info->tx_attr->caps & FI_ATOMIC), !iwarp);
	cr_assert_eq(!!(info->rx_attr->caps & FI_ATOMIC), !iwarp);

	hints = nd_hints();
	hints->caps = FI_MSG | FI_ATOMIC;
	const int ret = getinfo(nullptr, nullptr, 0, hints.get(), &info);
	if (iwarp) {
		cr_assert_eq(ret, -FI_ENODATA, "iWARP has no atomics");
		return;
	}
	cr_assert_eq(ret, 0);
	for (fi_info *cur = info.get(); cur; cur = cur->next)
		cr_assert(cur->caps & FI_ATOMIC);
	fid_fabric *fabric;
	fid_domain *domain;
	cr_assert_eq(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
	cr_assert_eq(fi_domain(fabric, info.get(), &domain, nullptr), 0);
	fi_atomic_attr attr{};
	cr_assert_eq(fi_query_atomic(domain, FI_UINT64, FI_SUM, &attr, 0), 0);
	cr_assert_eq(attr.size, 8u);
	cr_assert_eq(attr.count, 1u);
	cr_assert_eq(fi_query_atomic(domain, FI_INT64, FI_SUM, &attr, FI_FETCH_ATOMIC), 0);
	cr_assert_eq(fi_query_atomic(domain, FI_UINT64, FI_CSWAP, &attr, FI_COMPARE_ATOMIC), 0);
	cr_assert_eq(fi_query_atomic(domain, FI_UINT32, FI_SUM, &attr, 0), -FI_EOPNOTSUPP);
	cr_assert_eq(fi_query_atomic(domain, FI_UINT64, FI_MIN, &attr, FI_FETCH_ATOMIC), -FI_EOPNOTSUPP);
	cr_assert_eq(fi_query_atomic(domain, FI_UINT64, FI_CSWAP_NE, &attr, FI_COMPARE_ATOMIC), -FI_EOPNOTSUPP);
	cr_assert_eq(fi_query_atomic(domain, FI_DOUBLE, FI_SUM, &attr, FI_FETCH_ATOMIC), -FI_EOPNOTSUPP);
	cr_assert_eq(fi_query_atomic(domain, FI_UINT64, FI_SUM, &attr, FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC),
		     -FI_EBADFLAGS);
	cr_assert_eq(fi_query_atomic(domain, FI_UINT64, FI_SUM, nullptr, 0), -FI_EINVAL);
	cr_assert_eq(fi_close(&domain->fid), 0);
	cr_assert_eq(fi_close(&fabric->fid), 0);
}

Test(getinfo, bad_hints_give_enodata)
{
	InfoPtr info;
	InfoPtr hints = nd_hints();
	hints->fabric_attr->name = strdup("no-such-fabric");
	cr_assert_eq(getinfo(nullptr, nullptr, 0, hints.get(), &info), -FI_ENODATA);

	hints = nd_hints();
	free(hints->domain_attr->name);
	hints->domain_attr->name = strdup("mlx5_99");
	cr_assert_eq(getinfo(nullptr, nullptr, 0, hints.get(), &info), -FI_ENODATA);

	hints = nd_hints();
	hints->addr_format = FI_ADDR_STR;
	cr_assert_eq(getinfo(nullptr, nullptr, 0, hints.get(), &info), -FI_ENODATA);

	/* RDM over nd is libfabric's ofi_rxm layered on top, never nd itself. */
	hints = nd_hints();
	hints->ep_attr->type = FI_EP_RDM;
	int ret = getinfo(nullptr, nullptr, 0, hints.get(), &info);
	cr_assert(ret == 0 || ret == -FI_ENODATA);
	for (fi_info *cur = info.get(); cur; cur = cur->next)
		cr_assert_str_neq(cur->fabric_attr->prov_name, "nd", "nd offers FI_EP_MSG only");
	hints->ep_attr->type = FI_EP_DGRAM;
	cr_assert_eq(getinfo(nullptr, nullptr, 0, hints.get(), &info), -FI_ENODATA);

	hints = nd_hints();
	cr_assert_eq(getinfo("no-such-host.invalid", "7471", 0, hints.get(), &info), -FI_ENODATA);
	cr_assert_eq(getinfo("10.0.2.99", "7471", FI_SOURCE, hints.get(), &info), -FI_ENODATA,
		     "not a local address");

	hints = nd_hints();
	hints->caps = FI_TAGGED | FI_MULTI_RECV;
	cr_assert_eq(getinfo(nullptr, nullptr, 0, hints.get(), &info), -FI_ENODATA, "not together");

	hints = nd_hints();
	hints->tx_attr->size = (size_t)1 << 40;
	cr_assert_eq(getinfo(nullptr, nullptr, 0, hints.get(), &info), -FI_ENODATA);

	hints = nd_hints();
	hints->domain_attr->mr_mode = 0;
	cr_assert_eq(getinfo(nullptr, nullptr, 0, hints.get(), &info), -FI_ENODATA);
	cr_assert_null(info.get());
}

Test(getinfo, inconsistent_addresses_are_refused)
{
	InfoPtr hints = nd_hints(), info;
	sockaddr_in sin{};
	sin.sin_family = AF_INET;
	inet_pton(AF_INET, guest_ip(), &sin.sin_addr);
	hints->addr_format = FI_SOCKADDR_IN;
	hints->src_addr = malloc(sizeof(sin));
	memcpy(hints->src_addr, &sin, sizeof(sin));
	/* nd answers -FI_EINVAL (unit-tested); libfabric's core may report
	 * the answer of the last provider it asked instead. Never an info. */
	hints->src_addrlen = 3;
	int ret = getinfo(nullptr, nullptr, 0, hints.get(), &info);
	cr_assert(ret == -FI_EINVAL || ret == -FI_ENODATA, "got %d", ret);
	cr_assert_null(info.get());
	hints->src_addrlen = sizeof(sin);
	hints->addr_format = FI_SOCKADDR_IN6;
	ret = getinfo(nullptr, nullptr, 0, hints.get(), &info);
	cr_assert(ret == -FI_EINVAL || ret == -FI_ENODATA, "got %d", ret);
	cr_assert_null(info.get());
	hints->addr_format = FI_SOCKADDR_IN;
	cr_assert_eq(getinfo(nullptr, nullptr, 0, hints.get(), &info), 0);
	cr_assert(ip_of(info->src_addr) == guest_ip());
}

Test(getinfo, dupinfo_and_tostr_of_a_real_info)
{
	InfoPtr hints = nd_hints(), info;
	cr_assert_eq(getinfo(nullptr, nullptr, 0, hints.get(), &info), 0);
	InfoPtr copy(fi_dupinfo(info.get()));
	cr_assert_not_null(copy.get());
	cr_assert_str_eq(copy->nic->device_attr->name, device_name());
	info.reset();
	const char *text = fi_tostr(copy.get(), FI_TYPE_INFO);
	cr_assert(strstr(text, "fi_nd_nic_attr") != nullptr, "%s", text);
	cr_assert(strstr(text, "FI_LINK_UP") != nullptr);
}

Test(getinfo, api_1_4_applications_get_fi_mr_basic)
{
	InfoPtr hints = nd_hints(), info;
	hints->domain_attr->mr_mode = api::kMrBasic;
	hints->mode = api::kModeLocalMr | FI_RX_CQ_DATA;
	fi_info *raw = nullptr;
	cr_assert_eq(fi_getinfo(FI_VERSION(1, 4), nullptr, nullptr, 0, hints.get(), &raw), 0);
	info.reset(raw);
	cr_assert_eq(info->domain_attr->mr_mode, api::kMrBasic);
	cr_assert(info->mode & api::kModeLocalMr);
}
