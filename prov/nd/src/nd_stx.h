/*
 * nd_stx.h: shared transmit contexts (fi_stx_context).
 *
 * Verbs has shared receive queues but no shared send queue: every RC queue
 * pair posts to its own. What nd shares among the endpoints bound to a
 * context is what an application can observe of one: its attributes (the
 * endpoints' send queues take the context's size, iov_limit, inject_size
 * and op_flags instead of their own) and its size as one budget of
 * requests outstanding across all of them (SendBudget, nd_send_budget.h). The
 * memory a true shared queue would save is not saved: each queue pair's
 * send queue is as deep as the whole context, so that no mix of endpoints
 * within the budget can overrun one.
 */
#ifndef ND_STX_H
#define ND_STX_H

#include "nd.h"
#include "nd_wq.h"

#include <rdma/fi_endpoint.h>

#include <memory>

namespace nd {

struct Domain;

struct SharedTx {
	fid_stx stx;				/* first: from_fid<SharedTx> */
	Domain *domain;
	fi_tx_attr attr;			/* what the endpoints' send queues take */
	std::shared_ptr<SendBudget> budget;
	ChildCount bound;

	SharedTx(Domain *d, const fi_tx_attr &a);
	int close();
};

} // namespace nd

#endif /* ND_STX_H */
