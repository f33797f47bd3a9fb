/*
 * nd_device.cpp: discovery of RDMA adapter ports and their attributes.
 *
 * Which device an IP address belongs to is asked of rdma_cm itself
 * (rdma_bind_addr on a throw-away id): that is the device a later connect or
 * listen on that address will use, whatever the link layer (InfiniBand with
 * IPoIB, RoCE, iWARP). Attributes come from ibv_query_device/ibv_query_port
 * and sysfs; the inline send limit is probed by creating a queue pair, once
 * per device per process.
 */
#include "nd_device.h"
#include "nd_cm_data.h"
#include "nd.h"
#include "nd_verbs.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <limits.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <chrono>
#include <map>
#include <mutex>

namespace nd {

namespace {

/* rdma_cm's header in the REQ private data on IB/RoCE (rdma_cm IP service). */
constexpr uint32_t kIbReqPrivateData = 92 - 36;
constexpr uint32_t kIbRepPrivateData = 196;
constexpr uint32_t kIbRejPrivateData = 148;
/* Every CM message on iWARP: the kernel's RDMA_MAX_PRIVATE_DATA (256, what
 * MPA carries in Linux) less the 8 bytes of MPA revision 2's IRD/ORD
 * header, which siw, cxgb4 and irdma put in front of the application's; a
 * peer refuses a longer MPA request or reply. */
constexpr uint32_t kIwarpPrivateData = 256 - 8;

std::string read_sysfs(const std::string &path)
{
	std::ifstream in(path);
	std::string value;
	if (in)
		std::getline(in, value);
	while (!value.empty() && (value.back() == '\n' || value.back() == ' '))
		value.pop_back();
	return value;
}

std::string real_path(const std::string &path)
{
	char resolved[PATH_MAX];
	if (!realpath(path.c_str(), resolved))
		return {};
	return resolved;
}

std::string base_name(const std::string &path)
{
	size_t slash = path.rfind('/');
	return slash == std::string::npos ? path : path.substr(slash + 1);
}

/* Walks up a sysfs device path to the nearest PCI function. */
bool find_pci_address(const std::string &device_path, PciAddress *out)
{
	std::string path = device_path;
	while (!path.empty() && path != "/sys/devices") {
		if (parse_pci_address(base_name(path), out))
			return true;
		size_t slash = path.rfind('/');
		if (slash == std::string::npos)
			break;
		path.resize(slash);
	}
	return false;
}

/* Fills the sysfs-derived attributes: driver, PCI address, NUMA node, the
 * CPUs the device is local to. A software device (Soft-RoCE, soft-iWARP)
 * has no device/ link of its own: its parent network interface's device is
 * where the traffic goes, so that is where PCI locality comes from. */
void fill_sysfs(Adapter *adapter)
{
	const std::string ibdev = "/sys/class/infiniband/" + adapter->name;
	std::string device = real_path(ibdev + "/device");
	if (!device.empty()) {
		adapter->driver = base_name(real_path(device + "/driver"));
	} else {
		std::string parent = read_sysfs(ibdev + "/parent");
		adapter->driver = adapter->iwarp ? "soft-iwarp" : "soft-roce";
		if (!parent.empty())
			device = real_path("/sys/class/net/" + parent + "/device");
	}
	if (device.empty())
		return;
	find_pci_address(device, &adapter->pci);
	std::string numa = read_sysfs(device + "/numa_node");
	if (!numa.empty())
		adapter->numa_node = std::atoi(numa.c_str());
	adapter->local_cpus = device + "/local_cpus";
	if (read_sysfs(adapter->local_cpus).empty())
		adapter->local_cpus.clear();
}

/* Probes the largest inline send the device accepts, up to `ceiling`,
 * halving on refusal. Costs one QP creation per try; cached per device. */
uint32_t probe_inline(ibv_context *context, const std::string &key, size_t ceiling)
{
	static Mutex cache_lock{LockRank::inline_probe};
	static std::map<std::string, uint32_t> cache;
	std::lock_guard<Mutex> guard(cache_lock);
	std::string cache_key = key + "/" + std::to_string(ceiling);
	auto found = cache.find(cache_key);
	if (found != cache.end())
		return found->second;

	uint32_t result = 0;
	UniquePd pd(ibv_alloc_pd(context));
	UniqueCq cq(pd ? ibv_create_cq(context, 2, nullptr, nullptr, 0) : nullptr);
	if (!pd || !cq) {
		ND_WARN(FI_LOG_CORE, "%s: cannot allocate a PD/CQ to probe the inline size (%s); inject_size is 0\n",
			key.c_str(), std::strerror(errno));
		return 0;
	}
	for (size_t want = ceiling;; want /= 2) {
		ibv_qp_init_attr attr{};
		attr.send_cq = cq.get();
		attr.recv_cq = cq.get();
		attr.qp_type = IBV_QPT_RC;
		attr.cap.max_send_wr = 1;
		attr.cap.max_recv_wr = 1;
		attr.cap.max_send_sge = 1;
		attr.cap.max_recv_sge = 1;
		attr.cap.max_inline_data = static_cast<uint32_t>(want);
		UniqueQp qp(ibv_create_qp(pd.get(), &attr));
		if (qp) {
			/* The device may round up; what it reports is what it does. */
			result = attr.cap.max_inline_data;
			break;
		}
		if (want == 0)
			break;
	}
	cache.emplace(cache_key, result);
	return result;
}

bool fill_from_verbs(ibv_context *context, uint8_t port_num, const Params &params,
		     Adapter *adapter)
{
	ibv_device_attr dev{};
	int rc = ibv_query_device(context, &dev);
	if (rc) {
		ND_INFO(FI_LOG_CORE, "%s: ibv_query_device failed (%s); skipped\n",
			adapter->name.c_str(), std::strerror(rc));
		return false;
	}
	ibv_port_attr port{};
	rc = ibv_query_port(context, port_num, &port);
	if (rc) {
		ND_INFO(FI_LOG_CORE, "%s port %u: ibv_query_port failed (%s); skipped\n",
			adapter->name.c_str(), port_num, std::strerror(rc));
		return false;
	}
	adapter->port_num = port_num;
	adapter->node_guid = dev.node_guid;
	adapter->iwarp = context->device->transport_type == IBV_TRANSPORT_IWARP;
	adapter->ethernet = port.link_layer == IBV_LINK_LAYER_ETHERNET || adapter->iwarp;
	adapter->vendor_id = dev.vendor_id;
	adapter->vendor_part_id = dev.vendor_part_id;
	adapter->hw_ver = dev.hw_ver;
	adapter->fw_ver = dev.fw_ver;
	adapter->max_msg_sz = port.max_msg_sz;
	adapter->mtu_bytes = mtu_bytes(port.active_mtu);
	adapter->speed_bps = port_speed_bps(port.active_speed, port.active_width);
	adapter->port_active = port.state == IBV_PORT_ACTIVE;

	DeviceLimits &l = adapter->limits;
	l.max_mr_size = dev.max_mr_size;
	l.max_qp = static_cast<uint32_t>(dev.max_qp);
	l.max_qp_wr = static_cast<uint32_t>(dev.max_qp_wr);
	l.max_sge = static_cast<uint32_t>(dev.max_sge);
	l.max_sge_rd = static_cast<uint32_t>(dev.max_sge_rd ? dev.max_sge_rd : dev.max_sge);
	l.max_cq = static_cast<uint32_t>(dev.max_cq);
	l.max_cqe = static_cast<uint32_t>(dev.max_cqe);
	l.max_mr = static_cast<uint32_t>(dev.max_mr);
	l.max_pd = static_cast<uint32_t>(dev.max_pd);
	l.max_qp_rd_atom = static_cast<uint32_t>(dev.max_qp_rd_atom);
	l.max_qp_init_rd_atom = static_cast<uint32_t>(dev.max_qp_init_rd_atom);
	l.max_srq = static_cast<uint32_t>(dev.max_srq);
	l.max_srq_wr = static_cast<uint32_t>(dev.max_srq_wr);
	l.max_srq_sge = static_cast<uint32_t>(dev.max_srq_sge);
	l.atomics = dev.atomic_cap != IBV_ATOMIC_NONE && !adapter->iwarp;
	l.max_inline = probe_inline(context,
				    adapter->name + "/" + std::to_string(adapter->node_guid),
				    params.inline_probe);
	fill_sysfs(adapter);
	return true;
}

/* The local IP addresses worth offering: up, not loopback, not IPv6
 * link-local (it needs a scope id no libfabric address carries), allowed by
 * FI_ND_IFACE and FI_ND_IPV6. */
std::vector<PortAddress> local_addresses(const Params &params)
{
	std::vector<PortAddress> result;
	ifaddrs *list = nullptr;
	if (getifaddrs(&list) != 0) {
		ND_WARN(FI_LOG_CORE, "getifaddrs failed: %s\n", std::strerror(errno));
		return result;
	}
	for (ifaddrs *ifa = list; ifa; ifa = ifa->ifa_next) {
		if (!ifa->ifa_addr || !(ifa->ifa_flags & IFF_UP) || (ifa->ifa_flags & IFF_LOOPBACK))
			continue;
		int family = ifa->ifa_addr->sa_family;
		if (family != AF_INET && family != AF_INET6)
			continue;
		if (family == AF_INET6 && !params.ipv6)
			continue;
		if (family == AF_INET6 &&
		    IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6 *>(ifa->ifa_addr)->sin6_addr))
			continue;
		if (!iface_allowed(params.iface, ifa->ifa_name)) {
			ND_INFO(FI_LOG_CORE, "%s: not in FI_ND_IFACE=%s; skipped\n", ifa->ifa_name,
				params.iface.c_str());
			continue;
		}
		PortAddress pa;
		if (sockaddr_copy(ifa->ifa_addr,
				  family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6),
				  &pa.addr) != 0)
			continue;
		pa.addr.set_port(0);
		pa.prefix_len = prefix_length(ifa->ifa_netmask);
		pa.netdev = ifa->ifa_name;
		result.push_back(std::move(pa));
	}
	freeifaddrs(list);
	return result;
}

} // namespace

bool is_software_device(const std::string &name)
{
	const std::string ibdev = "/sys/class/infiniband/" + name;
	return real_path(ibdev + "/device").empty() && !read_sysfs(ibdev + "/parent").empty();
}

std::string not_ready_naks_path(const std::string &name)
{
	const std::string path = "/sys/class/infiniband/" + name + "/ports/1/hw_counters/rcvd_rnr_err";
	return read_sysfs(path).empty() ? std::string() : path;
}

bool read_sysfs_counter(const std::string &path, uint64_t *value)
{
	const std::string text = read_sysfs(path);
	if (text.empty())
		return false;
	char *end = nullptr;
	errno = 0;
	const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
	if (errno || end == text.c_str())
		return false;
	*value = v;
	return true;
}

CmDataLimits transport_cm_limits(bool iwarp) noexcept
{
	if (iwarp)
		return {kIwarpPrivateData, kIwarpPrivateData, kIwarpPrivateData};
	return {kIbReqPrivateData, kIbRepPrivateData, kIbRejPrivateData};
}

CmDataLimits transport_cm_limits(const Adapter &adapter) noexcept
{
	return transport_cm_limits(adapter.iwarp);
}

uint64_t port_speed_bps(uint8_t active_speed, uint8_t active_width) noexcept
{
	uint64_t lane_mbps;
	switch (active_speed) {
	case 1: lane_mbps = 2500; break;	/* SDR */
	case 2: lane_mbps = 5000; break;	/* DDR */
	case 4: lane_mbps = 10000; break;	/* QDR */
	case 8: lane_mbps = 10313; break;	/* FDR10 */
	case 16: lane_mbps = 14063; break;	/* FDR */
	case 32: lane_mbps = 25781; break;	/* EDR */
	case 64: lane_mbps = 53125; break;	/* HDR */
	case 128: lane_mbps = 106250; break;	/* NDR */
	default: return 0;
	}
	uint64_t lanes;
	switch (active_width) {
	case 1: lanes = 1; break;
	case 2: lanes = 4; break;
	case 4: lanes = 8; break;
	case 8: lanes = 12; break;
	case 16: lanes = 2; break;
	default: return 0;
	}
	return lane_mbps * lanes * 1000000ull;
}

uint32_t mtu_bytes(int ibv_mtu_code) noexcept
{
	switch (ibv_mtu_code) {
	case IBV_MTU_256: return 256;
	case IBV_MTU_512: return 512;
	case IBV_MTU_1024: return 1024;
	case IBV_MTU_2048: return 2048;
	case IBV_MTU_4096: return 4096;
	default: return 0;
	}
}

bool parse_pci_address(const std::string &text, PciAddress *out) noexcept
{
	unsigned domain, bus, device, function;
	char tail;
	if (text.size() != 12 ||
	    std::sscanf(text.c_str(), "%4x:%2x:%2x.%1x%c", &domain, &bus, &device, &function,
			&tail) != 4)
		return false;
	if (text[4] != ':' || text[7] != ':' || text[10] != '.')
		return false;
	out->present = true;
	out->domain = static_cast<uint16_t>(domain);
	out->bus = static_cast<uint8_t>(bus);
	out->device = static_cast<uint8_t>(device);
	out->function = static_cast<uint8_t>(function);
	return true;
}

std::vector<Adapter> recent_adapters(const Params &params)
{
	static Mutex lock{LockRank::adapters};
	static std::vector<Adapter> found;
	static std::chrono::steady_clock::time_point when;
	static Params found_with;
	static bool valid = false;
	const auto now = std::chrono::steady_clock::now();
	std::lock_guard<Mutex> guard(lock);
	const bool same = valid && found_with.iface == params.iface && found_with.ipv6 == params.ipv6 &&
			  found_with.inline_probe == params.inline_probe;
	if (!same || now - when > std::chrono::milliseconds(kDiscoveryReuseMs)) {
		found = discover_adapters(params);
		found_with = params;
		when = now;
		valid = true;
	}
	return found;
}

std::vector<Adapter> discover_adapters(const Params &params)
{
	std::vector<Adapter> adapters;
	std::vector<PortAddress> candidates = local_addresses(params);
	if (candidates.empty()) {
		ND_INFO(FI_LOG_CORE, "no usable IP address on any interface\n");
		return adapters;
	}
	UniqueEventChannel channel(rdma_create_event_channel());
	if (!channel) {
		ND_INFO(FI_LOG_CORE, "rdma_create_event_channel failed (%s): no RDMA CM on this host\n",
			std::strerror(errno));
		return adapters;
	}
	/* Adapters found so far, indexed by "device/port". */
	std::map<std::string, size_t> index;
	for (PortAddress &candidate : candidates) {
		rdma_cm_id *raw_id = nullptr;
		if (rdma_create_id(channel.get(), &raw_id, nullptr, RDMA_PS_TCP)) {
			ND_WARN(FI_LOG_CORE, "rdma_create_id failed: %s\n", std::strerror(errno));
			break;
		}
		UniqueCmId id(raw_id);
		SockAddr bind_addr = candidate.addr;
		if (rdma_bind_addr(id.get(), &bind_addr.sa) || !id->verbs) {
			ND_INFO(FI_LOG_CORE, "%s (%s): no RDMA device behind this address; skipped\n",
				candidate.addr.ip_string().c_str(), candidate.netdev.c_str());
			continue;
		}
		std::string name = ibv_get_device_name(id->verbs->device);
		std::string key = name + "/" + std::to_string(id->port_num);
		auto found = index.find(key);
		if (found == index.end()) {
			Adapter adapter;
			adapter.name = name;
			if (!fill_from_verbs(id->verbs, id->port_num, params, &adapter))
				continue;
			if (!adapter.port_active) {
				ND_INFO(FI_LOG_CORE, "%s port %u: not active; %s skipped\n",
					name.c_str(), id->port_num, candidate.addr.ip_string().c_str());
				continue;
			}
			found = index.emplace(key, adapters.size()).first;
			adapters.push_back(std::move(adapter));
		}
		adapters[found->second].addresses.push_back(candidate);
	}
	return adapters;
}

CmDataLimits user_cm_limits(bool iwarp) noexcept
{
	CmDataLimits t = transport_cm_limits(iwarp);
	constexpr auto framing = static_cast<uint32_t>(cm::kFramingBytes);
	/* iWARP's connect and accept also carry the receive-credit offer
	 * (nd_credits.h); a reject does not. */
	const auto offer = iwarp ? static_cast<uint32_t>(cm::kCreditOfferBytes) : 0u;
	return {t.connect - framing - offer, t.accept - framing - offer, t.reject - framing};
}

CmDataLimits user_cm_limits(const Adapter &adapter) noexcept
{
	return user_cm_limits(adapter.iwarp);
}

void prepare_for_fork() noexcept
{
	/* A kernel that copies pinned pages for the child at fork (Linux 5.13
	 * on, which ibv_is_fork_initialized reports as UNNEEDED) keeps a
	 * parent's registered memory its own whoever writes first. Before that,
	 * the page the adapter uses could become the child's on the parent's
	 * next write; ibv_fork_init() marks registered memory MADV_DONTFORK
	 * instead (the child then has no such pages). It only works before the
	 * process opened a device, hence at provider start. */
	/* libfabric's own setting (FI_FORK_UNSAFE), defined by its core before
	 * any provider starts, read as the verbs provider reads it. */
	int fork_unsafe = 0;
	const bool unsafe = fi_param_get_bool(nullptr, "fork_unsafe", &fork_unsafe) == 0 && fork_unsafe;
	if (!unsafe && ibv_is_fork_initialized() == IBV_FORK_DISABLED) {
		if (int rc = ibv_fork_init())
			ND_WARN(FI_LOG_CORE,
				"fork: ibv_fork_init: %s (a device was opened before): memory registered "
				"from now on is not protected from a fork; set RDMAV_FORK_SAFE=1 before "
				"the process starts\n",
				std::strerror(rc));
	}
	switch (ibv_is_fork_initialized()) {
	case IBV_FORK_UNNEEDED:
		ND_INFO(FI_LOG_CORE, "fork: the kernel copies registered pages for a child at fork: "
				     "the parent's data path is unaffected\n");
		break;
	case IBV_FORK_ENABLED:
		ND_INFO(FI_LOG_CORE, "fork: ibv_fork_init: registered memory is not inherited by a "
				     "child (MADV_DONTFORK)\n");
		break;
	case IBV_FORK_DISABLED:
		ND_INFO(FI_LOG_CORE, "fork: %s: a fork while memory is registered may take the "
				     "parent's registered pages from it\n",
			unsafe ? "FI_FORK_UNSAFE is set" : "no protection");
		break;
	}
}

} // namespace nd
