/* nd_info.cpp: fi_info construction and hint matching (pure logic). */
#include "nd_info.h"
#include "nd.h"
#include "nd_cm_data.h"
#include "nd_nic.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace nd {

namespace {

std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char *fmt, ...)
{
	char text[256];
	va_list args;
	va_start(args, fmt);
	vsnprintf(text, sizeof(text), fmt, args);
	va_end(args);
	return text;
}

/* The default depth of a queue: the FI_ND_* default, capped by the device. */
size_t default_depth(size_t param, uint32_t device_max)
{
	return std::min<size_t>(param, device_max);
}

int family_of_format(uint32_t addr_format)
{
	switch (addr_format) {
	case FI_SOCKADDR_IN: return AF_INET;
	case FI_SOCKADDR_IN6: return AF_INET6;
	default: return AF_UNSPEC;
	}
}

bool format_supported(uint32_t addr_format)
{
	return addr_format == FI_FORMAT_UNSPEC || addr_format == FI_SOCKADDR ||
	       addr_format == FI_SOCKADDR_IN || addr_format == FI_SOCKADDR_IN6;
}

/* Reads a hint address: its length must fit its family and the format. */
int hint_address(const char *which, const void *addr, size_t len, uint32_t addr_format,
		 SockAddr *out)
{
	int ret = sockaddr_copy(addr, len, out);
	if (ret) {
		ND_INFO(FI_LOG_CORE, "hints->%s: not an AF_INET/AF_INET6 address of %zu bytes\n",
			which, len);
		return -FI_EINVAL;
	}
	if (!format_matches(addr_format, *out)) {
		ND_INFO(FI_LOG_CORE, "hints->%s: family %d does not match addr_format %u\n", which,
			out->family(), addr_format);
		return -FI_EINVAL;
	}
	return 0;
}

std::string check_tx(const fi_tx_attr *tx, const Adapter &a)
{
	const DeviceLimits &l = a.limits;
	if (tx->caps & ~kCaps)
		return format("tx_attr->caps 0x%llx not supported",
			      static_cast<unsigned long long>(tx->caps & ~kCaps));
	if (tx->size > l.max_qp_wr)
		return format("tx_attr->size %zu > device max_qp_wr %u", tx->size, l.max_qp_wr);
	if (tx->iov_limit > l.max_sge)
		return format("tx_attr->iov_limit %zu > device max_sge %u", tx->iov_limit, l.max_sge);
	if (tx->rma_iov_limit > 1)
		return format("tx_attr->rma_iov_limit %zu > 1", tx->rma_iov_limit);
	if (tx->inject_size > l.max_inline)
		return format("tx_attr->inject_size %zu > probed inline limit %u", tx->inject_size,
			      l.max_inline);
	if (tx->msg_order & ~kMsgOrder)
		return "tx_attr->msg_order asks for an order an RC queue pair does not give";
	if (tx->comp_order & ~kCompOrder)
		return "tx_attr->comp_order not supported";
	if (tx->op_flags & ~kTxOpFlags)
		return format("tx_attr->op_flags 0x%llx not supported",
			      static_cast<unsigned long long>(tx->op_flags & ~kTxOpFlags));
	return {};
}

std::string check_rx(const fi_rx_attr *rx, const Adapter &a)
{
	const DeviceLimits &l = a.limits;
	if (rx->caps & ~kCaps)
		return format("rx_attr->caps 0x%llx not supported",
			      static_cast<unsigned long long>(rx->caps & ~kCaps));
	if (rx->size > l.max_qp_wr)
		return format("rx_attr->size %zu > device max_qp_wr %u", rx->size, l.max_qp_wr);
	if (rx->iov_limit > l.max_sge)
		return format("rx_attr->iov_limit %zu > device max_sge %u", rx->iov_limit, l.max_sge);
	if (rx->msg_order & ~kMsgOrder)
		return "rx_attr->msg_order asks for an order an RC queue pair does not give";
	if (rx->comp_order & ~kCompOrder)
		return "rx_attr->comp_order not supported";
	if (rx->op_flags & ~kRxOpFlags)
		return format("rx_attr->op_flags 0x%llx not supported",
			      static_cast<unsigned long long>(rx->op_flags & ~kRxOpFlags));
	return {};
}

std::string check_ep(const fi_ep_attr *ep, const Adapter &a)
{
	const int type = api::enum_value(ep->type);
	if (type != FI_EP_UNSPEC && type != FI_EP_MSG)
		return format("ep_attr->type %s not supported (FI_EP_MSG only)",
			      fi_tostr(&ep->type, FI_TYPE_EP_TYPE));
	uint32_t protocol = a.iwarp ? FI_PROTO_IWARP : FI_PROTO_RDMA_CM_IB_RC;
	if (ep->protocol != FI_PROTO_UNSPEC && ep->protocol != protocol)
		return format("ep_attr->protocol %u not the adapter's %u", ep->protocol, protocol);
	if (ep->max_msg_size > a.max_msg_sz)
		return format("ep_attr->max_msg_size %zu > port max_msg_sz %u", ep->max_msg_size,
			      a.max_msg_sz);
	if ((ep->tx_ctx_cnt > 1 && ep->tx_ctx_cnt != FI_SHARED_CONTEXT) ||
	    (ep->rx_ctx_cnt > 1 && ep->rx_ctx_cnt != FI_SHARED_CONTEXT))
		return "ep_attr: more than one transmit/receive context per endpoint not supported";
	if (ep->auth_key_size || ep->auth_key)
		return "ep_attr->auth_key not supported";
	if (ep->max_order_raw_size > a.max_msg_sz || ep->max_order_war_size > a.max_msg_sz ||
	    ep->max_order_waw_size > a.max_msg_sz)
		return "ep_attr->max_order_*_size larger than the port's max_msg_sz";
	return {};
}

/* iWARP has no receiver-not-ready retry; nd's receive credits keep
 * FI_RM_ENABLED there, but only on a receive queue of the endpoint's own
 * without multi-receive buffers (nd_credits.h). */
bool credits_possible(const fi_info *hints)
{
	if (!hints)
		return true;
	const bool shared_rx = hints->ep_attr && hints->ep_attr->rx_ctx_cnt == FI_SHARED_CONTEXT;
	const bool multi_recv = (hints->caps & FI_MULTI_RECV) ||
				(hints->rx_attr && (hints->rx_attr->op_flags & FI_MULTI_RECV));
	return !shared_rx && !multi_recv;
}

/* Remote CQ data rides as immediate data; iWARP has none, and there nd
 * writes it into the peer's slot for the receive (nd_credits.h), which
 * takes the receive credits: none where they cannot be kept. */
size_t cq_data_size(const Adapter &a, const fi_info *hints)
{
	if (!a.iwarp)
		return kCqDataSize;
	const bool rm_disabled = hints && hints->domain_attr &&
				 api::enum_value(hints->domain_attr->resource_mgmt) == FI_RM_DISABLED;
	return credits_possible(hints) && !rm_disabled ? kCqDataSize : 0;
}

std::string check_progress(const char *which, const fi_progress &field, bool manual_only)
{
	const int asked = api::enum_value(field);
	if (asked == FI_PROGRESS_UNSPEC || asked == FI_PROGRESS_MANUAL)
		return {};
	if (asked == FI_PROGRESS_AUTO && !manual_only)
		return {};
	return format("domain_attr->%s %s not supported", which,
		      fi_tostr(&field, FI_TYPE_PROGRESS));
}

std::string check_domain(uint32_t version, const fi_info *hints, const Adapter &a)
{
	const fi_domain_attr *d = hints->domain_attr;
	const DeviceLimits &l = a.limits;
	if (d->name && a.name != d->name)
		return format("domain name '%s' is not '%s'", d->name, a.name.c_str());
	switch (api::enum_value(d->threading)) {
	case FI_THREAD_UNSPEC: case FI_THREAD_SAFE: case FI_THREAD_FID:
	case FI_THREAD_DOMAIN: case FI_THREAD_COMPLETION: case FI_THREAD_ENDPOINT:
		break;
	default:
		return format("domain_attr->threading %d not supported", api::enum_value(d->threading));
	}
	/* Connection events progress when the application reads its EQ. */
	std::string why = check_progress("control_progress", d->control_progress, true);
	if (!why.empty())
		return why;
	/* The adapter moves data by itself; polling as well is harmless. */
	why = check_progress("data_progress", d->data_progress, false);
	if (!why.empty())
		return why;
	if (d->caps & ~kDomainCaps)
		return "domain_attr->caps not supported";
	if (a.iwarp && api::enum_value(d->resource_mgmt) == FI_RM_ENABLED && !credits_possible(hints))
		return "domain_attr->resource_mgmt FI_RM_ENABLED on iWARP with a shared receive context "
		       "or FI_MULTI_RECV: iWARP has no receiver-not-ready retry, and nd's receive "
		       "credits need a receive queue of the endpoint's own without multi-receive buffers";
	if (d->cq_data_size > cq_data_size(a, hints))
		return format("domain_attr->cq_data_size %zu > %zu%s", d->cq_data_size, cq_data_size(a, hints),
			      a.iwarp ? " (iWARP has no immediate data; nd carries remote CQ data in its receive "
					"credits, which FI_RM_DISABLED, a shared receive context and FI_MULTI_RECV "
					"rule out)"
				      : "");
	if (d->mr_key_size > kMrKeySize)
		return format("domain_attr->mr_key_size %zu > %zu", d->mr_key_size, kMrKeySize);
	if (d->cq_cnt > l.max_cq || d->ep_cnt > l.max_qp || d->tx_ctx_cnt > l.max_qp ||
	    d->rx_ctx_cnt > l.max_qp || d->mr_cnt > l.max_mr)
		return "domain_attr object counts exceed the device's";
	if (d->max_ep_tx_ctx > 1 || d->max_ep_rx_ctx > 1 || d->max_ep_stx_ctx > 1 ||
	    d->max_ep_srx_ctx > 1)
		return "domain_attr: more than one context of a kind per endpoint not supported";
	if (d->cntr_cnt > l.max_qp)
		return format("domain_attr->cntr_cnt %zu > %u", d->cntr_cnt, l.max_qp);
	if (d->mr_iov_limit > 1)
		return format("domain_attr->mr_iov_limit %zu > 1", d->mr_iov_limit);
	if (d->auth_key_size || d->auth_key)
		return "domain_attr->auth_key not supported";
	if (negotiate_mr_mode(version, hints) < 0)
		return "the application does not support the registration the device needs "
		       "(mr_mode FI_MR_LOCAL|FI_MR_VIRT_ADDR|FI_MR_ALLOCATED|FI_MR_PROV_KEY, or FI_MR_BASIC)";
	return {};
}

char *dup_or_throw(const std::string &text)
{
	char *copy = strdup(text.c_str());
	if (!copy)
		throw std::bad_alloc();
	return copy;
}

} // namespace

int address_request(const char *node, const char *service, uint64_t flags,
		    const fi_info *hints, AddressRequest *out)
{
	AddressRequest request;
	uint32_t addr_format = hints ? hints->addr_format : static_cast<uint32_t>(FI_FORMAT_UNSPEC);
	if (!format_supported(addr_format)) {
		ND_INFO(FI_LOG_CORE, "addr_format %u not supported (FI_SOCKADDR, _IN, _IN6 only)\n",
			addr_format);
		return -FI_ENODATA;
	}
	request.family = family_of_format(addr_format);

	if (node || service) {
		bool source = (flags & FI_SOURCE) || !node;
		SockAddr resolved;
		int ret = resolve(node, service, source, flags & FI_NUMERICHOST, request.family,
				  &resolved);
		if (ret)
			return ret;
		if (source) {
			request.has_src = true;
			request.src = resolved;
		} else {
			request.has_dest = true;
			request.dest = resolved;
		}
	}
	if (hints && hints->src_addr) {
		int ret = hint_address("src_addr", hints->src_addr, hints->src_addrlen, addr_format,
				       &request.src);
		if (ret)
			return ret;
		request.has_src = true;
	}
	if (hints && hints->dest_addr) {
		int ret = hint_address("dest_addr", hints->dest_addr, hints->dest_addrlen,
				       addr_format, &request.dest);
		if (ret)
			return ret;
		request.has_dest = true;
	}
	if (request.has_src && request.has_dest && request.src.family() != request.dest.family()) {
		ND_INFO(FI_LOG_CORE, "source %s and destination %s are of different families\n",
			request.src.to_string().c_str(), request.dest.to_string().c_str());
		return -FI_EINVAL;
	}
	/* An address narrows the family as an address format does. */
	if (request.family == AF_UNSPEC && request.has_src && !request.src.is_any())
		request.family = request.src.family();
	if (request.family == AF_UNSPEC && request.has_dest)
		request.family = request.dest.family();
	*out = request;
	return 0;
}

bool address_matches(const AddressRequest &request, const PortAddress &address) noexcept
{
	if (request.family != AF_UNSPEC && address.addr.family() != request.family)
		return false;
	if (request.has_src && !request.src.is_any() && !request.src.same_ip(address.addr))
		return false;
	return true;
}

std::string fabric_name(const PortAddress &address)
{
	return network_prefix(address.addr, address.prefix_len);
}

int negotiate_mr_mode(uint32_t version, const fi_info *hints) noexcept
{
	const bool old_api = FI_VERSION_LT(version, FI_VERSION(1, 5));
	if (!hints || !hints->domain_attr)
		return old_api ? api::kMrBasic : kMrMode;
	int user = hints->domain_attr->mr_mode;
	/* Local registration: FI_MR_LOCAL, or the older FI_LOCAL_MR mode bit,
	 * which libfabric 2.0 removed (the bit means nothing to a 2.x API). */
	const bool mode_bit_local = FI_VERSION_LT(version, FI_VERSION(2, 0)) &&
				    (hints->mode & api::kModeLocalMr);
	bool local_ok = (user & FI_MR_LOCAL) || mode_bit_local;
	if (old_api) {
		/* mr_mode was an enum: UNSPEC or BASIC are what we can do. */
		if (user != api::kMrUnspec && user != api::kMrBasic)
			return -1;
		return (hints->mode & api::kModeLocalMr) ? api::kMrBasic : -1;
	}
	if (user & api::kMrScalable)
		return -1;
	if (user & api::kMrBasic) {
		/* FI_MR_BASIC alone stands for VIRT_ADDR|ALLOCATED|PROV_KEY. */
		if ((user & ~(api::kMrBasic | FI_MR_LOCAL)) || !local_ok)
			return -1;
		return user;
	}
	if (!local_ok)
		return -1;
	int need = kMrMode & ~FI_MR_LOCAL;
	if ((user & need) != need) {
		/* Keys and virtual addresses matter only to a peer that reaches
		 * the memory: an application that asks for no RMA need not offer
		 * them, and gets messages only (build_info drops the RMA caps),
		 * as libfabric's own ofi_cap_mr_mode reasons. */
		if ((hints->caps & kRmaCaps) || !(user & FI_MR_ALLOCATED))
			return -1;
		need = FI_MR_ALLOCATED;
	}
	/* The reported mode never holds a bit the application did not offer
	 * (fi_getinfo(3)): local registration asked through the mode bit is
	 * reported through the mode bit (build_info). */
	return (user & FI_MR_LOCAL) ? (need | FI_MR_LOCAL) : need;
}

std::string api_refusal(uint32_t version)
{
	if (!FI_VERSION_LT(ND_API_VERSION, version))
		return {};
	return format("API %u.%u asked for; this nd was built against libfabric %u.%u headers "
		      "(rebuild it against the libfabric that loads it)",
		      FI_MAJOR(version), FI_MINOR(version), FI_MAJOR(ND_API_VERSION),
		      FI_MINOR(ND_API_VERSION));
}

std::string hints_mismatch(uint32_t version, const fi_info *hints, const Adapter &a,
			   const PortAddress &address, const Params &params)
{
	if (!hints)
		return {};
	if (hints->caps & ~kCaps)
		return format("caps 0x%llx not supported",
			      static_cast<unsigned long long>(hints->caps & ~kCaps));
	if (hints->fabric_attr && hints->fabric_attr->name &&
	    fabric_name(address) != hints->fabric_attr->name)
		return format("fabric name '%s' is not '%s'", hints->fabric_attr->name,
			      fabric_name(address).c_str());
	if (hints->nic && hints->nic->device_attr && hints->nic->device_attr->name &&
	    a.name != hints->nic->device_attr->name)
		return format("nic name '%s' is not '%s'", hints->nic->device_attr->name,
			      a.name.c_str());
	if ((hints->caps & FI_ATOMIC) && !a.limits.atomics)
		return a.iwarp ? "FI_ATOMIC: iWARP has no atomics"
			       : "FI_ATOMIC: the device has no atomics (atomic_cap is IBV_ATOMIC_NONE)";
	std::string why;
	if (hints->caps & FI_TAGGED) {
		/* A framed endpoint (nd_framing.h) owns its receive queue. */
		if ((hints->caps & FI_MULTI_RECV) || (hints->rx_attr && (hints->rx_attr->op_flags & FI_MULTI_RECV)))
			return "FI_TAGGED with FI_MULTI_RECV not supported";
		if (hints->ep_attr && hints->ep_attr->rx_ctx_cnt == FI_SHARED_CONTEXT)
			return "FI_TAGGED with a shared receive context not supported";
		if (hints->ep_attr && hints->ep_attr->max_msg_size > params.tagged_msg_size)
			return format("ep_attr->max_msg_size %zu > FI_ND_TAGGED_MSG_SIZE %zu (FI_TAGGED)",
				      hints->ep_attr->max_msg_size, params.tagged_msg_size);
		if (hints->tx_attr && hints->tx_attr->inject_size + kFrameHeaderSize > a.limits.max_inline)
			return format("tx_attr->inject_size %zu > %zu with FI_TAGGED (a header rides inline)",
				      hints->tx_attr->inject_size,
				      a.limits.max_inline > kFrameHeaderSize ? a.limits.max_inline - kFrameHeaderSize : 0);
		if (hints->tx_attr && hints->tx_attr->iov_limit >= a.limits.max_sge)
			return format("tx_attr->iov_limit %zu > %u with FI_TAGGED (a header takes one entry)",
				      hints->tx_attr->iov_limit, a.limits.max_sge - 1);
	}
	if (hints->ep_attr && !(why = check_ep(hints->ep_attr, a)).empty())
		return why;
	if (hints->domain_attr && !(why = check_domain(version, hints, a)).empty())
		return why;
	if (hints->tx_attr && !(why = check_tx(hints->tx_attr, a)).empty())
		return why;
	if (hints->rx_attr && !(why = check_rx(hints->rx_attr, a)).empty())
		return why;
	if (FI_VERSION_LT(version, FI_VERSION(1, 5)) && !(hints->mode & api::kModeLocalMr))
		return "API before 1.5 without the FI_LOCAL_MR mode bit the device needs";
	return {};
}

fi_info *build_info(uint32_t version, const fi_info *hints, const Adapter &a,
		    const PortAddress &address, const AddressRequest &request,
		    const Params &params)
{
	UniqueInfo info(fi_allocinfo());
	if (!info)
		throw std::bad_alloc();
	const DeviceLimits &l = a.limits;
	const CmDataLimits cm = user_cm_limits(a);
	const bool old_api = FI_VERSION_LT(version, FI_VERSION(1, 5));
	const uint64_t comp_order = api::is_v2(version) ? 0 : kCompOrder;

	/* Remote CQ data arrives as immediate data, which consumes a posted
	 * receive: only offered to applications that accept FI_RX_CQ_DATA. */
	const bool rx_cq_data = !hints || (hints->mode & FI_RX_CQ_DATA) ||
				(hints->rx_attr && (hints->rx_attr->mode & FI_RX_CQ_DATA));
	uint64_t mode = rx_cq_data ? FI_RX_CQ_DATA : 0;
	if (old_api)
		mode |= api::kModeLocalMr;
	const int mr_mode = negotiate_mr_mode(version, hints);
	if (!old_api && mr_mode >= 0 && !(mr_mode & FI_MR_LOCAL))
		mode |= api::kModeLocalMr;
	uint64_t caps = kCaps & ~kAskedCaps;
	if (hints && hints->caps)
		caps = (hints->caps & kPrimaryCaps ? hints->caps & kPrimaryCaps : kPrimaryCaps) |
		       (hints->caps & kSecondaryCaps ? hints->caps & kSecondaryCaps : kSecondaryCaps) |
		       (hints->caps & kAskedCaps);
	if (hints && hints->rx_attr && (hints->rx_attr->op_flags & FI_MULTI_RECV))
		caps |= FI_MULTI_RECV;

	if (mr_mode >= 0 && !old_api && !(mr_mode & (FI_MR_VIRT_ADDR | api::kMrBasic)))
		caps &= ~kRmaCaps; /* messages only: see negotiate_mr_mode */
	if (!a.limits.atomics)
		caps &= ~FI_ATOMIC;
	info->caps = caps;
	info->mode = mode;
	info->addr_format = format_of(address.addr);

	SockAddr src = address.addr;
	src.set_port(request.has_src ? request.src.port() : 0);
	info->src_addr = malloc_copy(src);
	info->src_addrlen = src.length();
	if (request.has_dest) {
		info->dest_addr = malloc_copy(request.dest);
		info->dest_addrlen = request.dest.length();
	}

	/* The fenced orders only where the hints ask (kFencedOrder). */
	const uint64_t asked_order = (hints && hints->tx_attr ? hints->tx_attr->msg_order : 0) |
				     (hints && hints->rx_attr ? hints->rx_attr->msg_order : 0);
	const uint64_t msg_order = (kMsgOrder & ~kFencedOrder) | (asked_order & kFencedOrder);
	fi_tx_attr *tx = info->tx_attr;
	/* A context reports the capabilities of its own direction only
	 * (fi_endpoint(3)), each a subset of the endpoint's. */
	tx->caps = caps & kTxCaps;
	tx->mode = mode;
	tx->op_flags = hints && hints->tx_attr ? hints->tx_attr->op_flags : 0;
	tx->msg_order = msg_order;
	tx->comp_order = comp_order;
	tx->inject_size = l.max_inline;
	tx->size = hints && hints->tx_attr && hints->tx_attr->size
			   ? hints->tx_attr->size
			   : default_depth(params.tx_size, l.max_qp_wr);
	tx->iov_limit = hints && hints->tx_attr && hints->tx_attr->iov_limit
				? hints->tx_attr->iov_limit
				: default_depth(params.iov_limit, l.max_sge);
	tx->rma_iov_limit = 1;
	const bool framed = caps & FI_TAGGED;
	if (framed) {
		/* A framed message's header rides in front (nd_framing.h). */
		const uint32_t room = l.max_inline > kFrameHeaderSize ? l.max_inline - kFrameHeaderSize : 0;
		tx->inject_size = room;
		if (!(hints && hints->tx_attr && hints->tx_attr->iov_limit))
			tx->iov_limit = std::min<size_t>(tx->iov_limit, l.max_sge > 1 ? l.max_sge - 1 : 1);
	}

	fi_rx_attr *rx = info->rx_attr;
	rx->caps = caps & kRxCaps;
	rx->mode = mode;
	rx->op_flags = hints && hints->rx_attr ? hints->rx_attr->op_flags : 0;
	rx->msg_order = msg_order;
	rx->comp_order = comp_order;
	rx->total_buffered_recv = 0;
	rx->size = hints && hints->rx_attr && hints->rx_attr->size
			   ? hints->rx_attr->size
			   : default_depth(params.rx_size, l.max_qp_wr);
	rx->iov_limit = hints && hints->rx_attr && hints->rx_attr->iov_limit
				? hints->rx_attr->iov_limit
				: default_depth(params.iov_limit, l.max_sge);

	fi_ep_attr *ep = info->ep_attr;
	ep->type = FI_EP_MSG;
	ep->protocol = a.iwarp ? FI_PROTO_IWARP : FI_PROTO_RDMA_CM_IB_RC;
	ep->protocol_version = 1;
	ep->max_msg_size = a.max_msg_sz;
	ep->msg_prefix_size = 0;
	ep->max_order_raw_size = a.max_msg_sz;
	ep->max_order_war_size = a.max_msg_sz;
	ep->max_order_waw_size = a.max_msg_sz;
	if (framed)
		ep->max_msg_size = std::min<size_t>(a.max_msg_sz, params.tagged_msg_size);
	/* Shared transmit and receive contexts (fi_stx_context, fi_srx_context)
	 * when the hints ask for them. */
	ep->tx_ctx_cnt = hints && hints->ep_attr && hints->ep_attr->tx_ctx_cnt == FI_SHARED_CONTEXT
				 ? FI_SHARED_CONTEXT
				 : 1;
	ep->rx_ctx_cnt = hints && hints->ep_attr && hints->ep_attr->rx_ctx_cnt == FI_SHARED_CONTEXT
				 ? FI_SHARED_CONTEXT
				 : 1;

	fi_domain_attr *d = info->domain_attr;
	d->name = dup_or_throw(a.name);
	/* The hints' values passed hints_mismatch: enumerators, safe to load. */
	const int threading = hints && hints->domain_attr ? api::enum_value(hints->domain_attr->threading)
							  : FI_THREAD_UNSPEC;
	d->threading = threading == FI_THREAD_UNSPEC ? FI_THREAD_SAFE : static_cast<fi_threading>(threading);
	d->control_progress = FI_PROGRESS_MANUAL;
	const int data = hints && hints->domain_attr ? api::enum_value(hints->domain_attr->data_progress)
						     : FI_PROGRESS_UNSPEC;
	d->data_progress = data == FI_PROGRESS_UNSPEC ? FI_PROGRESS_AUTO : static_cast<fi_progress>(data);
	/* nd always manages its resources (fi_domain(3) FI_RM_ENABLED): a full
	 * send queue is -FI_EAGAIN, every CQ has room reserved at fi_enable for
	 * every request its endpoints may have outstanding, and a message that
	 * finds no receive posted waits at the sender (infinite RNR retries)
	 * instead of failing. An application that asks for FI_RM_DISABLED gets
	 * what it asked for, which only allows less. iWARP has no RNR retry:
	 * there nd keeps receive credits instead (nd_credits.h), where it can. */
	d->resource_mgmt = (a.iwarp && !credits_possible(hints)) ||
					   (hints && hints->domain_attr &&
					    api::enum_value(hints->domain_attr->resource_mgmt) == FI_RM_DISABLED)
				   ? FI_RM_DISABLED
				   : FI_RM_ENABLED;
	d->av_type = FI_AV_UNSPEC;
	d->mr_mode = mr_mode;
	d->mr_key_size = kMrKeySize;
	d->cq_data_size = rx_cq_data ? cq_data_size(a, hints) : 0;
	d->cq_cnt = l.max_cq;
	d->ep_cnt = l.max_qp;
	d->tx_ctx_cnt = l.max_qp;
	d->rx_ctx_cnt = l.max_qp;
	d->max_ep_tx_ctx = 1;
	d->max_ep_rx_ctx = 1;
	d->max_ep_stx_ctx = 1;			/* a budget and attributes (nd_stx.h) */
	d->max_ep_srx_ctx = 1;			/* fi_srx_context on an ibv_srq */
	d->cntr_cnt = l.max_qp;			/* software counters; one per endpoint event is plenty */
	d->mr_iov_limit = 1;
	d->caps = kDomainCaps;
	d->mode = 0;
	d->max_err_data = cm.reject;
	d->mr_cnt = l.max_mr;

	fi_fabric_attr *f = info->fabric_attr;
	f->name = dup_or_throw(fabric_name(address));
	f->prov_version = ND_PROV_VERSION;
	f->api_version = ND_API_VERSION;

	info->nic = make_nic(a, address);
	return info.release();
}

} // namespace nd
