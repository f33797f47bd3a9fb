/*
 * nd_poll.h: poll sets (fi_poll_open): one call that tells which of several
 * CQs and counters have something new, so that an application serving many
 * need not read each.
 *
 * fi_poll progresses each member and reports the context of every CQ that
 * holds a completion or an error entry (once per call, however many it
 * holds: the application reads it and polls again), and of every counter
 * whose success or error count moved since the poll set last reported it.
 * A member cannot be closed while it is in a set (-FI_EBUSY), so the set
 * never reads a closed object.
 */
#ifndef ND_POLL_H
#define ND_POLL_H

#include "nd.h"

#include <rdma/fi_domain.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace nd {

class CompletionQueue;
struct Counter;
struct Domain;

struct PollSet {
	fid_poll pollset;			/* first: from_fid<PollSet> */
	Domain *domain;

	struct Member {
		CompletionQueue *cq = nullptr;	/* one of the two */
		Counter *counter = nullptr;
		uint64_t seen_value = 0;	/* counter counts last reported */
		uint64_t seen_errors = 0;
	};
	Mutex lock{LockRank::poll_set};
	std::vector<Member> members;

	int add(fid *member);
	int del(fid *member);
	int poll(void **context, int count);
	int close();
};

} // namespace nd

#endif /* ND_POLL_H */
