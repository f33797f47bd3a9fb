/* nd_srx.cpp: shared receive contexts (fi_srx_context) on ibv_srq. */
#include "nd_srx.h"
#include "nd_cm.h"
#include "nd_domain.h"
#include "nd_mr.h"
#include "nd_multi_recv.h"
#include "nd_unsupported.h"

#include <rdma/fi_cm.h>

#include <cstring>
#include <memory>

namespace nd {

SharedRx::SharedRx(Domain *d, uint32_t depth)
	: ep{}, domain(d), pool(std::make_unique<SharedReceivePool>(depth)), iov_limit(1), op_flags(0),
	  min_multi_recv(kDefaultMinMultiRecv)
{
	/* Completed receives go back to the pool under the lock that posts. */
	pool->set_pool_lock(&lock);
	lock.enable(d->shared_objects_lock());
}

ssize_t SharedRx::post(const iovec *iov, void **desc, size_t count, void *context, uint64_t flags)
{
	ibv_sge sge[kMaxSge];
	uint64_t total = 0;
	const bool multi = flags & FI_MULTI_RECV;
	if (multi && count != 1) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recv(srx): a multi-receive buffer is one iov; %zu given\n", count);
		return -FI_EINVAL;
	}
	ssize_t built = gather_sges("fi_recv(srx)", iov, desc, count, iov_limit, true, true, sge, &total);
	if (built < 0)
		return built;
	if (domain->iwarp)
		built = receive_sges_for_iwarp(built, sge);
	if (multi && (total == 0 || total > UINT32_MAX)) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recv(srx): a multi-receive buffer of %llu bytes\n",
			static_cast<unsigned long long>(total));
		return -FI_EINVAL;
	}
	if (multi)
		return post_behind_multi(sge, static_cast<size_t>(built), total, context, true);
	std::unique_lock<OptionalLock> guard(lock);
	if (pool->multi()) {
		/* Made under this lock by another poster, and kept until the
		 * context closes: from now on every receive goes behind it. */
		guard.unlock();
		return post_behind_multi(sge, static_cast<size_t>(built), total, context, false);
	}
	OpRecord *record = pool->claim_slot(context, FI_RECV | FI_MSG, static_cast<uint32_t>(total), true);
	if (!record)
		return -FI_EAGAIN;
	ibv_recv_wr wr{};
	wr.wr_id = reinterpret_cast<uintptr_t>(record);
	wr.sg_list = sge;
	wr.num_sge = static_cast<int>(built);
	ibv_recv_wr *bad = nullptr;
	int rc = post_srq_recv(srq.get(), &wr, &bad);
	if (rc) {
		pool->unclaim_slot(*record);
		ND_WARN(FI_LOG_EP_DATA, "fi_recv(srx): ibv_post_srq_recv: %s\n", std::strerror(rc));
		return fi_error_of_post(rc);
	}
	return 0;
}

/* A multi-receive buffer, or a receive once there has been one: through
 * the queue's MultiRecv, which keeps them in order (nd_multi_recv.h). The
 * pool's lock and the MultiRecv's are never held together: the CQ takes
 * them the other way round when it retires. */
ssize_t SharedRx::post_behind_multi(const ibv_sge *sge, size_t count, uint64_t total, void *context,
				    bool multi)
{
	OpRecord *record;
	{
		std::lock_guard<OptionalLock> guard(lock);
		if (!pool->free_slots())
			return -FI_EAGAIN;
		if (!pool->multi()) {
			auto made = std::make_unique<MultiRecv>(min_multi_recv);
			made->srq = srq.get();
			made->ready = true;
			pool->set_multi(std::move(made));
		}
		record = pool->claim_slot(context, FI_RECV | FI_MSG | (multi ? kPlacedByNd : 0),
					  static_cast<uint32_t>(std::min<uint64_t>(total, UINT32_MAX)), true);
	}
	int rc;
	{
		MultiRecv *const multi_recv = pool->multi(); /* made above, kept until close */
		std::lock_guard<Mutex> hold(multi_recv->lock);
		try {
			rc = multi_recv->submit(record, sge, count, multi);
		} catch (const std::bad_alloc &) {
			rc = ENOMEM;
		}
	}
	if (rc) {
		std::lock_guard<OptionalLock> guard(lock);
		pool->unclaim_slot(*record);
		ND_WARN(FI_LOG_EP_DATA, "fi_recv(srx): ibv_post_srq_recv: %s\n", std::strerror(rc));
		return fi_error_of_post(rc);
	}
	return 0;
}

void SharedRx::set_min_multi_recv(size_t bytes)
{
	std::lock_guard<OptionalLock> guard(lock);
	min_multi_recv = bytes;
	if (MultiRecv *const behind = pool->multi()) {
		std::lock_guard<Mutex> hold(behind->lock);
		behind->min_free = bytes;
	}
}

int SharedRx::close()
{
	/* Receives still posted go with the SRQ, unreported. */
	return close_bound_domain_child(this, FI_LOG_EP_CTRL, "srx");
}

namespace {

SharedRx *srx_of(fid_ep *ep) { return from_fid<SharedRx>(ep); }

ssize_t srx_recv(fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t, void *context) noexcept
{
	iovec iov{buf, len};
	SharedRx *srx = srx_of(ep);
	return srx->post(&iov, &desc, 1, context, srx->op_flags);
}

ssize_t srx_recvv(fid_ep *ep, const iovec *iov, void **desc, size_t count, fi_addr_t,
		  void *context) noexcept
{
	SharedRx *srx = srx_of(ep);
	return srx->post(iov, desc, count, context, srx->op_flags);
}

ssize_t srx_recvmsg(fid_ep *ep, const fi_msg *msg, uint64_t flags) noexcept
{
	if (!msg) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recvmsg(srx): msg is NULL\n");
		return -FI_EINVAL;
	}
	return srx_of(ep)->post(msg->msg_iov, msg->desc, msg->iov_count, msg->context, flags);
}

fi_ops_msg srx_msg_ops = {
	.size = sizeof(fi_ops_msg),
	.recv = srx_recv,
	.recvv = srx_recvv,
	.recvmsg = srx_recvmsg,
	.send = unsupported::send,
	.sendv = unsupported::sendv,
	.sendmsg = unsupported::sendmsg,
	.inject = unsupported::inject,
	.senddata = unsupported::senddata,
	.injectdata = unsupported::injectdata,
};

/* FI_OPT_MIN_MULTI_RECV is the context's one option. */
int srx_getopt(fid *fid, int level, int optname, void *optval, size_t *optlen) noexcept
{
	if (level != FI_OPT_ENDPOINT || optname != FI_OPT_MIN_MULTI_RECV)
		return -FI_ENOPROTOOPT;
	if (!optval || !optlen || *optlen < sizeof(size_t)) {
		if (optlen)
			*optlen = sizeof(size_t);
		return -FI_ETOOSMALL;
	}
	*static_cast<size_t *>(optval) = from_fid<SharedRx>(fid)->min_multi_recv;
	*optlen = sizeof(size_t);
	return 0;
}

int srx_setopt(fid *fid, int level, int optname, const void *optval, size_t optlen) noexcept
{
	if (level != FI_OPT_ENDPOINT || optname != FI_OPT_MIN_MULTI_RECV)
		return -FI_ENOPROTOOPT;
	if (!optval || optlen != sizeof(size_t)) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_setopt(srx, FI_OPT_MIN_MULTI_RECV): a size_t\n");
		return -FI_EINVAL;
	}
	return guarded("fi_setopt(srx)", [&] {
		from_fid<SharedRx>(fid)->set_min_multi_recv(*static_cast<const size_t *>(optval));
		return 0;
	});
}

ssize_t srx_cancel(fid *, void *context) noexcept
{
	ND_INFO(FI_LOG_EP_DATA, "fi_cancel(srx): receive %p not cancelled: a shared receive context has no "
		"CQ of its own to report a cancellation on\n", context);
	return -FI_ENOENT;
}

fi_ops_ep srx_ep_ops = {
	.size = sizeof(fi_ops_ep),
	.cancel = srx_cancel,
	.getopt = srx_getopt,
	.setopt = srx_setopt,
	.tx_ctx = unsupported::tx_ctx,
	.rx_ctx = unsupported::rx_ctx,
	.rx_size_left = unsupported::rx_size_left,
	.tx_size_left = unsupported::tx_size_left,
};

int srx_close(fid *fid) noexcept
{
	return guarded("fi_close(srx)", [&] { return from_fid<SharedRx>(fid)->close(); });
}

fi_ops srx_fid_ops = {
	.size = sizeof(fi_ops),
	.close = srx_close,
	.bind = unsupported::bind,
	.control = unsupported::control,
	.ops_open = unsupported::ops_open,
	.tostr = nullptr,
	.ops_set = nullptr,
};

fi_ops_cm srx_cm_ops = {
	.size = sizeof(fi_ops_cm),
	.setname = unsupported::setname,
	.getname = unsupported::getname,
	.getpeer = unsupported::getpeer,
	.connect = unsupported::connect,
	.listen = unsupported::listen,
	.accept = unsupported::accept,
	.reject = unsupported::reject,
	.shutdown = unsupported::shutdown,
	.join = unsupported::join,
};

} // namespace

int srx_open(fid_domain *fdomain, fi_rx_attr *attr, fid_ep **out, void *context) noexcept
{
	return guarded("fi_srx_context", [&] {
		if (!fdomain || !out) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_srx_context: domain and rx_ep must not be NULL\n");
			return -FI_EINVAL;
		}
		Domain *domain = from_fid<Domain>(fdomain);
		const fi_rx_attr *rx = attr ? attr : domain->info->rx_attr;
		size_t depth = rx && rx->size ? rx->size : 1024;
		size_t iov_limit = rx && rx->iov_limit ? rx->iov_limit : 1;
		if (depth > static_cast<size_t>(domain->max_srq_wr)) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_srx_context: size %zu > the device's %d\n", depth,
				domain->max_srq_wr);
			return -FI_EINVAL;
		}
		if (iov_limit > kMaxSge) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_srx_context: iov_limit %zu > %zu\n", iov_limit, kMaxSge);
			return -FI_EINVAL;
		}
		auto srx = std::make_unique<SharedRx>(domain, static_cast<uint32_t>(depth));
		ibv_srq_init_attr init{};
		init.attr.max_wr = static_cast<uint32_t>(depth);
		init.attr.max_sge = static_cast<uint32_t>(iov_limit);
		srx->srq.reset(ibv_create_srq(domain->pd.get(), &init));
		if (!srx->srq) {
			int err = errno;
			ND_WARN(FI_LOG_EP_CTRL, "fi_srx_context: ibv_create_srq(%zu, %zu): %s\n", depth,
				iov_limit, std::strerror(err));
			return fi_error_of_errno(err);
		}
		srx->iov_limit = static_cast<uint32_t>(iov_limit);
		srx->op_flags = rx ? rx->op_flags : 0;
		srx->ep.fid.fclass = FI_CLASS_SRX_CTX;
		srx->ep.fid.context = context;
		srx->ep.fid.ops = &srx_fid_ops;
		srx->ep.ops = &srx_ep_ops;
		srx->ep.cm = &srx_cm_ops;
		srx->ep.msg = &srx_msg_ops;
		srx->ep.rma = &unsupported::rma_ops;
		srx->ep.tagged = &unsupported::tagged_ops;
		srx->ep.atomic = &unsupported::atomic_ops;
		domain->children.acquire();
		*out = &srx.release()->ep;
		return 0;
	});
}

} // namespace nd
