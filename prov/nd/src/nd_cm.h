/*
 * nd_cm.h: rdma_cm plumbing shared by event queues, passive endpoints,
 * connection requests and endpoints.
 *
 * Progress model. Every rdma_cm id of an object bound to an EQ lives on that
 * EQ's event channel, whose fd sits in the EQ's epoll set. Reading the EQ
 * (fi_eq_read/readerr/sread, fi_trywait) first reads the channel, a
 * bounded batch at a time (EventQueue::kCmEventsPerProgress): each
 * rdma_cm event is copied, acknowledged at once and only then handed to the
 * object it belongs to (id->context points at the object's CmTarget). An
 * acknowledged event never holds up rdma_destroy_id, so an object can destroy
 * its id from anywhere. Dispatch and every application call that changes
 * connection state hold the EQ's progress lock, so a handler never runs
 * concurrently with a call on the same endpoint, nor with its close.
 */
#ifndef ND_CM_H
#define ND_CM_H

#include "nd_addr.h"
#include "nd_verbs.h"

#include <cstdint>
#include <vector>

namespace nd {

struct EventQueue;

/* Who an rdma_cm id belongs to: id->context points at one of these, a
 * member of the owning object. */
enum class CmTargetKind : uint32_t { passive_endpoint, connection_request, endpoint };

struct CmTarget {
	CmTargetKind kind;
	void *owner;
};

/* What the provider keeps of an rdma_cm event after acknowledging it. */
struct CmEventCopy {
	rdma_cm_event_type type = RDMA_CM_EVENT_ADDR_RESOLVED;
	int status = 0;
	rdma_cm_id *id = nullptr;
	rdma_cm_id *listen_id = nullptr;
	uint8_t responder_resources = 0;
	uint8_t initiator_depth = 0;
	uint32_t qp_num = 0;
	std::vector<uint8_t> private_data;
};

/* Handlers, one per kind of target (nd_pep.cpp, nd_ep_cm.cpp). */
void pep_cm_event(void *pep, const CmEventCopy &event);
void connreq_cm_event(void *request, const CmEventCopy &event);
void ep_cm_event(void *ep, const CmEventCopy &event);

/*
 * An rdma_cm id and, until its owner is bound to an EQ, a channel of its own
 * (an id must live on some channel; events nobody reads are dropped by the
 * kernel when the id goes). Created on first need; moved to the EQ's channel
 * with rdma_migrate_id at bind time.
 */
struct CmIdHolder {
	rdma_cm_id *id = nullptr;
	UniqueEventChannel own_channel;

	/* Creates the id if there is none yet: on `channel` when given, else on
	 * a channel of its own. Returns 0 or -FI_E*. */
	int ensure(rdma_event_channel *channel, CmTarget *target);
	/* Adopts an id rdma_cm created (a connection request's). */
	void adopt(rdma_cm_id *id, CmTarget *target);
	/* Moves the id (if any) onto `channel`. */
	int migrate(rdma_event_channel *channel);
	/* Destroys the id (if any) and the own channel. */
	void reset() noexcept;
	/* Gives up ownership without destroying (handing the id on). */
	rdma_cm_id *release() noexcept;
};


/* Local and peer addresses of an id. */
SockAddr local_address(rdma_cm_id *id) noexcept;
SockAddr peer_address(rdma_cm_id *id) noexcept;

/* fi_getname/fi_getpeer's contract: copies the address when it fits and
 * returns 0; otherwise writes the needed size to *addrlen and returns
 * -FI_ETOOSMALL (ND_BUFFER_OVERFLOW), the buffer untouched. */
int copy_out_address(const SockAddr &address, void *addr, size_t *addrlen) noexcept;

/* Process-wide registry of the (local, remote) address pairs of shared
 * endpoints' connections: NDK refuses the same pair twice. */
bool claim_tuple(const SockAddr &local, const SockAddr &remote);
void release_tuple(const SockAddr &local, const SockAddr &remote) noexcept;

} // namespace nd

#endif /* ND_CM_H */
