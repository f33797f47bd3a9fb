/*
 * nd_pep.h: the passive endpoint (fid_pep), ND's listener, which hands out
 * connection requests (FI_CLASS_CONNREQ handles, nd_conn_request.h).
 *
 * Every request arrives as one FI_CONNREQ whose info carries the requester's
 * address, the listener's local address, the exact private data the
 * requester sent, and a handle, the ConnRequest, which the listener holds
 * until fi_endpoint takes it or fi_reject refuses it. Requests never taken
 * are rejected when the passive endpoint closes.
 */
#ifndef ND_PEP_H
#define ND_PEP_H

#include "nd.h"
#include "nd_cm.h"
#include "nd_cm_data.h"
#include "nd_conn_request.h"

#include <rdma/fi_endpoint.h>

#include <functional>
#include <vector>

namespace nd {

struct Fabric;
struct EventQueue;
struct PassiveEndpoint;

/* Takes a request out of its listener's hands for fi_endpoint: under the
 * listener EQ's progress lock the request leaves the listener and `adopt`
 * runs, so that no event handler of the request (nor of its new owner, once
 * `adopt` points the id at it) runs in between. The caller then owns
 * request->id and must delete the request object with release_request().
 * `adopt` returns false to refuse the request (the caller then rejects it).
 * Returns nullptr (logged) for a handle that is not a live request. */
ConnRequest *take_request(fid *handle, const std::function<bool(ConnRequest &)> &adopt);

/* fi_getinfo(3) with hints->handle a passive endpoint: the address it is
 * bound to, port included. -FI_ENOENT when the handle is not a live passive
 * endpoint of nd, -FI_EADDRNOTAVAIL when it has no address yet. */
int pep_address(const fid *handle, SockAddr *out);
/* fi_endpoint with info->handle a passive endpoint: the active endpoint
 * takes over its address. The passive endpoint lets go of it (it must not
 * be listening) and is left unbound. Same codes as pep_address, and
 * -FI_EOPBADSTATE for a listener; logs why. */
int take_pep_address(const fid *handle, SockAddr *out);

struct PassiveEndpoint {
	fid_pep pep;				/* first: from_fid<PassiveEndpoint> */
	Fabric *fabric;
	fi_info *info;
	EventQueue *eq;
	CmTarget target;
	CmIdHolder cm;
	/* ND's backlog: requests held (neither taken nor refused) at most;
	 * 0 means no limit of the provider's own. */
	int backlog;
	bool bound;
	bool listening;
	/* A vector, not a list: the object stays standard-layout, as
	 * from_fid needs (libstdc++'s list is not). */
	std::vector<ConnRequest *> pending;

	int close();
};


} // namespace nd

#endif /* ND_PEP_H */
