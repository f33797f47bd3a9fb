/*
 * nd_cntr.h: counters (fid_cntr).
 *
 * A counter is two atomics that completion handling adds to. Completions
 * only surface when a verbs CQ is polled, so reading or waiting on a
 * counter first progresses the CQs of the endpoints bound to it (each
 * endpoint has a CQ per direction, its own internal one when the
 * application bound none). Waiting polls: there is no wait object
 * (FI_WAIT_NONE/FI_WAIT_UNSPEC; FI_GETWAIT is not offered).
 */
#ifndef ND_CNTR_H
#define ND_CNTR_H

#include "nd.h"

#include <rdma/fi_domain.h>

#include <atomic>
#include <mutex>
#include <vector>

namespace nd {

struct Domain;
struct Endpoint;

struct Counter {
	fid_cntr cntr;				/* first: from_fid<Counter> */
	Domain *domain;
	std::atomic<uint64_t> value{0};
	std::atomic<uint64_t> errors{0};
	std::mutex sources_lock;
	std::vector<Endpoint *> sources;	/* endpoints whose CQs feed it */
	ChildCount bound;

	void count(bool ok) noexcept
	{
		(ok ? value : errors).fetch_add(1, std::memory_order_release);
	}
	void attach(Endpoint *ep);
	void detach(Endpoint *ep) noexcept;
	void progress();
	int close();
};

int cntr_open(fid_domain *domain, fi_cntr_attr *attr, fid_cntr **cntr, void *context) noexcept;

} // namespace nd

#endif /* ND_CNTR_H */
