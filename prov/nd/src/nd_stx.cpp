/* nd_stx.cpp: shared transmit contexts (fi_stx_context); see nd_stx.h. */
#include "nd_stx.h"
#include "nd_domain.h"
#include "nd_unsupported.h"

#include <memory>

namespace nd {

SharedTx::SharedTx(Domain *d, const fi_tx_attr &a)
	: stx{}, domain(d), attr(a), budget(std::make_shared<SendBudget>(a.size))
{
}

int SharedTx::close()
{
	/* Endpoints that closed with requests still in flight hold the
	 * budget themselves (a shared_ptr in their queue), not the context. */
	return close_bound_domain_child(this, FI_LOG_EP_CTRL, "stx");
}

namespace {

int stx_close(fid *fid) noexcept
{
	return guarded("fi_close(stx)", [&] { return from_fid<SharedTx>(fid)->close(); });
}

fi_ops stx_fid_ops = {
	.size = sizeof(fi_ops),
	.close = stx_close,
	.bind = unsupported::bind, /* endpoints bind to it */
	.control = unsupported::control,
	.ops_open = unsupported::ops_open,
	.tostr = nullptr,
	.ops_set = nullptr,
};

/* The context's attributes: the domain's defaults where the application
 * gives none, refused where they exceed what the domain's endpoints get
 * (the probed inline limit; the size and SGE count are checked against the
 * device when the first queue pair is created, as an endpoint's own are). */
int check_attr(const Domain &domain, const fi_tx_attr *asked, fi_tx_attr &out)
{
	const fi_tx_attr &base = *domain.info->tx_attr;
	out = base;
	if (!asked)
		return 0;
	if (asked->iov_limit > kMaxSge) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_stx_context: iov_limit %zu > %zu\n", asked->iov_limit, kMaxSge);
		return -FI_EINVAL;
	}
	if (asked->inject_size > base.inject_size) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_stx_context: inject_size %zu > the device's %zu\n",
			asked->inject_size, base.inject_size);
		return -FI_EINVAL;
	}
	if (asked->rma_iov_limit > 1) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_stx_context: rma_iov_limit %zu > 1\n", asked->rma_iov_limit);
		return -FI_EINVAL;
	}
	out.size = asked->size ? asked->size : base.size;
	out.iov_limit = asked->iov_limit ? asked->iov_limit : base.iov_limit;
	out.inject_size = asked->inject_size;
	out.op_flags = asked->op_flags;
	if (out.size > UINT32_MAX / 2) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_stx_context: size %zu is too large\n", out.size);
		return -FI_EINVAL;
	}
	return 0;
}

} // namespace

int stx_open(fid_domain *fdomain, fi_tx_attr *attr, fid_stx **out, void *context) noexcept
{
	return guarded("fi_stx_context", [&] {
		if (!fdomain || !out) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_stx_context: domain and stx must not be NULL\n");
			return -FI_EINVAL;
		}
		Domain *domain = from_fid<Domain>(fdomain);
		fi_tx_attr chosen{};
		if (int ret = check_attr(*domain, attr, chosen))
			return ret;
		auto stx = std::make_unique<SharedTx>(domain, chosen);
		stx->stx.fid.fclass = FI_CLASS_STX_CTX;
		stx->stx.fid.context = context;
		stx->stx.fid.ops = &stx_fid_ops;
		stx->stx.ops = &unsupported::ep_ops;
		domain->children.acquire();
		*out = &stx.release()->stx;
		return 0;
	});
}

} // namespace nd
