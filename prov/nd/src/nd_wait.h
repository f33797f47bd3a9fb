/*
 * nd_wait.h: wait sets (fi_wait_open): one fd, or one fi_wait call, that
 * sleeps until any of several CQs, EQs and counters has something to read.
 *
 * Each member keeps its own FI_WAIT_FD machinery, a WaitFd (nd_wait_fd.h: a
 * CQ's completion channel and eventfd, an EQ's eventfd and CM channels, each
 * in the member's epoll set), which joins and leaves the set; the wait set's
 * epoll set holds the members' epoll fds, which Linux
 * nests. fi_wait first asks every member, as fi_trywait would (progress,
 * then arm), whether something is there already, and sleeps only when none
 * has; a wake-up with nothing to read (a channel event for a completion
 * already taken) sleeps again within the same timeout. FI_GETWAIT gives the
 * set's epoll fd, to wait on with the application's own poll, after
 * fi_trywait on the members as for any FI_WAIT_FD object. A counter's epoll
 * set holds the completion channels of the CQs that feed it (nd_cntr.h).
 */
#ifndef ND_WAIT_H
#define ND_WAIT_H

#include "nd.h"

#include <rdma/fi_eq.h>

#include <mutex>
#include <vector>

namespace nd {

struct Fabric;

struct WaitSet {
	fid_wait wait;				/* first: from_fid<WaitSet> */
	Fabric *fabric;
	int epoll_fd = -1;
	Mutex lock{LockRank::wait_set};
	std::vector<fid *> members;		/* CQs, EQs and counters */

	explicit WaitSet(Fabric *f) : wait{}, fabric(f) {}
	~WaitSet();
	/* A member joins with the fd that polls readable when it has news. */
	int add(fid *member, int member_fd);
	void remove(fid *member, int member_fd) noexcept;
	int wait_for(int timeout_ms);
	int close();
};

/* The wait set named by a CQ's or EQ's attributes, checked: null (with a
 * log line) when it is not one of nd's. */
WaitSet *wait_set_of(fid_wait *set, const char *call);

} // namespace nd

#endif /* ND_WAIT_H */
