/*
 * nd_params.h: the provider's runtime parameters (FI_ND_* environment
 * variables), defined with fi_param_define so that `fi_info -e` lists them.
 */
#ifndef ND_PARAMS_H
#define ND_PARAMS_H

#include <cstddef>
#include <string>

namespace nd {

struct Params {
	/* Queue depths an endpoint gets when the application names none. */
	size_t tx_size = 384;
	size_t rx_size = 384;
	/* Scatter-gather entries per work request when the application asks
	 * for no particular number: every one costs queue memory, and queue
	 * size is most of what creating a queue pair costs. */
	size_t iov_limit = 4;
	/* Upper bound for the inline send size probed on each device. */
	size_t inline_probe = 256;
	/* Comma-separated interface names (prefixes) to offer; empty: all. */
	std::string iface;
	/* Offer IPv6 addresses as well as IPv4. */
	bool ipv6 = true;
	/* Time for address resolution and for route resolution each. */
	int resolve_timeout_ms = 2000;
	/* Order devices nearest-first to the calling thread with hwloc. */
	bool topology = true;
	/* The receiver-not-ready delay a sender is told to wait before it
	 * retries, in the IB encoding (12: 0.64 ms, as libfabric's verbs
	 * provider). The kernel CM's 0 means 655 ms, which a multi-receive
	 * buffer (reposted after each message) and any receive posted late pay
	 * in full. */
	int min_rnr_timer = 12;
	/* How often a sender retries a message that found no receive posted
	 * (0..7). 7 means forever on every device, as libfabric's verbs
	 * provider sets it: ofi_rxm's flow control counts on a late receiver
	 * being waited for. A smaller value turns a receiver that never posts
	 * into an FI_ENORX completion and a broken connection. */
	int rnr_retry = 7;
	/* How often a sender retransmits a packet that was not acknowledged
	 * (0..7); -1: the device's default (transport_retry below). After the
	 * last retry the send completes with FI_ETIMEDOUT. */
	int retry_count = -1;
	/* A watch on requests that make no progress (nd_cq.h, StallWatch),
	 * where the transport never gives up on a silent peer: Soft-RoCE with
	 * retry count 7 (for ever) and iWARP (TCP retransmits for minutes).
	 * Seconds a connection's signaled requests may stand still while its
	 * CQ is read empty, plus a second per MB outstanding (a long
	 * transfer completes nothing until its end); then the connection ends
	 * as after exhausted retries. 0: never. 20 s waits out a receiver that
	 * is late by that much (nd_node_loss: the survivor must learn within
	 * 30 s), where retry count 6 gave up at 0.5 s. */
	int peer_timeout_s = 20;
	/* The local ACK timeout, 4.096 us * 2^n (0..31); -1: rdma_cm's, derived
	 * from the path's packet lifetime. */
	int ack_timeout = -1;
	/* The registration cache (nd_mr_cache.h). Its size limit defaults to
	 * what libfabric's own cache takes: physical memory / cores / 2. */
	bool mr_cache_enable = true;
	size_t mr_cache_max_size = 0;		/* 0: the default above */
	size_t mr_cache_max_count = 1024;
	/* The largest message on an endpoint with FI_TAGGED (its
	 * max_msg_size): the payload of each of nd's receive buffers there
	 * (nd_framing.h). */
	size_t tagged_msg_size = 16384;
	/* Offer ofi_rxm's flow control (nd_flow_ctrl.h). */
	bool flow_ctrl = true;
};

/* Physical memory / online cores / 2 (libfabric's FI_MR_CACHE_MAX_SIZE default). */
size_t default_mr_cache_max_size() noexcept;

/* Registers every FI_ND_* parameter with libfabric (once, at fi_prov_ini). */
void define_params() noexcept;

/* Reads the parameters as they are now; unset ones keep their defaults. */
Params read_params();

/*
 * The transport retry a domain's queue pairs get: what the application set
 * (FI_ND_RETRY_COUNT, FI_ND_ACK_TIMEOUT), else the device's defaults.
 *
 * Hardware: retry count 6 and rdma_cm's ACK timeout (from the path; 19,
 * 2.1 s, on RoCE). A peer gone silent is reported after 7 timeouts; a short
 * timeout would turn a fabric reroute into broken connections, and these
 * fabrics rarely drop.
 *
 * Soft-RoCE: ACK timeout 14 (67 ms) and retry count 7. Soft-RoCE runs over
 * plain Ethernet, which drops packets, and recovers the loss of a message's
 * last packet only when this timeout fires, so rdma_cm's 19 (2.1 s) stalls
 * a lossy link's bandwidth (docs/cross-node.md has the figures). Its
 * retransmit timer also runs while a sender waits out receiver-not-ready
 * NAKs, so any count below 7 (which it treats as "forever") ends a
 * connection whose receiver is late by 7 timeouts (docs/cross-node.md):
 * the default keeps ofi_rxm's late receivers waited for, and
 * FI_ND_RETRY_COUNT=6 trades that for a dead peer reported in 0.5 s.
 */
struct TransportRetry {
	int retry_count;
	int ack_timeout;	/* -1: rdma_cm's */
};
TransportRetry transport_retry(const Params &params, bool soft_roce) noexcept;

/* `value` of the parameter `name` when it lies in [lo, hi]; otherwise a
 * warning naming the range, and `fallback`. */
int param_in_range(const char *name, long long value, int lo, int hi, int fallback);

/* True when `name` is allowed by a comma-separated list of prefixes
 * (an empty list allows everything). Pure; unit-tested. */
bool iface_allowed(const std::string &list, const char *name);

} // namespace nd

#endif /* ND_PARAMS_H */
