/*
 * nd_cntr.h: counters (fid_cntr).
 *
 * A counter is two atomics (its CounterWords, nd_counter_cells.h) that the retirement
 * of a work request adds to. Completions only surface when a verbs CQ is
 * polled, so reading or waiting on a counter first progresses the CQs that
 * feed it: an enabled endpoint bound to the counter makes its CQs watched
 * (one per direction, its own internal one when the application bound
 * none). The counter knows CQs, never endpoints.
 *
 * Waiting. A counter opened with FI_WAIT_FD, FI_WAIT_SET or FI_WAIT_UNSPEC
 * has an epoll set holding the completion channels of the CQs that feed it
 * (an endpoint's internal CQ gets a channel for such a counter) and an
 * eventfd that fi_cntr_add and fi_cntr_set write, so that a waiter sees
 * them. fi_cntr_wait and fi_trywait arm those CQs, progress them once more
 * (a completion that came before the arm raises no event), and only then
 * sleep. FI_WAIT_FD gives the epoll set to FI_GETWAIT; FI_WAIT_SET puts it
 * in the wait set. An application CQ without a wait object cannot wake
 * anyone: fi_enable refuses to feed an FI_WAIT_FD or FI_WAIT_SET counter
 * from one, and an FI_WAIT_UNSPEC counter fed by one waits by polling, as
 * an FI_WAIT_NONE counter always does.
 */
#ifndef ND_CNTR_H
#define ND_CNTR_H

#include "nd.h"
#include "nd_wait_fd.h"
#include "nd_wq.h"

#include <rdma/fi_domain.h>

#include <atomic>
#include <mutex>
#include <vector>

namespace nd {

class CompletionQueue;
struct Domain;

struct Counter {
	fid_cntr cntr;				/* first: from_fid<Counter> */
	Domain *domain;
	CounterWords words;			/* the value, and the errors */
	Mutex sources_lock{LockRank::counter_sources};
	std::vector<const void *> users;	/* objects bound to it; each holds `bound` */
	std::vector<CompletionQueue *> cqs;	/* CQs that feed it, once per watch */
	ChildCount bound;
	fi_wait_obj wait_obj = FI_WAIT_NONE;
	bool waitable = false;			/* FD, SET or UNSPEC: the fds below */
	WaitFd wait_fd;				/* the feeding CQs' channels; fi_cntr_add/set signal it */
	int polled_sources = 0;			/* watched CQs with no channel */
	std::atomic<uint64_t> observed{0};	/* value + errors at the last fi_trywait */

	~Counter();

	CounterCells cells() noexcept { return {&words}; }
	/* A binding (fi_ep_bind): the counter cannot close while it lasts. */
	void attach(const void *user);
	void detach(const void *user) noexcept;
	/* An enabled binding's CQ feeds the counter until unwatched;
	 * -FI_EINVAL when the counter promised an fd the CQ cannot wake. */
	int watch(CompletionQueue *cq);
	void unwatch(CompletionQueue *cq) noexcept;
	void progress();
	/* Arms the feeding CQs' channels; false when one has none. */
	bool arm();
	int wait(uint64_t threshold, int timeout_ms);
	int trywait();
	void wake() noexcept;
	int close();
};


} // namespace nd

#endif /* ND_CNTR_H */
