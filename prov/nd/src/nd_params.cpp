/* nd_params.cpp: FI_ND_* runtime parameters. */
#include "nd_params.h"
#include "nd.h"

#include <cstring>
#include <unistd.h>

namespace nd {

namespace {

/* Each FI_ND_* variable, as `fi_info -e` and fi_nd(7) show it. */
struct ParamDefinition {
	const char *name;
	fi_param_type type;
	const char *help;
};

constexpr ParamDefinition kParamDefinitions[] = {
	{"tx_size", FI_PARAM_SIZE_T,
	 "Transmit queue depth of an endpoint when the application gives none "
	 "(default 384, capped by the device)."},
	{"rx_size", FI_PARAM_SIZE_T,
	 "Receive queue depth of an endpoint when the application gives none "
	 "(default 384, capped by the device)."},
	{"iov_limit", FI_PARAM_SIZE_T,
	 "Scatter-gather entries per operation when the application gives no "
	 "iov_limit (default 4, capped by the device's max_sge)."},
	{"inline_probe", FI_PARAM_SIZE_T,
	 "Largest inline send size to probe on each device; the probed value "
	 "becomes inject_size (default 256)."},
	{"iface", FI_PARAM_STRING,
	 "Comma-separated network interface names or prefixes whose addresses "
	 "the provider offers (default: all interfaces with an RDMA device)."},
	{"ipv6", FI_PARAM_BOOL,
	 "Offer IPv6 addresses as well as IPv4 (default yes)."},
	{"resolve_timeout_ms", FI_PARAM_INT,
	 "Time fi_connect allows address and route resolution each, in "
	 "milliseconds, before the attempt fails with FI_ETIMEDOUT or "
	 "FI_EHOSTUNREACH (default 2000)."},
	{"min_rnr_timer", FI_PARAM_INT,
	 "How long a sender waits before retrying a message that found no "
	 "receive posted, in the IB encoding 1..31 (12: 0.64 ms, the default; "
	 "0: 655 ms)."},
	{"rnr_retry", FI_PARAM_INT,
	 "How often a sender retries a message that found no receive posted, "
	 "0..7 (default 7: forever, as ofi_rxm's flow control expects). With "
	 "less, such a send completes with FI_ENORX and the connection breaks."},
	{"retry_count", FI_PARAM_INT,
	 "How often a sender retransmits a packet the peer did not acknowledge, "
	 "0..7 (default 6; 7 on Soft-RoCE, which treats 7 as forever). Then the "
	 "send completes with FI_ETIMEDOUT and the connection breaks."},
	{"peer_timeout", FI_PARAM_INT,
	 "Where the transport itself never gives up on a silent peer (Soft-RoCE "
	 "with retry count 7, iWARP's TCP for minutes): seconds a connection's "
	 "signaled requests may make no progress while its CQ is read empty "
	 "before nd ends the connection (FI_ETIMEDOUT, FI_SHUTDOWN), plus 1 s "
	 "per MB outstanding, and 30 times as long while the device receives "
	 "not-ready NAKs; 1..3600, 0: wait for ever (default 20)."},
	{"ack_timeout", FI_PARAM_INT,
	 "Local ACK timeout exponent: a packet is retransmitted after "
	 "4.096 us * 2^n without acknowledgement, 0..31 (default: rdma_cm's, "
	 "from the path; on RoCE 2^(packet lifetime + 1); 14 on Soft-RoCE)."},
	{"mr_cache_enable", FI_PARAM_BOOL,
	 "Keep memory registrations for reuse, watching unmapped memory with "
	 "UCX's libucm (default yes; off where libucm cannot be loaded)."},
	{"mr_cache_max_size", FI_PARAM_SIZE_T,
	 "Bytes of registered memory a domain's cache may keep (default: "
	 "physical memory / cores / 2)."},
	{"mr_cache_max_count", FI_PARAM_SIZE_T,
	 "Registrations a domain's cache may keep (default 1024; 0 turns "
	 "caching off)."},
	{"flow_ctrl", FI_PARAM_BOOL,
	 "Offer ofi_rxm the credit-based flow control the verbs provider "
	 "offers it, so that a message the peer has posted no receive for waits "
	 "in rxm rather than in the adapter's receiver-not-ready retry (default "
	 "yes; libfabric 1.x only, whose rxm marks its credit messages with "
	 "FI_PRIORITY)."},
	{"tagged_msg_size", FI_PARAM_SIZE_T,
	 "The largest message on an endpoint opened with FI_TAGGED, and the "
	 "size of each of the (at most 64) receive buffers nd keeps posted "
	 "there (default 16384)."},
	{"topology", FI_PARAM_BOOL,
	 "Order devices nearest-first to the calling thread's CPUs using hwloc "
	 "(default yes)."},
};

} // namespace

void define_params() noexcept
{
	for (const ParamDefinition &param : kParamDefinitions)
		fi_param_define(&nd_prov, param.name, param.type, param.help);
}

Params read_params()
{
	Params p;
	size_t size_value;
	if (fi_param_get_size_t(&nd_prov, "tx_size", &size_value) == 0 && size_value)
		p.tx_size = size_value;
	if (fi_param_get_size_t(&nd_prov, "rx_size", &size_value) == 0 && size_value)
		p.rx_size = size_value;
	if (fi_param_get_size_t(&nd_prov, "iov_limit", &size_value) == 0 && size_value)
		p.iov_limit = size_value;
	if (fi_param_get_size_t(&nd_prov, "inline_probe", &size_value) == 0)
		p.inline_probe = size_value;
	char *str_value = nullptr;
	if (fi_param_get_str(&nd_prov, "iface", &str_value) == 0 && str_value)
		p.iface = str_value;
	int int_value;
	if (fi_param_get_int(&nd_prov, "resolve_timeout_ms", &int_value) == 0 && int_value > 0)
		p.resolve_timeout_ms = int_value;
	if (fi_param_get_int(&nd_prov, "min_rnr_timer", &int_value) == 0)
		p.min_rnr_timer = param_in_range("FI_ND_MIN_RNR_TIMER", int_value, 0, 31, p.min_rnr_timer);
	if (fi_param_get_int(&nd_prov, "rnr_retry", &int_value) == 0)
		p.rnr_retry = param_in_range("FI_ND_RNR_RETRY", int_value, 0, 7, p.rnr_retry);
	if (fi_param_get_int(&nd_prov, "retry_count", &int_value) == 0)
		p.retry_count = param_in_range("FI_ND_RETRY_COUNT", int_value, 0, 7, p.retry_count);
	if (fi_param_get_int(&nd_prov, "peer_timeout", &int_value) == 0)
		p.peer_timeout_s = param_in_range("FI_ND_PEER_TIMEOUT", int_value, 0, 3600, p.peer_timeout_s);
	if (fi_param_get_int(&nd_prov, "ack_timeout", &int_value) == 0)
		p.ack_timeout = param_in_range("FI_ND_ACK_TIMEOUT", int_value, 0, 31, p.ack_timeout);
	if (fi_param_get_size_t(&nd_prov, "mr_cache_max_size", &size_value) == 0)
		p.mr_cache_max_size = size_value;
	if (fi_param_get_size_t(&nd_prov, "mr_cache_max_count", &size_value) == 0)
		p.mr_cache_max_count = size_value;
	if (fi_param_get_size_t(&nd_prov, "tagged_msg_size", &size_value) == 0 && size_value &&
	    size_value <= (size_t{1} << 30))
		p.tagged_msg_size = size_value;
	int bool_value;
	if (fi_param_get_bool(&nd_prov, "mr_cache_enable", &bool_value) == 0)
		p.mr_cache_enable = bool_value != 0;
	if (fi_param_get_bool(&nd_prov, "flow_ctrl", &bool_value) == 0)
		p.flow_ctrl = bool_value != 0;
	if (fi_param_get_bool(&nd_prov, "ipv6", &bool_value) == 0)
		p.ipv6 = bool_value != 0;
	if (fi_param_get_bool(&nd_prov, "topology", &bool_value) == 0)
		p.topology = bool_value != 0;
	return p;
}

int param_in_range(const char *name, long long value, int lo, int hi, int fallback)
{
	if (value >= lo && value <= hi)
		return static_cast<int>(value);
	ND_WARN(FI_LOG_CORE, "%s=%lld is outside %d..%d; using the default (%d)\n", name, value, lo,
		hi, fallback);
	return fallback;
}

namespace {
/* 4.096 us * 2^14 = 67 ms: see transport_retry in nd_params.h. */
constexpr int kSoftRoceAckTimeout = 14;
} // namespace

TransportRetry transport_retry(const Params &params, bool soft_roce) noexcept
{
	TransportRetry t;
	t.retry_count = params.retry_count >= 0 ? params.retry_count : soft_roce ? 7 : 6;
	t.ack_timeout = params.ack_timeout >= 0 ? params.ack_timeout : soft_roce ? kSoftRoceAckTimeout : -1;
	return t;
}

size_t default_mr_cache_max_size() noexcept
{
	const long pages = sysconf(_SC_PHYS_PAGES);
	const long page_size = sysconf(_SC_PAGESIZE);
	const long cores = sysconf(_SC_NPROCESSORS_ONLN);
	if (pages <= 0 || page_size <= 0 || cores <= 0)
		return size_t{1} << 30;
	return static_cast<size_t>(pages) * static_cast<size_t>(page_size) / static_cast<size_t>(cores) / 2;
}

bool iface_allowed(const std::string &list, const char *name)
{
	if (list.empty())
		return true;
	size_t start = 0;
	while (start <= list.size()) {
		size_t end = list.find(',', start);
		if (end == std::string::npos)
			end = list.size();
		std::string prefix = list.substr(start, end - start);
		if (!prefix.empty() && std::strncmp(name, prefix.c_str(), prefix.size()) == 0)
			return true;
		start = end + 1;
	}
	return false;
}

} // namespace nd
