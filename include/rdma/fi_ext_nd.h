/*
 * fi_ext_nd.h: the public extension of the libfabric `nd` provider.
 *
 * The `nd` provider brings Microsoft NetworkDirect connection semantics to
 * RDMA devices driven by rdma-core. What libfabric's own API cannot express
 * (adapter read limits, the accept and reject private-data limits, the
 * connection options of NetworkDirect) is defined here. Everything here is
 * plain C and stable: a field is only ever added at the end of a structure,
 * behind a version number.
 *
 * See fi_nd(7).
 */
#ifndef FI_EXT_ND_H
#define FI_EXT_ND_H

#include <stddef.h>
#include <stdint.h>
#include <rdma/fabric.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FI_ND_PROV_NAME "nd"

/* The provider-specific code of `nd`, as fi_ext.h asks every provider to
 * reserve one: 12 bits ("ND" = 0x4e44 folded to 0x4e4) shifted left by 16.
 * Provider-specific option names and values are built on it. */
#define FI_PROV_SPECIFIC_ND (0x4e4 << 16)

/*
 * Attributes of an adapter that libfabric's fi_nic has no field for,
 * reachable from every fi_info the provider returns:
 *
 *     const struct fi_nd_nic_attr *nd = info->nic->prov_attr;
 *
 * and printed by fi_info -v / fi_tostr under the nic.
 */
#define FI_ND_NIC_ATTR_VERSION 1

struct fi_nd_nic_attr {
	uint32_t version;		/* FI_ND_NIC_ATTR_VERSION */
	/* ND's MaxInboundReadLimit: RDMA reads the adapter serves at once
	 * for one connection (verbs max_qp_rd_atom). */
	uint32_t max_inbound_read_limit;
	/* ND's MaxOutboundReadLimit: RDMA reads one connection may have in
	 * flight (verbs max_qp_init_rd_atom). */
	uint32_t max_outbound_read_limit;
	/* Private data the application may send with a connect, accept and
	 * reject on this transport, after the provider's own framing. */
	uint32_t max_connect_data;
	uint32_t max_accept_data;
	uint32_t max_reject_data;
	/* The largest inline send the adapter accepted when probed. */
	uint32_t max_inline_data;
	/* NUMA node of the adapter, -1 when unknown (a software device). */
	int32_t numa_node;
	/* 1 when the adapter is attached near the CPUs the calling thread
	 * was bound to when fi_getinfo ran; such adapters are listed first. */
	uint32_t is_local;
	/* Port number on the adapter (1-based, as verbs counts). */
	uint32_t port_num;
	/* The network interface that carries the IP address of this info. */
	char netdev[32];
};

#ifdef __cplusplus
}
#endif

#endif /* FI_EXT_ND_H */
