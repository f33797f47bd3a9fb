/*
 * nd_device.h: what the provider knows about an RDMA adapter port.
 *
 * Discovery (nd_device.cpp) fills these plain structures from libibverbs,
 * librdmacm and sysfs; everything downstream (fi_info construction, hint
 * matching, unit tests) works on the structures alone.
 */
#ifndef ND_DEVICE_H
#define ND_DEVICE_H

#include "nd_addr.h"
#include "nd_params.h"

#include <cstdint>
#include <string>
#include <vector>

namespace nd {

/* An IP address assigned to the network interface that carries a port. */
struct PortAddress {
	SockAddr addr;
	unsigned prefix_len = 0;
	std::string netdev;
};

/* Device-wide limits, straight from ibv_query_device. */
struct DeviceLimits {
	uint64_t max_mr_size = 0;
	uint32_t max_qp = 0;
	uint32_t max_qp_wr = 0;
	uint32_t max_sge = 0;
	uint32_t max_sge_rd = 0;
	uint32_t max_cq = 0;
	uint32_t max_cqe = 0;
	uint32_t max_mr = 0;
	uint32_t max_pd = 0;
	uint32_t max_qp_rd_atom = 0;	  /* inbound RDMA reads per QP */
	uint32_t max_qp_init_rd_atom = 0; /* outbound RDMA reads per QP */
	uint32_t max_srq = 0;
	uint32_t max_srq_wr = 0;
	uint32_t max_srq_sge = 0;
	uint32_t max_inline = 0;	  /* probed: largest inline send accepted */
	/* 64-bit fetch-and-add and compare-and-swap (atomic_cap); never on
	 * iWARP, whose verbs have no atomics. */
	bool atomics = false;
};

/* Connection private data limits of a transport, before provider framing. */
struct CmDataLimits {
	uint32_t connect = 0;
	uint32_t accept = 0;
	uint32_t reject = 0;
};

struct PciAddress {
	bool present = false;
	uint16_t domain = 0;
	uint8_t bus = 0, device = 0, function = 0;
};

/* One active port of one adapter, with the IP addresses that reach it. */
struct Adapter {
	std::string name;		/* "rxe0", "mlx5_0" */
	uint64_t node_guid = 0;		/* network byte order, as verbs gives it */
	uint8_t port_num = 1;
	bool iwarp = false;		/* transport iWARP (else IB/RoCE) */
	bool ethernet = false;		/* link layer Ethernet (RoCE, iWARP) */
	uint32_t vendor_id = 0, vendor_part_id = 0, hw_ver = 0;
	std::string fw_ver;
	std::string driver;
	PciAddress pci;
	int numa_node = -1;
	bool is_local = false;		/* near the calling thread's CPUs */
	std::string local_cpus;		/* sysfs cpumask of the device, if any */

	/* Port. */
	uint32_t max_msg_sz = 0;
	uint32_t mtu_bytes = 0;		/* active MTU */
	uint64_t speed_bps = 0;		/* active width x active speed */
	bool port_active = false;

	DeviceLimits limits;
	std::vector<PortAddress> addresses;
};

/* The private data limits of RC connections on this adapter's transport,
 * as the user sees them (rdma_cm's header already subtracted). */
CmDataLimits transport_cm_limits(const Adapter &adapter) noexcept;
CmDataLimits transport_cm_limits(bool iwarp) noexcept;
/* The user-visible private data limits (transport limits minus framing). */
CmDataLimits user_cm_limits(const Adapter &adapter) noexcept;
CmDataLimits user_cm_limits(bool iwarp) noexcept;

/* Converts verbs' active_speed / active_width codes to bits per second; 0
 * for codes it does not know. Pure. */
uint64_t port_speed_bps(uint8_t active_speed, uint8_t active_width) noexcept;

/* Converts verbs' ibv_mtu enum to bytes; 0 for an unknown code. Pure. */
uint32_t mtu_bytes(int ibv_mtu_code) noexcept;

/* Parses the last path component "0000:03:00.0" of a PCI sysfs path. Pure. */
bool parse_pci_address(const std::string &text, PciAddress *out) noexcept;

/* Whether the RDMA device named `name` is a software one (Soft-RoCE,
 * soft-iWARP): it has no device of its own in sysfs, only a parent
 * network interface. */
bool is_software_device(const std::string &name);

/* The sysfs file that counts the receiver-not-ready NAKs the RDMA device
 * `name` receives (hw_counters/rcvd_rnr_err: Soft-RoCE keeps it), empty
 * where the device keeps no such count. The stall watch (nd_cq.h) reads it
 * to tell a receiver that is late from a peer that is gone. */
std::string not_ready_naks_path(const std::string &name);

/* Reads a counter file such as not_ready_naks_path's; false if it
 * cannot. */
bool read_sysfs_counter(const std::string &path, uint64_t *value);

/*
 * Finds every RDMA adapter port that has an IP address, by asking rdma_cm
 * which device each local address binds to (what connect/listen will do).
 * Fills attributes from the device. Ports that are not active, interfaces
 * filtered out by FI_ND_IFACE, and addresses without a device are skipped
 * with an FI_INFO line saying why.
 */
std::vector<Adapter> discover_adapters(const Params &params);

/* discover_adapters, done at most once per kDiscoveryReuseMs for the same
 * parameters: applications call fi_getinfo in bursts (MPI at start-up,
 * fabtests' getinfo_test some 1,300 times), and each discovery costs
 * system calls per address and port. A change of address or port state is
 * seen within that time. */
constexpr int kDiscoveryReuseMs = 1000;
std::vector<Adapter> recent_adapters(const Params &params);

/* Orders adapters nearest-first to the calling thread's CPU set with hwloc
 * and sets is_local. Stable: equal locality keeps discovery order. */
void order_by_locality(std::vector<Adapter> &adapters);

/* Frees the hwloc topology loaded by order_by_locality (provider cleanup). */
void release_topology() noexcept;

/* fork(2) with memory registered (fi_nd(7), FORK): at provider start,
 * ibv_fork_init() unless FI_FORK_UNSAFE says yes (what the verbs provider
 * does), and one log line saying which protection applies. */
void prepare_for_fork() noexcept;

} // namespace nd

#endif /* ND_DEVICE_H */
