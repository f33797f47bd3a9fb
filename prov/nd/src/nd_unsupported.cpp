/* nd_unsupported.cpp: -FI_ENOSYS entry points, each saying what was asked. */
#include "nd_unsupported.h"
#include "nd.h"

#include <rdma/fi_collective.h>

namespace nd::unsupported {

namespace {

int not_implemented(const char *operation, const char *why) noexcept
{
	ND_WARN(FI_LOG_CORE, "%s is not implemented by the nd provider: %s\n", operation, why);
	return -FI_ENOSYS;
}

constexpr const char *kLater = "not implemented yet";

} // namespace

int passive_ep(fid_fabric *, fi_info *, fid_pep **, void *) noexcept
{
	return not_implemented("fi_passive_ep", kLater);
}

int wait_open(fid_fabric *, fi_wait_attr *, fid_wait **) noexcept
{
	return not_implemented("fi_wait_open", "wait sets are not supported; use FI_WAIT_FD and epoll");
}

int av_open(fid_domain *, fi_av_attr *, fid_av **, void *) noexcept
{
	return not_implemented("fi_av_open", "FI_EP_MSG endpoints address peers by connection");
}

int cq_open(fid_domain *, fi_cq_attr *, fid_cq **, void *) noexcept
{
	return not_implemented("fi_cq_open", kLater);
}

int endpoint(fid_domain *, fi_info *, fid_ep **, void *) noexcept
{
	return not_implemented("fi_endpoint", kLater);
}

int endpoint2(fid_domain *, fi_info *, fid_ep **, uint64_t, void *) noexcept
{
	return not_implemented("fi_endpoint2", kLater);
}

int scalable_ep(fid_domain *, fi_info *, fid_ep **, void *) noexcept
{
	return not_implemented("fi_scalable_ep", "FI_EP_MSG endpoints have one context each");
}

int cntr_open(fid_domain *, fi_cntr_attr *, fid_cntr **, void *) noexcept
{
	return not_implemented("fi_cntr_open", kLater);
}

int poll_open(fid_domain *, fi_poll_attr *, fid_poll **) noexcept
{
	return not_implemented("fi_poll_open", "poll sets are not supported; use FI_WAIT_FD and epoll");
}

int stx_ctx(fid_domain *, fi_tx_attr *, fid_stx **, void *) noexcept
{
	return not_implemented("fi_stx_context", "shared transmit contexts are not supported");
}

int srx_ctx(fid_domain *, fi_rx_attr *, fid_ep **, void *) noexcept
{
	return not_implemented("fi_srx_context", kLater);
}

int query_atomic(fid_domain *, fi_datatype, fi_op, fi_atomic_attr *, uint64_t) noexcept
{
	return not_implemented("fi_query_atomic", "atomics are not offered (no FI_ATOMIC cap)");
}

int query_collective(fid_domain *, fi_collective_op, fi_collective_attr *, uint64_t) noexcept
{
	return not_implemented("fi_query_collective", "collectives are not offered");
}

int mr_reg(fid *, const void *, size_t, uint64_t, uint64_t, uint64_t, uint64_t, fid_mr **,
	   void *) noexcept
{
	return not_implemented("fi_mr_reg", kLater);
}

int mr_regv(fid *, const iovec *, size_t, uint64_t, uint64_t, uint64_t, uint64_t, fid_mr **,
	    void *) noexcept
{
	return not_implemented("fi_mr_regv", kLater);
}

int mr_regattr(fid *, const fi_mr_attr *, uint64_t, fid_mr **) noexcept
{
	return not_implemented("fi_mr_regattr", kLater);
}

int ops_open(fid *, const char *name, uint64_t, void **, void *) noexcept
{
	ND_WARN(FI_LOG_CORE, "fi_open_ops: no extension ops named '%s'\n", name ? name : "(null)");
	return -FI_ENOSYS;
}

} // namespace nd::unsupported
