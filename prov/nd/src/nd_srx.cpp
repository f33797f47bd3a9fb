/* nd_srx.cpp: shared receive contexts (fi_srx_context) on ibv_srq. */
#include "nd_srx.h"
#include "nd_cm.h"
#include "nd_domain.h"
#include "nd_mr.h"
#include "nd_unsupported.h"

#include <rdma/fi_cm.h>

#include <cstring>
#include <memory>

namespace nd {

SharedRx::SharedRx(Domain *d, uint32_t depth)
	: ep{}, domain(d), queue(QueueKind::shared_recv, depth), iov_limit(1), op_flags(0)
{
	/* Completed receives go back to the pool under the lock that posts. */
	queue.pool_lock = &lock;
	lock.enable(d->threading != FI_THREAD_DOMAIN && d->threading != FI_THREAD_COMPLETION);
}

ssize_t SharedRx::post(const iovec *iov, void **desc, size_t count, void *context, uint64_t flags)
{
	ibv_sge sge[kMaxSge];
	uint64_t total = 0;
	const ssize_t built = gather_sges("fi_recv(srx)", iov, desc, count, iov_limit, true, true, sge,
					  &total);
	if (built < 0)
		return built;
	std::lock_guard<OptionalLock> guard(lock);
	if (queue.free_slots.empty())
		return -FI_EAGAIN;
	uint32_t slot = queue.free_slots.back();
	OpRecord &record = queue.records[slot];
	record.context = context;
	record.flags = FI_RECV | FI_MSG;
	record.len = static_cast<uint32_t>(total);
	record.read_mark = 0;
	record.report = true;
	ibv_recv_wr wr{};
	wr.wr_id = reinterpret_cast<uintptr_t>(&record);
	wr.sg_list = sge;
	wr.num_sge = static_cast<int>(built);
	ibv_recv_wr *bad = nullptr;
	int rc = ibv_post_srq_recv(srq.get(), &wr, &bad);
	if (rc) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recv(srx): ibv_post_srq_recv: %s\n", std::strerror(rc));
		return rc == ENOMEM ? -FI_EAGAIN : fi_error_of_errno(rc);
	}
	queue.free_slots.pop_back();
	(void)flags;
	return 0;
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
	return srx_of(ep)->post(&iov, &desc, 1, context, 0);
}

ssize_t srx_recvv(fid_ep *ep, const iovec *iov, void **desc, size_t count, fi_addr_t,
		  void *context) noexcept
{
	return srx_of(ep)->post(iov, desc, count, context, 0);
}

ssize_t srx_recvmsg(fid_ep *ep, const fi_msg *msg, uint64_t flags) noexcept
{
	if (!msg) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recvmsg(srx): msg is NULL\n");
		return -FI_EINVAL;
	}
	if (flags & FI_MULTI_RECV) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recvmsg(srx): FI_MULTI_RECV is not supported\n");
		return -FI_EBADFLAGS;
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

int srx_close(fid *fid) noexcept
{
	return guarded("fi_close(srx)", [&] { return from_fid<SharedRx>(fid)->close(); });
}

int srx_bind(fid *, fid *, uint64_t) noexcept
{
	ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(srx): bind the endpoints to the context, not the context to a CQ\n");
	return -FI_ENOSYS;
}

int srx_control(fid *, int command, void *) noexcept
{
	ND_WARN(FI_LOG_EP_CTRL, "fi_control(srx): command %d not supported\n", command);
	return -FI_ENOSYS;
}

fi_ops srx_fid_ops = {
	.size = sizeof(fi_ops),
	.close = srx_close,
	.bind = srx_bind,
	.control = srx_control,
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
		if (rx && (rx->op_flags & FI_MULTI_RECV)) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_srx_context: FI_MULTI_RECV is not supported\n");
			return -FI_EBADFLAGS;
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
		srx->ep.ops = &unsupported::ep_ops;
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
