/*
 * nd_unsupported.h: entry points for operations the provider does not (or
 * does not yet) implement. Each logs which operation was asked for and
 * returns -FI_ENOSYS (-FI_ENOPROTOOPT for options), so that an application
 * learns at the call, never by a silent success. Every ops table fills the
 * slots it does not serve from here, and in no other way; only the slots
 * libfabric itself treats as optional (its FI_CHECK_OP guards fi_ops.tostr
 * and fi_ops.ops_set) stay NULL.
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

int av_open(fid_domain *, fi_av_attr *, fid_av **, void *) noexcept;
int scalable_ep(fid_domain *, fi_info *, fid_ep **, void *) noexcept;
int query_collective(fid_domain *, fi_collective_op, fi_collective_attr *, uint64_t) noexcept;

int ops_open(fid *, const char *, uint64_t, void **, void *) noexcept;
/* fi_control on an object that has no control commands, and fi_bind on
 * one that binds to nothing: both log the object's class (and for bind,
 * what to do instead). */
int control(fid *, int, void *) noexcept;
int bind(fid *, fid *, uint64_t) noexcept;

/* Endpoint and CM slots that do not apply to an object. */
ssize_t cancel(fid *, void *) noexcept;
int tx_ctx(fid_ep *, int, fi_tx_attr *, fid_ep **, void *) noexcept;
int rx_ctx(fid_ep *, int, fi_rx_attr *, fid_ep **, void *) noexcept;
ssize_t rx_size_left(fid_ep *) noexcept;
ssize_t tx_size_left(fid_ep *) noexcept;
int setopt(fid *, int, int, const void *, size_t) noexcept;
int setname(fid *, void *, size_t) noexcept;
int getname(fid *, void *, size_t *) noexcept;
int getpeer(fid_ep *, void *, size_t *) noexcept;
int connect(fid_ep *, const void *, const void *, size_t) noexcept;
int listen(fid_pep *) noexcept;
int accept(fid_ep *, const void *, size_t) noexcept;
int reject(fid_pep *, fid_t, const void *, size_t) noexcept;
int shutdown(fid_ep *, uint64_t) noexcept;
int join(fid_ep *, const void *, uint64_t, fid_mc **, void *) noexcept;

/* The send side of an object that only receives (a shared receive
 * context): its receive slots are its own. */
ssize_t send(fid_ep *, const void *, size_t, void *, fi_addr_t, void *) noexcept;
ssize_t sendv(fid_ep *, const iovec *, void **, size_t, fi_addr_t, void *) noexcept;
ssize_t sendmsg(fid_ep *, const fi_msg *, uint64_t) noexcept;
ssize_t inject(fid_ep *, const void *, size_t, fi_addr_t) noexcept;
ssize_t senddata(fid_ep *, const void *, size_t, void *, uint64_t, fi_addr_t, void *) noexcept;
ssize_t injectdata(fid_ep *, const void *, size_t, uint64_t, fi_addr_t) noexcept;

/* The endpoint slots of a context object (shared receive or transmit
 * context): none of them applies. */
extern fi_ops_ep ep_ops;
extern fi_ops_rma rma_ops;
extern fi_ops_tagged tagged_ops;
extern fi_ops_atomic atomic_ops;

} // namespace nd::unsupported

#endif /* ND_UNSUPPORTED_H */
