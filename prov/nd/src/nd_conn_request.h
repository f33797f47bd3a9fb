/*
 * nd_conn_request.h: a connection request (FI_CLASS_CONNREQ), the handle a
 * listener (nd_pep.h) hands the application as an FI_CONNREQ's info->handle.
 *
 * A ConnRequest holds the new rdma_cm id and the requester's offered read
 * limits (readable with fi_nd_peer_read_limits before accepting) until
 * fi_endpoint takes it or fi_reject refuses it. Its own CM events (the
 * requester giving up before an answer) are absorbed here.
 */
#ifndef ND_CONN_REQUEST_H
#define ND_CONN_REQUEST_H

#include "nd.h"
#include "nd_cm.h"
#include "nd_cm_data.h"

#include <mutex>
#include <optional>
#include <set>

namespace nd {

/* Whether rdma_accept or rdma_reject failed because the requester gave up
 * (closed, or timed out) before the answer: the kernel tells no event of
 * that before an accept, and takes an answer only while the request is
 * pending; IB's CM id is then no longer connecting (EINVAL), iWARP's MPA
 * stream was closed (ECONNRESET). ND: aborted. */
constexpr bool requester_gave_up(int err) noexcept
{
	return err == EINVAL || err == ECONNRESET;
}

struct PassiveEndpoint;

struct ConnRequest {
	fid handle;				/* first: FI_CLASS_CONNREQ */
	CmTarget target;
	PassiveEndpoint *pep;
	rdma_cm_id *id;
	/* The requester's values as rdma_cm reports them to us. */
	uint8_t responder_resources;
	uint8_t initiator_depth;
	/* The requester gave up (rejected or timed out) before an answer. */
	bool peer_gone;
	/* iWARP: its receive-credit offer (nd_credits.h), if it made one. */
	std::optional<cm::CreditOffer> credit_offer;

	cm::ReadLimits offer() const noexcept
	{
		return cm::peer_offer(responder_resources, initiator_depth);
	}
};

/* Frees a request object whose id someone else now owns or destroyed. */
void release_request(ConnRequest *request) noexcept;

/* Shared with the listener (nd_pep.cpp), which creates the requests, holds
 * them in its pending list and hands them over. request_lock guards
 * live_requests, every listener's pending list and the live listeners. */
extern Mutex request_lock;
extern std::set<ConnRequest *> live_requests;
/* The fid operations of a request's handle. */
extern fi_ops request_ops;
/* Refuses a request nobody will take, and frees it. The caller has taken
 * it out of the live set and its listener's list. */
void drop_request(ConnRequest *request, const char *why) noexcept;

} // namespace nd

#endif /* ND_CONN_REQUEST_H */
