/*
 * nd_unsupported.h: entry points for operations the provider does not (or
 * does not yet) implement. Each logs which operation was asked for and
 * returns -FI_ENOSYS, so that an application learns at the call, never by a
 * silent success. Ops tables point here instead of leaving a slot NULL.
 */
#ifndef ND_UNSUPPORTED_H
#define ND_UNSUPPORTED_H

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

namespace nd::unsupported {

int wait_open(fid_fabric *, fi_wait_attr *, fid_wait **) noexcept;

int av_open(fid_domain *, fi_av_attr *, fid_av **, void *) noexcept;
int scalable_ep(fid_domain *, fi_info *, fid_ep **, void *) noexcept;
int poll_open(fid_domain *, fi_poll_attr *, fid_poll **) noexcept;
int stx_ctx(fid_domain *, fi_tx_attr *, fid_stx **, void *) noexcept;
int query_atomic(fid_domain *, fi_datatype, fi_op, fi_atomic_attr *, uint64_t) noexcept;
int query_collective(fid_domain *, fi_collective_op, fi_collective_attr *, uint64_t) noexcept;

int ops_open(fid *, const char *, uint64_t, void **, void *) noexcept;

/* Endpoint and CM slots that do not apply to an object. */
ssize_t cancel(fid *, void *) noexcept;
int tx_ctx(fid_ep *, int, fi_tx_attr *, fid_ep **, void *) noexcept;
int rx_ctx(fid_ep *, int, fi_rx_attr *, fid_ep **, void *) noexcept;
ssize_t rx_size_left(fid_ep *) noexcept;
ssize_t tx_size_left(fid_ep *) noexcept;
int setopt(fid *, int, int, const void *, size_t) noexcept;
int getpeer(fid_ep *, void *, size_t *) noexcept;
int connect(fid_ep *, const void *, const void *, size_t) noexcept;
int listen(fid_pep *) noexcept;
int accept(fid_ep *, const void *, size_t) noexcept;
int reject(fid_pep *, fid_t, const void *, size_t) noexcept;
int shutdown(fid_ep *, uint64_t) noexcept;
int join(fid_ep *, const void *, uint64_t, fid_mc **, void *) noexcept;

/* Data transfer tables of an endpoint whose data path is not there yet. */
extern fi_ops_msg msg_ops;
extern fi_ops_rma rma_ops;
extern fi_ops_tagged tagged_ops;
extern fi_ops_atomic atomic_ops;

} // namespace nd::unsupported

#endif /* ND_UNSUPPORTED_H */
