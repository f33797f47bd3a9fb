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
#include <rdma/fi_endpoint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FI_ND_PROV_NAME "nd"

/* The provider-specific code of `nd`, as fi_ext.h asks every provider to
 * reserve one: 12 bits ("ND" = 0x4e44 folded to 0x4e4) shifted left by 16.
 * Provider-specific option names and values are built on it. */
#define FI_PROV_SPECIFIC_ND (0x4e4 << 16)

/* Bit 31 marks a provider-specific EQ event number. libfabric 1.x names it
 * FI_PROV_SPECIFIC; 2.0 removed the name, so it is spelled out here and the
 * value of FI_ND_CONNRESP is the same whichever libfabric an application
 * was built with. */
#define FI_ND_PROV_SPECIFIC_EVENT (1U << 31)

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

/*
 * Endpoint options (fi_setopt/fi_getopt, level FI_OPT_ENDPOINT).
 *
 * FI_OPT_ND_INBOUND_READ_LIMIT, FI_OPT_ND_OUTBOUND_READ_LIMIT (uint32_t):
 *	ND's inbound and outbound RDMA read limits: reads the peer may have in
 *	flight against this endpoint, and reads this endpoint may have in
 *	flight. Set before fi_connect/fi_accept; default the adapter's
 *	maximum; larger values are capped silently. Once the peer's answer is
 *	known (FI_ND_CONNRESP, FI_CONNECTED, or a connection request being
 *	accepted) they read back the effective values, which are what the
 *	queue pair was given.
 * FI_OPT_ND_MANUAL_COMPLETE (int, boolean): ND's explicit CompleteConnect.
 *	The connecting side gets FI_ND_CONNRESP with the accepter's private
 *	data and then calls fi_nd_complete_connect or fi_nd_reject_connect.
 *	Default 0: the provider completes by itself and reports FI_CONNECTED.
 * FI_OPT_ND_SHARED_ADDR (int, boolean): NDK's shared endpoint. Endpoints
 *	that all set it before fi_setname may bind the same local IP and port
 *	and connect to different destinations. The same local and remote
 *	address pair twice fails with -FI_EADDRINUSE.
 * FI_OPT_ND_ACCEPT_DATA_SIZE, FI_OPT_ND_REJECT_DATA_SIZE (size_t, get only):
 *	the private data an accept and a reject may carry (the connect limit
 *	is libfabric's FI_OPT_CM_DATA_SIZE). Also readable on a passive
 *	endpoint.
 */
enum {
	FI_OPT_ND_INBOUND_READ_LIMIT = -FI_PROV_SPECIFIC_ND,
	FI_OPT_ND_OUTBOUND_READ_LIMIT,
	FI_OPT_ND_MANUAL_COMPLETE,
	FI_OPT_ND_SHARED_ADDR,
	FI_OPT_ND_ACCEPT_DATA_SIZE,
	FI_OPT_ND_REJECT_DATA_SIZE,
};

/*
 * EQ event of manual completion: the accepter answered. The entry is a
 * struct fi_eq_cm_entry (fid: the endpoint; data: the accepter's private
 * data, exact length = bytes read - sizeof(struct fi_eq_cm_entry)). The
 * effective read limits are readable with fi_getopt.
 */
#define FI_ND_CONNRESP (FI_ND_PROV_SPECIFIC_EVENT | FI_PROV_SPECIFIC_ND | 1)

/* fi_control commands (on an endpoint, or on a connection request's handle). */
enum {
	FI_ND_COMPLETE_CONNECT = -FI_PROV_SPECIFIC_ND - 0x100, /* arg: NULL */
	FI_ND_REJECT_CONNECT,		/* arg: struct fi_nd_cm_data * */
	FI_ND_GET_PEER_READ_LIMITS,	/* arg: struct fi_nd_read_limits * */
	FI_ND_GET_QP_READ_LIMITS,	/* arg: struct fi_nd_read_limits * */
	FI_ND_GET_MR_CACHE_STATS,	/* on a domain; arg: struct fi_nd_mr_cache_stats * */
};

struct fi_nd_cm_data {
	const void *data;
	size_t len;
};

/* A peer's read limits, from this side's point of view (ND GetReadLimits):
 * inbound = reads the peer wants to issue to us (its outbound limit),
 * outbound = reads the peer will serve for us (its inbound limit). */
struct fi_nd_read_limits {
	uint32_t inbound;
	uint32_t outbound;
};

/*
 * What a domain's registration cache has done (fi_nd_get_mr_cache_stats).
 * -FI_ENOSYS when the domain has no cache: FI_ND_MR_CACHE_ENABLE=0, or no
 * memory monitor (fi_nd(7), "Registration cache").
 */
struct fi_nd_mr_cache_stats {
	uint64_t hits;			/* registrations served from the cache */
	uint64_t misses;		/* registrations that called the device */
	uint64_t uncached;		/* misses too large for the cache's limits */
	uint64_t evictions;		/* idle entries dropped to stay in the limits */
	uint64_t invalidations;		/* entries dropped because memory was unmapped */
	uint64_t entries;		/* entries now findable */
	uint64_t bytes;			/* bytes they cover */
	uint64_t in_use;		/* entries some open region uses */
};

static inline int fi_nd_get_mr_cache_stats(struct fid_domain *domain, struct fi_nd_mr_cache_stats *stats)
{
	return fi_control(&domain->fid, FI_ND_GET_MR_CACHE_STATS, stats);
}

/* ND CompleteConnect: after FI_ND_CONNRESP, finish the connection. The
 * endpoint then reports FI_CONNECTED. */
static inline int fi_nd_complete_connect(struct fid_ep *ep)
{
	return fi_control(&ep->fid, FI_ND_COMPLETE_CONNECT, NULL);
}

/* ND Reject on the connecting side: after FI_ND_CONNRESP, refuse the
 * accepted connection with private data; the accepter sees
 * FI_ECONNABORTED. The endpoint cannot be used again. */
static inline int fi_nd_reject_connect(struct fid_ep *ep, const void *data, size_t len)
{
	struct fi_nd_cm_data cm_data = { data, len };
	return fi_control(&ep->fid, FI_ND_REJECT_CONNECT, &cm_data);
}

/* ND GetReadLimits: the peer's offered limits, on a connection request's
 * handle (info->handle of FI_CONNREQ) before fi_accept, or on a connecting
 * endpoint after FI_ND_CONNRESP / FI_CONNECTED. */
static inline int fi_nd_peer_read_limits(struct fid *fid, struct fi_nd_read_limits *limits)
{
	return fi_control(fid, FI_ND_GET_PEER_READ_LIMITS, limits);
}

/* The read limits the endpoint's queue pair actually has, as ibv_query_qp
 * reports them (inbound: max_dest_rd_atomic, outbound: max_rd_atomic): a
 * check that what was negotiated is what the hardware enforces. */
static inline int fi_nd_qp_read_limits(struct fid_ep *ep, struct fi_nd_read_limits *limits)
{
	return fi_control(&ep->fid, FI_ND_GET_QP_READ_LIMITS, limits);
}

#ifdef __cplusplus
}
#endif

#endif /* FI_EXT_ND_H */
