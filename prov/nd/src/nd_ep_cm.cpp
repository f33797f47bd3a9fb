/*
 * nd_ep_cm.cpp: an endpoint's connection management: ND's Connect,
 * CompleteConnect, Accept, Reject (connecting side), Disconnect and
 * NotifyDisconnect on rdma_cm, and the queue pair's state transitions.
 */
#include "nd_async.h"
#include "nd_conn_request.h"
#include "nd_cq.h"
#include "nd_domain.h"
#include "nd_ep.h"
#include "nd_eq.h"
#include "nd_framing.h"
#include "nd_memlock.h"
#include "nd_srx.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_ext_nd.h>

#include <cstring>

namespace nd {

namespace {

/* The EQ entry of a connection event: fi_eq_cm_entry, then private data. */
EqEntry cm_entry(Endpoint *ep, uint32_t event, const std::vector<uint8_t> &data)
{
	EqEntry entry;
	entry.event = event;
	entry.data.resize(sizeof(fi_eq_cm_entry) + data.size());
	fi_eq_cm_entry head{};
	head.fid = &ep->ep.fid;
	head.info = nullptr;
	std::memcpy(entry.data.data(), &head, sizeof(head));
	if (!data.empty())
		std::memcpy(entry.data.data() + sizeof(head), data.data(), data.size());
	return entry;
}

void report_error(Endpoint *ep, int err, int prov_errno, const uint8_t *data = nullptr,
		  size_t len = 0)
{
	EqEntry entry;
	entry.is_error = true;
	entry.error.fid = &ep->ep.fid;
	entry.error.context = ep->ep.fid.context;
	entry.error.err = err;
	/* prov_errno is rdma_cm's status or an errno, made positive (address
	 * and route errors come as -errno); where there is none (a disconnect
	 * while accepting, a device removal) the error itself, never 0. */
	entry.error.prov_errno = prov_errno < 0 ? -prov_errno : prov_errno ? prov_errno : err;
	if (len)
		entry.err_data.assign(data, data + len);
	ND_INFO(FI_LOG_EP_CTRL, "endpoint %p: %s (provider error %d, %zu bytes of data)\n",
		static_cast<void *>(ep), fi_strerror(err), prov_errno, len);
	ep->post_event(std::move(entry));
}

/* The end of a connection attempt, as `step` (report_error) says: when
 * ND allows a retry the endpoint is idle again with a fresh id and its
 * queue pair untouched (receives posted before stay posted); otherwise what
 * is outstanding is flushed. The error entry is reported either way. */
void attempt_over(Endpoint *ep, const EpStep &step, int prov_errno, const uint8_t *data = nullptr,
		  size_t len = 0)
{
	ep->release_claimed_tuple();
	bool retry = step.next == EpState::idle;
	if (retry) {
		int ret = ep->renew_cm_id();
		if (ret) {
			ND_WARN(FI_LOG_EP_CTRL, "endpoint %p: no new rdma_cm id for a retry (%s); the endpoint is unusable\n",
				static_cast<void *>(ep), fi_strerror(-ret));
			ep->fsm.fail();
			retry = false;
		}
	}
	if (retry)
		ND_INFO(FI_LOG_EP_CTRL, "endpoint %p: %s; fi_connect may try again\n",
			static_cast<void *>(ep), fi_strerror(step.error));
	else
		ep->flush_queue_pair();
	if (!retry && ep->domain->iwarp && EpStateMachine::retryable(step.error))
		ND_WARN(FI_LOG_EP_CTRL, "endpoint %p: %s; on iWARP the attempt left the queue pair in error, so this endpoint cannot connect again (open a new one)\n",
			static_cast<void *>(ep), fi_strerror(step.error));
	report_error(ep, step.error, prov_errno, data, len);
}

std::vector<uint8_t> unframed_copy(const CmEventCopy &event, const char *what)
{
	cm::Unframed data = cm::unframe(event.private_data.data(), event.private_data.size());
	if (!data.well_formed)
		ND_WARN(FI_LOG_EP_CTRL, "%s: private data length byte exceeds the %zu bytes received; "
			"delivering %zu\n", what, event.private_data.size(), data.len);
	return std::vector<uint8_t>(data.data, data.data + data.len);
}

} // namespace

/* ---- queue pair ---- */

/* A verbs asynchronous event that ends the queue pair (nd_async.h), from
 * an EQ's progress: the link is down, everything outstanding completes in
 * error (FI_ECANCELED, as after a local shutdown), and the EQ gets one
 * error entry, FI_ECONNABORTED or FI_ENODEV. Runs under the async
 * registry's lock, which fi_close takes before anything else: the endpoint
 * and its EQ outlive the call. */
void ep_async_event(void *owner, ibv_event_type type, int error)
{
	auto *ep = static_cast<Endpoint *>(owner);
	if (ep->conn.async_failed.exchange(true))
		return; /* reported once (a device failure names every QP) */
	ND_WARN(FI_LOG_EP_CTRL, "endpoint %p: %s: the connection is lost (%s)\n", owner,
		ibv_event_type_str(type), fi_strerror(error));
	ep->flush_queue_pair();
	/* Transfers now fail as after a failed transfer, not as after a
	 * shutdown. */
	ep->data.link.on(Link::Event::failed);
	/* Without an EQ yet there is nobody to tell, and held events belong
	 * to the progress lock this call does not hold. */
	if (ep->eq)
		report_error(ep, error, cm::kAsyncEventBase + static_cast<int>(type));
}

namespace {

/* Under the EQ's progress lock, as a CM event would be: a peer that
 * stopped answering, or broke the framing, is treated as one that
 * disconnected. */
void end_connection_of(Endpoint *ep, const char *why)
{
	const EpState state = ep->fsm.state();
	if (ep->fsm.closing() || (state != EpState::connected && state != EpState::shutting_down))
		return; /* already over, or going */
	ND_WARN(FI_LOG_EP_CTRL, "endpoint %p: %s; the connection is over\n", static_cast<void *>(ep), why);
	CmEventCopy lost;
	lost.type = RDMA_CM_EVENT_DISCONNECTED;
	lost.id = ep->cm.id;
	/* FI_SHUTDOWN once, what is outstanding flushed, and a disconnect
	 * sent: the peer, if it still lives, learns it too. The CM's own
	 * DISCONNECTED, when its timeouts end, is absorbed. */
	ep_cm_event(ep, lost);
}

void end_connection_of_lost_peer(void *owner)
{
	end_connection_of(static_cast<Endpoint *>(owner), "the peer stopped answering (retries exhausted, or nothing moved for FI_ND_PEER_TIMEOUT)");
}

void end_connection_of_unframed_peer(void *owner)
{
	end_connection_of(static_cast<Endpoint *>(owner), "the peer sent a message without nd's frame");
}

/* Asks the EQ to end the connection, once whatever the reason. */
void defer_end_of_connection(Endpoint *ep, void (*end)(void *owner)) noexcept
{
	if (ep->conn.peer_lost_noted.exchange(true))
		return; /* every outstanding request fails the same way */
	/* Not queued (out of memory): the next request that fails this way
	 * tries again. */
	if (ep->eq && ep->eq->defer(end, ep))
		ep->conn.peer_lost_noted.store(false);
}

} // namespace

void ep_peer_lost(void *owner)
{
	defer_end_of_connection(static_cast<Endpoint *>(owner), end_connection_of_lost_peer);
}

void ep_peer_broke_framing(void *owner) noexcept
{
	defer_end_of_connection(static_cast<Endpoint *>(owner), end_connection_of_unframed_peer);
}

int Endpoint::create_queue_pair()
{
	int ret = setup_data_path();
	if (ret) {
		release_queues();
		return ret;
	}
	ibv_qp_init_attr attr{};
	attr.send_cq = data.tx.verbs_cq;
	attr.recv_cq = data.rx.verbs_cq;
	attr.srq = bindings.srx() ? bindings.srx()->srq.get() : nullptr;
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 0;
	attr.cap.max_send_wr = data.tx.queue->depth() + 1 + data.tx.queue->internal_slots(); /* + the close marker */
	attr.cap.max_recv_wr = data.rx.queue ? data.rx.queue->depth() : 0;
	attr.cap.max_send_sge = data.tx.iov_limit + (options.framed ? 1 : 0); /* + the header */
	attr.cap.max_recv_sge = data.rx.queue ? data.rx.iov_limit : 0;
	attr.cap.max_inline_data = data.max_inline;
	data.qp.reset(domain->make_with_room("fi_enable: ibv_create_qp",
					     [&] { return ibv_create_qp(domain->pd.get(), &attr); }));
	if (!data.qp) {
		int err = errno;
		ND_WARN(FI_LOG_EP_CTRL, "fi_enable: ibv_create_qp (tx %u, rx %u, inline %u): %s%s\n",
			data.tx.queue->depth(), data.rx.queue ? data.rx.queue->depth() : 0, data.max_inline, std::strerror(err),
			object_limit_note(err));
		release_queues();
		return fi_error_of_errno(err);
	}
	if (data.rx.queue && data.rx.queue->framing())
		framing_of(*data.rx.queue)->qp.store(data.qp.get(), std::memory_order_release);
	async::add_qp(domain->context, data.qp.get(), ep_async_event, this);
	return 0;
}

int Endpoint::move_queue_pair(ibv_qp_state state)
{
	ibv_qp_attr attr{};
	int mask = 0;
	attr.qp_state = state;
	if (rdma_init_qp_attr(cm.id, &attr, &mask)) {
		int err = errno;
		ND_WARN(FI_LOG_EP_CTRL, "rdma_init_qp_attr(state %d): %s\n", state, std::strerror(err));
		return fi_error_of_errno(err);
	}
	/* rdma_cm computes an active id's INIT attributes before its IB CM id
	 * exists, and then grants no remote access at all (librdmacm, which
	 * owns its QPs, repeats INIT at RTR for this reason). Remote access is
	 * the registration's business; reads and atomics are bounded by the
	 * negotiated max_dest_rd_atomic below. */
	if (state == IBV_QPS_INIT) {
		attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				       IBV_ACCESS_REMOTE_READ | (domain->atomics ? IBV_ACCESS_REMOTE_ATOMIC : 0);
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	/* The queue pair gets exactly the negotiated read limits. */
	if (state == IBV_QPS_RTR) {
		attr.max_dest_rd_atomic = static_cast<uint8_t>(conn.effective.inbound);
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC;
		/* rdma_cm leaves the kernel CM's 0 (655 ms): see Params. */
		attr.min_rnr_timer = domain->min_rnr_timer;
		mask |= IBV_QP_MIN_RNR_TIMER;
	} else if (state == IBV_QPS_RTS) {
		attr.max_rd_atomic = static_cast<uint8_t>(conn.effective.outbound);
		mask |= IBV_QP_MAX_QP_RD_ATOMIC;
		/* On iWARP every read is signaled: a request behind a read that
		 * completes before it waits for the read's own completion to
		 * retire (WorkQueue::retire_in_read_order). */
		data.read_signal_every = domain->iwarp ? 1 : std::max<uint32_t>(conn.effective.outbound / 2, 1);
		/* rdma_cm fills the counts from the CM messages: the active
		 * side's RNR count is the one the accepter sent, so each side's
		 * own parameters are set here, where they govern its sends. */
		ND_INFO(FI_LOG_EP_CTRL, "endpoint %p: rdma_cm's RTS attributes: ACK timeout %u, retry %u, RNR retry %u (mask 0x%x)\n",
			static_cast<void *>(this), attr.timeout, attr.retry_cnt, attr.rnr_retry, mask);
		attr.retry_cnt = domain->retry_count;
		attr.rnr_retry = domain->rnr_retry;
		mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
		if (domain->ack_timeout >= 0) {
			attr.timeout = static_cast<uint8_t>(domain->ack_timeout);
			mask |= IBV_QP_TIMEOUT;
		}
	}
	int rc = ibv_modify_qp(data.qp.get(), &attr, mask);
	if (rc) {
		ND_WARN(FI_LOG_EP_CTRL, "ibv_modify_qp(state %d): %s\n", state, std::strerror(rc));
		return fi_error_of_errno(rc);
	}
	if (state == IBV_QPS_INIT)
		post_pending_receives();
	else if (state == IBV_QPS_RTS) {
		ND_INFO(FI_LOG_EP_CTRL, "endpoint %p: queue pair %u ready to send; RDMA reads: %u inbound, %u outbound\n",
			static_cast<void *>(this), data.qp->qp_num, conn.effective.inbound, conn.effective.outbound);
		data.link.on(Link::Event::ready);
	}
	return 0;
}

/* The queue pair's last steps, to RTR and RTS with the negotiated limits.
 * On iWARP the CM moves it to RTS itself once MPA is done, with the read
 * limits MPA negotiated: siw refuses RTS from the application (it has no
 * socket then) and refuses to accept on a queue pair past RTR. The link is
 * up there when the connection is (ESTABLISHED, or the reply that is it). */
int Endpoint::ready_queue_pair()
{
	if (domain->iwarp) {
		ND_INFO(FI_LOG_EP_CTRL, "endpoint %p: queue pair %u in RTS by the iWARP CM; RDMA reads: %u inbound, %u outbound\n",
			static_cast<void *>(this), data.qp->qp_num, conn.effective.inbound, conn.effective.outbound);
		return 0;
	}
	int ret = move_queue_pair(IBV_QPS_RTR);
	return ret ? ret : move_queue_pair(IBV_QPS_RTS);
}

/* Moves the queue pair to the error state: the hardware completes whatever
 * is outstanding with a flush status. */
void Endpoint::flush_queue_pair() noexcept
{
	if (!data.qp)
		return;
	/* Under both posting locks, which every post holds while it looks at
	 * the link and posts: a request either reached the queue pair before
	 * the error state, and is flushed with the rest, or finds the link
	 * flushed and is refused. None may reach it after: soft-iWARP keeps a
	 * request posted to a queue pair in the error state in its ring and
	 * never completes it. */
	std::lock_guard<OptionalLock> rx_guard(data.rx.lock);
	std::lock_guard<OptionalLock> tx_guard(data.tx.lock);
	data.link.on(Link::Event::flushed);
	/* Requests held back by FI_MORE go first, to be flushed with the rest. */
	if (data.batch)
		post_deferred("flushing the queue pair");
	ibv_qp_attr attr{};
	attr.qp_state = IBV_QPS_ERR;
	if (int rc = ibv_modify_qp(data.qp.get(), &attr, IBV_QP_STATE))
		ND_INFO(FI_LOG_EP_CTRL, "endpoint %p: ibv_modify_qp(IBV_QPS_ERR): %s\n", static_cast<void *>(this),
			std::strerror(rc));
	else
		data.moved_to_error = true;
	/* Receives still waiting for INIT go to the error state's flush. */
	if (!data.recv_ready() && data.rx.queue)
		post_pending_receives_locked();
}

/* ---- application calls ---- */

int Endpoint::connect(const void *addr, const void *param, size_t paramlen)
{
	if (!addr) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_connect: addr is NULL\n");
		return -FI_EINVAL;
	}
	SockAddr dest;
	const auto family = static_cast<const sockaddr *>(addr)->sa_family;
	if (sockaddr_copy(addr, family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in),
			  &dest)) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_connect: not an IPv4/IPv6 address\n");
		return -FI_EINVAL;
	}
	std::vector<uint8_t> wire;
	if (cm::frame(param, paramlen, domain->cm_limits.connect, &wire)) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_connect: %zu bytes of private data; the limit is %u\n",
			paramlen, domain->cm_limits.connect);
		return -FI_EINVAL;
	}
	if (!eq) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_connect: bind an EQ first\n");
		return -FI_ENOEQ;
	}
	std::lock_guard<Mutex> guard(eq->progress_lock());
	if (!fsm.enabled() && fsm.state() == EpState::idle) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_connect: call fi_enable first\n");
		return -FI_EOPBADSTATE;
	}
	int ret;
	if (fsm.state() == EpState::idle && fsm.side() == cm::Side::active) {
		ret = ensure_cm_id(eq, cm, &target);
		if (ret)
			return ret;
		if (options.shared_addr && fsm.bound()) {
			/* Made before the claim, so that a claim is always
			 * recorded (bad_alloc: fi_connect's guarded says
			 * -FI_ENOMEM). */
			EndpointExtras &extras = bindings.extras_made();
			const SockAddr local = local_address(cm.id);
			if (!claim_tuple(local, dest)) {
				ND_WARN(FI_LOG_EP_CTRL, "fi_connect: %s to %s is already connected\n",
					local.to_string().c_str(), dest.to_string().c_str());
				return -FI_EADDRINUSE;
			}
			extras.tuple_local = local;
			extras.tuple_claimed = true;
		}
	}
	ret = fsm.begin_connect();
	if (ret) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_connect: the endpoint is %s (%s)\n", to_string(fsm.state()),
			fi_strerror(-ret));
		return ret;
	}
	/* Resolve from our own address, so that the id lands on this domain's
	 * device (an unbound id would take whatever the route says). */
	SockAddr source;
	sockaddr *source_arg = nullptr;
	if (!fsm.bound() && setup->source.length()) {
		source = setup->source;
		source.set_port(0);
		source_arg = &source.sa;
	}
	conn.peer = dest;
	setup->connect_wire = std::move(wire);
	if (rdma_resolve_addr(cm.id, source_arg, &dest.sa, domain->resolve_timeout_ms)) {
		int err = errno;
		ND_WARN(FI_LOG_EP_CTRL, "fi_connect to %s: %s\n", dest.to_string().c_str(),
			std::strerror(err));
		const int ret = fi_error_of_errno(err);
		/* Nothing was sent: the call fails, and whether the endpoint may
		 * try again follows ND's rule as for a reported failure. */
		if (fsm.attempt_failed(-ret).next == EpState::idle && renew_cm_id())
			fsm.fail();
		release_claimed_tuple();
		return ret;
	}
	return 0;
}

int Endpoint::accept(const void *param, size_t paramlen)
{
	std::vector<uint8_t> wire;
	if (cm::frame(param, paramlen, domain->cm_limits.accept, &wire)) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_accept: %zu bytes of private data; the limit is %u\n",
			paramlen, domain->cm_limits.accept);
		return -FI_EINVAL;
	}
	if (!eq) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_accept: bind an EQ first\n");
		return -FI_ENOEQ;
	}
	std::lock_guard<Mutex> guard(eq->progress_lock());
	if (!fsm.enabled() && fsm.state() == EpState::idle && conn.has_request) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_accept: call fi_enable first\n");
		return -FI_EOPBADSTATE;
	}
	int ret = fsm.begin_accept(conn.has_request);
	if (ret) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_accept: %s\n",
			conn.has_request ? "the endpoint is past accepting" : "no connection request to accept");
		return ret;
	}
	if (conn.request_peer_gone) {
		ND_INFO(FI_LOG_EP_CTRL, "fi_accept: the requester already gave up\n");
		fsm.fail();
		return -FI_ECONNABORTED;
	}
	/* ND Accept: our limits capped by the adapter and by the offer (on
	 * iWARP the requester's own, from its offer: see fi_endpoint). */
	conn.effective = cm::negotiate(offered(), conn.peer_offer.inbound, conn.peer_offer.outbound);
	conn.negotiated = true;
	if ((ret = move_queue_pair(IBV_QPS_INIT)) || (!domain->iwarp && (ret = ready_queue_pair()))) {
		fsm.fail();
		flush_queue_pair();
		/* The kernel delivers no event for a request until it is
		 * accepted: a requester that gave up (its CM sent a REJ) shows
		 * only as a CM id that is no longer connecting, which
		 * rdma_init_qp_attr refuses with EINVAL. ND: aborted. */
		if (ret == -FI_EINVAL) {
			ND_INFO(FI_LOG_EP_CTRL, "fi_accept: the requester from %s is gone\n",
				conn.peer.to_string().c_str());
			return -FI_ECONNABORTED;
		}
		return ret;
	}
	take_credit_offer(setup->request_credit_offer, true);
	add_credit_offer(&wire, conn.effective, true);
	rdma_conn_param param_out{};
	param_out.private_data = wire.data();
	param_out.private_data_len = static_cast<uint8_t>(wire.size());
	param_out.responder_resources = static_cast<uint8_t>(conn.effective.inbound);
	param_out.initiator_depth = static_cast<uint8_t>(conn.effective.outbound);
	param_out.flow_control = 1;
	param_out.retry_count = domain->retry_count;
	param_out.rnr_retry_count = domain->rnr_retry;
	param_out.qp_num = data.qp->qp_num;
	if (rdma_accept(cm.id, &param_out)) {
		int err = errno;
		ND_WARN(FI_LOG_EP_CTRL, "fi_accept: rdma_accept: %s\n", std::strerror(err));
		fsm.fail();
		return requester_gave_up(err) ? -FI_ECONNABORTED : fi_error_of_errno(err);
	}
	return 0;
}

int Endpoint::shutdown(uint64_t flags)
{
	if (flags) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_shutdown: flags 0x%llx not supported\n",
			static_cast<unsigned long long>(flags));
		return -FI_EBADFLAGS;
	}
	if (!eq)
		return -FI_ENOTCONN;
	std::lock_guard<Mutex> guard(eq->progress_lock());
	int ret = fsm.begin_shutdown();
	if (ret) {
		ND_INFO(FI_LOG_EP_CTRL, "fi_shutdown: the endpoint is %s\n", to_string(fsm.state()));
		return ret;
	}
	/* ND Disconnect: flush everything outstanding, tell the peer. */
	flush_queue_pair();
	if (rdma_disconnect(cm.id))
		ND_INFO(FI_LOG_EP_CTRL, "fi_shutdown: rdma_disconnect: %s\n", std::strerror(errno));
	return 0;
}

namespace {

/* ND CompleteConnect: the queue pair takes the negotiated limits and the
 * connection is established (rdma_establish sends the RTU). iWARP has no
 * RTU: its connection was established when MPA's reply came, so completing
 * is local, the queue pair already in RTS. */
int complete(Endpoint *ep)
{
	int ret;
	if ((ret = ep->ready_queue_pair()))
		return ret;
	if (ep->domain->iwarp) {
		ep->data.link.on(Link::Event::ready);
		ep->fsm.completed();
		ep->write_ready(); /* first: the accepter waits for it */
		ep->advertise_credits(false); /* receives posted since the offer */
		return 0;
	}
	if (rdma_establish(ep->cm.id)) {
		int err = errno;
		ND_WARN(FI_LOG_EP_CTRL, "rdma_establish: %s\n", std::strerror(err));
		return fi_error_of_errno(err);
	}
	ep->fsm.completed();
	return 0;
}

} // namespace

int Endpoint::complete_connect()
{
	if (!eq)
		return -FI_ENOTCONN;
	std::lock_guard<Mutex> guard(eq->progress_lock());
	int ret = fsm.begin_complete();
	if (ret) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_nd_complete_connect: the endpoint is %s, not waiting to complete\n",
			to_string(fsm.state()));
		return ret;
	}
	ret = complete(this);
	if (ret) {
		/* The queue pair may already be in RTS (a failed rdma_establish):
		 * the link must not stay up with nothing to carry it. */
		fsm.fail();
		flush_queue_pair();
		return ret;
	}
	post_event(cm_entry(this, FI_CONNECTED, {}));
	release_setup();
	return 0;
}

int Endpoint::reject_connect(const void *param, size_t paramlen)
{
	std::vector<uint8_t> wire;
	if (cm::frame(param, paramlen, domain->cm_limits.reject, &wire)) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_nd_reject_connect: %zu bytes of private data; the limit is %u\n",
			paramlen, domain->cm_limits.reject);
		return -FI_EINVAL;
	}
	if (!eq)
		return -FI_ENOTCONN;
	std::lock_guard<Mutex> guard(eq->progress_lock());
	if (domain->iwarp && paramlen) {
		/* MPA's reply ended the exchange: the connection exists, and
		 * only a disconnect, which carries no data, can end it. */
		ND_WARN(FI_LOG_EP_CTRL, "fi_nd_reject_connect: iWARP cannot carry private data after the accepter's reply (%zu bytes)\n",
			paramlen);
		return -FI_EOPNOTSUPP;
	}
	int ret = fsm.begin_reject();
	if (ret) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_nd_reject_connect: the endpoint is %s, not waiting to complete\n",
			to_string(fsm.state()));
		return ret;
	}
	if (domain->iwarp) {
		/* The accepter, already connected, hears FI_SHUTDOWN. */
		flush_queue_pair();
		if (rdma_disconnect(cm.id))
			ND_INFO(FI_LOG_EP_CTRL, "fi_nd_reject_connect: rdma_disconnect: %s\n",
				std::strerror(errno));
		return 0;
	}
	if (rdma_reject(cm.id, wire.data(), static_cast<uint8_t>(wire.size()))) {
		int err = errno;
		ND_WARN(FI_LOG_EP_CTRL, "fi_nd_reject_connect: rdma_reject: %s\n", std::strerror(err));
		return fi_error_of_errno(err);
	}
	return 0;
}

/* ---- events ---- */

void Endpoint::post_event(EqEntry &&entry)
{
	if (eq)
		eq->push(std::move(entry));
	else if (setup)
		setup->held_events.push_back(std::move(entry));
	else /* never: the setup state goes once an EQ is bound */
		ND_WARN(FI_LOG_EP_CTRL, "endpoint %p: an event with no EQ bound is dropped\n", static_cast<void *>(this));
}

void Endpoint::on_cm_event(const CmEventCopy &event)
{
	const EpState before = fsm.state();
	/* A request taken by fi_endpoint and not yet answered: a requester
	 * that gives up now is the endpoint's to learn (fi_accept says so). */
	if (conn.has_request && before == EpState::idle && cm::peer_gave_up(event.type)) {
		ND_INFO(FI_LOG_EP_CTRL, "endpoint %p: %s before fi_accept; the requester gave up\n",
			static_cast<void *>(this), cm::event_name(event.type));
		conn.request_peer_gone = true;
	}
	EpStep step = fsm.on_event(event.type, event.status);
	switch (step.action) {
	case EpAction::absorb:
		ND_INFO(FI_LOG_EP_CTRL, "endpoint %p (%s): %s absorbed\n", static_cast<void *>(this),
			to_string(before), cm::event_name(event.type));
		return;
	case EpAction::none:
		return;
	case EpAction::resolve_route:
		if (cm.id->verbs != domain->context) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_connect: %s is reached through another device than this domain's\n",
				conn.peer.to_string().c_str());
			attempt_over(this, fsm.attempt_failed(FI_EHOSTUNREACH), EHOSTUNREACH);
			return;
		}
		if (rdma_resolve_route(cm.id, domain->resolve_timeout_ms)) {
			int err = errno;
			ND_WARN(FI_LOG_EP_CTRL, "rdma_resolve_route to %s: %s\n", conn.peer.to_string().c_str(),
				std::strerror(err));
			attempt_over(this, fsm.attempt_failed(-fi_error_of_errno(err)), err);
		}
		return;
	case EpAction::connect: {
		int ret = move_queue_pair(IBV_QPS_INIT);
		if (ret) {
			fsm.fail();
			attempt_over(this, {EpState::failed, EpAction::report_error, -ret}, -ret);
			return;
		}
		const cm::ReadLimits offer = offered();
		std::vector<uint8_t> &wire = setup->connect_wire;
		add_credit_offer(&wire, offer, false);
		rdma_conn_param param{};
		param.private_data = wire.data();
		param.private_data_len = static_cast<uint8_t>(wire.size());
		param.responder_resources = static_cast<uint8_t>(offer.inbound);
		param.initiator_depth = static_cast<uint8_t>(offer.outbound);
		param.flow_control = 1;
		param.retry_count = domain->retry_count;
		param.rnr_retry_count = domain->rnr_retry;
		param.qp_num = data.qp->qp_num;
		if (rdma_connect(cm.id, &param)) {
			int err = errno;
			ND_WARN(FI_LOG_EP_CTRL, "rdma_connect to %s: %s\n", conn.peer.to_string().c_str(),
				std::strerror(err));
			attempt_over(this, fsm.attempt_failed(-fi_error_of_errno(err)), err);
		}
		wire.clear();
		return;
	}
	case EpAction::report_response:
	case EpAction::complete: {
		/* ND: the limits the peer granted, our own capped by them (on
		 * iWARP as its offer says, the CM's being MPA's settled ones). */
		uint8_t granted_in = event.responder_resources, granted_out = event.initiator_depth;
		const std::optional<cm::CreditOffer> offer = cm::credit_offer_of(event.private_data);
		if (domain->iwarp && offer) {
			granted_in = offer->outbound;
			granted_out = offer->inbound;
		}
		conn.peer_offer = cm::peer_offer(granted_in, granted_out);
		conn.effective = cm::negotiate(offered(), granted_in, granted_out);
		conn.negotiated = true;
		const std::vector<uint8_t> response_data = unframed_copy(event, "connect response");
		take_credit_offer(offer, false);
		if (step.action == EpAction::report_response) {
			post_event(cm_entry(this, FI_ND_CONNRESP, response_data));
			return;
		}
		int ret = complete(this);
		if (ret) {
			fsm.fail();
			attempt_over(this, {EpState::failed, EpAction::report_error, FI_ECONNABORTED}, -ret);
			return;
		}
		post_event(cm_entry(this, FI_CONNECTED, response_data));
		release_setup();
		return;
	}
	case EpAction::report_connected:
		/* iWARP: the CM took the queue pair to RTS just now. */
		if (domain->iwarp) {
			data.link.on(Link::Event::ready);
			advertise_credits(false); /* receives posted since the offer */
		}
		post_event(cm_entry(this, FI_CONNECTED, {}));
		release_setup();
		return;
	case EpAction::report_error: {
		std::vector<uint8_t> data;
		if (event.type == RDMA_CM_EVENT_REJECTED)
			data = unframed_copy(event, "reject");
		attempt_over(this, step, cm::prov_errno_of(event.type, event.status, step.error),
			     data.data(), data.size());
		return;
	}
	case EpAction::report_shutdown:
		/* ND NotifyDisconnect. Answer the peer's disconnect (DREP) and
		 * flush what is outstanding here. */
		flush_queue_pair();
		if (before == EpState::connected)
			rdma_disconnect(cm.id);
		post_event(cm_entry(this, FI_SHUTDOWN, {}));
		return;
	}
}

void ep_cm_event(void *owner, const CmEventCopy &event)
{
	auto *ep = static_cast<Endpoint *>(owner);
	try {
		ep->on_cm_event(event);
	} catch (const std::exception &e) {
		ND_WARN(FI_LOG_EP_CTRL, "endpoint %p: %s handling %s\n", owner, e.what(),
			cm::event_name(event.type));
	} catch (...) {
		/* Called from the EQ's progress, inside a noexcept entry point. */
		ND_WARN(FI_LOG_EP_CTRL, "endpoint %p: unknown exception handling %s\n", owner,
			cm::event_name(event.type));
	}
}

} // namespace nd
