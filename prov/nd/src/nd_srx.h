/*
 * nd_srx.h: shared receive contexts (fi_srx_context) on ibv_srq.
 *
 * Many endpoints take their receives from one pool of posted buffers, which
 * is how ofi_rxm scales to many connections. Receives complete on the CQ of
 * whichever endpoint a message arrived on and in no particular order, so
 * their records live in a pool with a free list rather than a ring.
 * The context is an fid_ep of class FI_CLASS_SRX_CTX whose message ops
 * post receives; endpoints bind it before fi_enable.
 */
#ifndef ND_SRX_H
#define ND_SRX_H

#include "nd.h"
#include "nd_verbs.h"
#include "nd_wq.h"

#include <rdma/fi_endpoint.h>

#include <memory>
#include <vector>

namespace nd {

struct Domain;

using UniqueSrq = VerbsHandle<ibv_srq, ibv_destroy_srq>;

struct SharedRx {
	fid_ep ep;				/* first: from_fid<SharedRx> */
	Domain *domain;
	UniqueSrq srq;
	OptionalLock lock{LockRank::shared_rx};			/* before queue, which points at it */
	/* A pool of records; the ring is not used. Held by pointer: a work
	 * queue's state is private, which a standard-layout object (from_fid)
	 * cannot hold by value. */
	std::unique_ptr<SharedReceivePool> pool;
	uint32_t iov_limit;
	uint64_t op_flags;			/* fi_recv's and fi_recvv's flags */
	size_t min_multi_recv;			/* FI_OPT_MIN_MULTI_RECV */
	ChildCount bound;

	SharedRx(Domain *d, uint32_t depth);
	ssize_t post(const iovec *iov, void **desc, size_t count, void *context, uint64_t flags);
	ssize_t post_behind_multi(const ibv_sge *sge, size_t count, uint64_t total, void *context,
				  bool multi);
	void set_min_multi_recv(size_t bytes);
	int close();
};


} // namespace nd

#endif /* ND_SRX_H */
