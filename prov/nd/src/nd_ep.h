/*
 * nd_ep.h: the active endpoint (fid_ep, FI_EP_MSG): ND's connector and
 * queue pair in one object.
 *
 * The queue pair is the provider's own (ibv_create_qp on the domain's PD),
 * never attached to the rdma_cm id: that keeps the id QP-less, which is what
 * lets rdma_cm report the peer's reply (RDMA_CM_EVENT_CONNECT_RESPONSE)
 * before the connection completes, so that the read limits the queue pair
 * gets are the negotiated ones and ND's explicit CompleteConnect can be
 * offered. The provider moves the queue pair through INIT/RTR/RTS itself
 * with the attributes rdma_init_qp_attr computes.
 *
 * Connection calls and CM event handlers run under the bound EQ's progress
 * lock (nd_cm.h); the state lives in an EpStateMachine (nd_ep_state.h).
 */
#ifndef ND_EP_H
#define ND_EP_H

#include "nd.h"
#include "nd_cm.h"
#include "nd_cm_data.h"
#include "nd_ep_state.h"
#include "nd_verbs.h"

#include <rdma/fi_endpoint.h>

#include <vector>

namespace nd {

struct Domain;
struct EventQueue;

struct Endpoint {
	fid_ep ep;				/* first: from_fid<Endpoint> */
	Domain *domain;
	fi_info *info;
	EventQueue *eq;
	CmTarget target;
	CmIdHolder cm;
	EpStateMachine fsm;

	/* Options (fi_ext_nd.h). */
	cm::ReadLimits wanted;			/* as set; capped when offered */
	bool manual_complete;
	bool shared_addr;

	/* Progress of the object itself. */
	bool bound;				/* fi_setname done */
	bool enabled;

	/* Resources: created at fi_enable; destroyed QP first. */
	UniqueCq cq;
	UniqueQp qp;

	/* The connection. */
	SockAddr peer;
	SockAddr tuple_local;			/* claimed (shared endpoints) */
	bool tuple_claimed;
	std::vector<uint8_t> connect_wire;	/* framed, until rdma_connect */
	std::vector<uint8_t> response_data;	/* the accepter's, for FI_CONNECTED */
	bool negotiated;
	cm::ReadLimits effective;
	cm::ReadLimits peer_offer;
	/* Passive side: a connection request was taken from a listener. */
	bool has_request;
	bool request_peer_gone;

	Endpoint(Domain *domain, fi_info *info, cm::Side side);
	int close();
	cm::ReadLimits offered() const noexcept; /* wanted, capped */

	/* Connection management (nd_ep_cm.cpp). */
	int connect(const void *addr, const void *param, size_t paramlen);
	int accept(const void *param, size_t paramlen);
	int shutdown(uint64_t flags);
	int complete_connect();
	int reject_connect(const void *param, size_t paramlen);
	void on_cm_event(const CmEventCopy &event);

	/* Queue pair (nd_ep_cm.cpp). */
	int create_queue_pair();
	int move_queue_pair(ibv_qp_state state);
	void flush_queue_pair() noexcept;
};

/* fi_endpoint / fi_endpoint2 */
int open_endpoint(fid_domain *domain, fi_info *info, fid_ep **ep, void *context) noexcept;

} // namespace nd

#endif /* ND_EP_H */
