/*
 * nd_cntr.h: counters (fid_cntr).
 *
 * A counter is two atomics (its CounterCells, nd_wq.h) that the retirement
 * of a work request adds to. Completions only surface when a verbs CQ is
 * polled, so reading or waiting on a counter first progresses the CQs that
 * feed it: an enabled endpoint bound to the counter makes its CQs watched
 * (one per direction, its own internal one when the application bound
 * none). The counter knows CQs, never endpoints. Waiting polls: there is no wait object
 * (FI_WAIT_NONE/FI_WAIT_UNSPEC; FI_GETWAIT is not offered).
 */
#ifndef ND_CNTR_H
#define ND_CNTR_H

#include "nd.h"
#include "nd_wq.h"

#include <rdma/fi_domain.h>

#include <atomic>
#include <mutex>
#include <vector>

namespace nd {

struct CompletionQueue;
struct Domain;

struct Counter {
	fid_cntr cntr;				/* first: from_fid<Counter> */
	Domain *domain;
	std::atomic<uint64_t> value{0};
	std::atomic<uint64_t> errors{0};
	std::mutex sources_lock;
	std::vector<const void *> users;	/* objects bound to it; each holds `bound` */
	std::vector<CompletionQueue *> cqs;	/* CQs that feed it, once per watch */
	ChildCount bound;

	CounterCells cells() noexcept { return {&value, &errors}; }
	/* A binding (fi_ep_bind): the counter cannot close while it lasts. */
	void attach(const void *user);
	void detach(const void *user) noexcept;
	/* An enabled binding's CQ feeds the counter until unwatched. */
	void watch(CompletionQueue *cq);
	void unwatch(CompletionQueue *cq) noexcept;
	void progress();
	int close();
};


} // namespace nd

#endif /* ND_CNTR_H */
