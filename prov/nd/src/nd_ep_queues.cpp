/*
 * nd_ep_queues.cpp: an endpoint's data path set up at fi_enable (the send
 * and receive queues, the CQ reservations, what retiring a request touches,
 * the limits every post reads: DataPath in nd_ep.h) and released at close,
 * the send ring drained with a marker.
 */
#include "nd_async.h"
#include "nd_cntr.h"
#include "nd_cq.h"
#include "nd_domain.h"
#include "nd_ep.h"
#include "nd_framing.h"
#include "nd_info.h"
#include "nd_multi_recv.h"
#include "nd_srx.h"
#include "nd_stx.h"

#include <atomic>
#include <cstring>

namespace nd {

namespace {

/* The CQ's StallWatch (nd_cq.h) found nothing moving: the queue pair goes
 * to the error state at once (under the CQ's lock: a verbs call, no lock
 * of nd's), whether or not the EQ is read. */
void stall_queue_pair(void *owner) noexcept
{
	auto *ep = static_cast<Endpoint *>(owner);
	if (!ep->data.qp)
		return;
	ibv_qp_attr attr{};
	attr.qp_state = IBV_QPS_ERR;
	if (int rc = ibv_modify_qp(ep->data.qp.get(), &attr, IBV_QP_STATE))
		ND_WARN(FI_LOG_EP_DATA, "endpoint %p: ibv_modify_qp(ERR): %s\n", owner, std::strerror(rc));
}

/* A credit write that found the ring full goes when room is made, even if
 * this side never posts again (its peer may be waiting for it). */
void send_waiting_credits(void *owner) noexcept
{
	auto *ep = static_cast<Endpoint *>(owner);
	if (ep->data.credits->write_pending())
		ep->advertise_credits(true);
}

/* The same where posters and pollers may run at once (a locked endpoint):
 * a poster that found the ring full holds its write, then looks at the
 * ring again (Endpoint::write_credits); this poller retired before it
 * looks at the hold. A full fence on each side, between its store and its
 * load, makes at least one of them see the other's, so the write is not
 * left with no completion to come for it. */
void send_waiting_credits_locked(void *owner) noexcept
{
	std::atomic_thread_fence(std::memory_order_seq_cst);
	send_waiting_credits(owner);
}

/* The CQ's look (QueueHooks::look): a credit write held for want of
 * something no completion announces (an iWARP accepter's, until the
 * connector's ready write lands) goes once that has come; a connector
 * repeats its ready write (nd_credits.h, "Who sends first"). */
void look_at_credits(void *owner) noexcept
{
	send_waiting_credits_locked(owner);
	static_cast<Endpoint *>(owner)->repeat_ready();
}

/* What a send queue tells its endpoint (nd_wq.h). */
constexpr QueueHooks kSendHooks{ep_peer_lost, nullptr, stall_queue_pair, nullptr};
constexpr QueueHooks kSendHooksWithCredits{ep_peer_lost, send_waiting_credits, stall_queue_pair, look_at_credits};
constexpr QueueHooks kSendHooksWithCreditsLocked{ep_peer_lost, send_waiting_credits_locked, stall_queue_pair,
						 look_at_credits};

} // namespace

CompletionQueue *EndpointBindings::own_cq() const noexcept
{
	return tx_cq && tx_cq->is_internal() ? tx_cq : rx_cq && rx_cq->is_internal() ? rx_cq : nullptr;
}

int Endpoint::setup_data_path()
{
	/* A shared transmit context's attributes stand for the endpoint's own. */
	if (!setup) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_enable: the endpoint is past connecting\n");
		return -FI_EOPBADSTATE;
	}
	const RxAttributes &rx_attr = setup->rx;
	const TxAttributes tx_attr = bindings.stx() ? TxAttributes::of(bindings.stx()->attr) : setup->tx;
	const uint32_t tx = static_cast<uint32_t>(tx_attr.size ? tx_attr.size : 1);
	const uint32_t rx = static_cast<uint32_t>(rx_attr.size ? rx_attr.size : 1);
	data.tx.iov_limit = static_cast<uint32_t>(tx_attr.iov_limit ? tx_attr.iov_limit : 1);
	data.rx.iov_limit = static_cast<uint32_t>(rx_attr.iov_limit ? rx_attr.iov_limit : 1);
	if (data.tx.iov_limit > kMaxSge || data.rx.iov_limit > kMaxSge) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_enable: iov_limit %u/%u > %zu\n", data.tx.iov_limit, data.rx.iov_limit,
			kMaxSge);
		return -FI_EINVAL;
	}
	/* iWARP: receive credits, whose writes take send-ring slots of their
	 * own and complete into the send CQ (nd_credits.h). */
	const uint32_t credit_slots = wants_credits() ? ReceiveCredits::kWriteSlots : 0;
	/* Where the CQs can grow, the rings start with room for one request
	 * and grow with what is in flight (WorkQueue::grow, at the post that
	 * finds one full), their CQ reservations with them. Rings whose slots
	 * index other per-slot state (a framed endpoint's headers, receive
	 * credits' writes) or count against a shared context's budget keep
	 * their whole depth. */
	const bool small_rings = domain->cqs_resize() && !options.framed && !credit_slots;
	data.tx.queue = std::make_unique<SendQueue>(tx, credit_slots, small_rings && !bindings.stx() ? 1 : 0);
	if (!bindings.srx())
		data.rx.queue = std::make_unique<ReceiveQueue>(rx, small_rings ? 1 : 0);
	/* Their rings are fixed (not small_rings): remote CQ data's slots
	 * follow the receive ring's, one each, and the sources of this side's
	 * slot writes the send ring's (nd_credits.h). A framed endpoint
	 * carries its data in its frame header instead. */
	if (credit_slots) {
		const uint32_t data_slots = options.framed ? 0 : data.rx.queue->ring_size();
		const uint32_t send_slots = data_slots ? data.tx.queue->ring_size() : 0;
		if (!(data.credits = ReceiveCredits::open(domain->pd.get(), data_slots, send_slots)))
			return -FI_ENOMEM;
	}
	const uint32_t rx_completions = bindings.srx() ? bindings.srx()->pool->depth() : data.rx.queue->limit();
	/* The request that drains the send queue at close (post_drain_marker)
	 * reserves its entry then where rings grow: with thousands of
	 * endpoints on one CQ, one entry each is much of what they reserve at
	 * rest. */
	data.marker_reserved = !small_rings || bindings.stx();
	const uint32_t tx_completions = data.tx.queue->limit() + (data.marker_reserved ? 1 : 0) + credit_slots;
	if (!bindings.user_tx_cq || !bindings.user_rx_cq) {
		/* Sized for the reservations below, so that they never resize
		 * it (the close marker's, when not among them, may). */
		fi_cq_attr attr{};
		attr.size = (bindings.user_tx_cq ? 0 : tx_completions) + (bindings.user_rx_cq ? 0 : rx_completions);
		attr.format = FI_CQ_FORMAT_CONTEXT;
		/* A counter with a wait object sleeps on its CQs' channels. */
		bool counter_waits = false;
		bindings.for_each_counter([&](Counter *c) { counter_waits |= c->waitable; });
		attr.wait_obj = counter_waits ? FI_WAIT_FD : FI_WAIT_NONE;
		CompletionQueue *own = nullptr;
		int ret = CompletionQueue::open(domain, &attr, nullptr, true, &own);
		if (ret)
			return ret;
		bindings.tx_cq = bindings.user_tx_cq ? bindings.user_tx_cq : own;
		bindings.rx_cq = bindings.user_rx_cq ? bindings.user_rx_cq : own;
	} else {
		bindings.tx_cq = bindings.user_tx_cq;
		bindings.rx_cq = bindings.user_rx_cq;
	}
	/* Both sides on one CQ reserve in one step, so that a CQ that has to
	 * grow grows once (on Soft-RoCE each resize is a system call and a new
	 * mapping of the queue, and connection setup paid for two). */
	const bool one_cq = bindings.tx_cq == bindings.rx_cq;
	/* What the rings may grow to: their depths. */
	const uint32_t tx_promise = data.tx.queue->depth() + 1 + credit_slots;
	const uint32_t rx_promise = bindings.srx() ? rx_completions : data.rx.queue->depth();
	data.tx.promised = tx_promise + (one_cq ? rx_promise : 0);
	int ret = bindings.tx_cq->reserve(static_cast<int>(tx_completions + (one_cq ? rx_completions : 0)),
					  static_cast<int>(data.tx.promised), &data.tx.verbs_cq);
	if (ret) {
		data.tx.promised = 0;
		return ret;
	}
	/* One step on one CQ: both directions complete into the same verbs
	 * CQ, and the receive side's share goes back with the send side's. */
	data.tx.reserved = tx_completions + (one_cq ? rx_completions : 0);
	data.rx.verbs_cq = data.tx.verbs_cq;
	if (!one_cq) {
		if ((ret = bindings.rx_cq->reserve(static_cast<int>(rx_completions), static_cast<int>(rx_promise),
						   &data.rx.verbs_cq)))
			return ret;
		data.rx.reserved = rx_completions;
		data.rx.promised = rx_promise;
	}

	/* What retiring a request touches (nd_wq.h): the counters bound for its
	 * kind (bound before fi_enable), and this endpoint's link. */
	auto cells = [](Counter *c) { return c ? c->cells() : CounterCells{}; };
	RetireTargets send_targets;
	send_targets.link = &data.link;
	send_targets.hooks = !data.credits		 ? &kSendHooks
			     : data.tx.lock.enabled() ? &kSendHooksWithCreditsLocked
						      : &kSendHooksWithCredits;
	send_targets.owner = this;
	send_targets.flush_breaks_link = domain->iwarp;
	send_targets.reads_complete_late = domain->iwarp;
	send_targets.counters[static_cast<size_t>(CounterKind::send)] = cells(bindings.counter(CounterKind::send));
	send_targets.counters[static_cast<size_t>(CounterKind::read)] = cells(bindings.counter(CounterKind::read));
	send_targets.counters[static_cast<size_t>(CounterKind::write)] = cells(bindings.counter(CounterKind::write));
	data.tx.queue->set_targets(send_targets);
	if (watches_stalls())
		bindings.tx_cq->watch_stalls(data.tx.queue.get(), domain->stall_timeout_s);
	if (bindings.stx())
		data.tx.queue->set_budget(bindings.stx()->budget);
	if (!bindings.srx()) {
		RetireTargets recv_targets;
		recv_targets.link = &data.link;
		recv_targets.flush_breaks_link = domain->iwarp;
		if (data.credits)
			recv_targets.data_slots = data.credits->data_slots();
		recv_targets.counters[static_cast<size_t>(CounterKind::recv)] = cells(bindings.counter(CounterKind::recv));
		data.rx.queue->set_targets(recv_targets);
	}
	/* Reading a bound counter progresses the CQs its completions reach. */
	bindings.counters_watch = true;
	int watch_error = 0;
	bindings.for_each_counter([&](Counter *c) {
		if (!watch_error)
			watch_error = c->watch(bindings.tx_cq);
		if (!watch_error && bindings.rx_cq != bindings.tx_cq)
			watch_error = c->watch(bindings.rx_cq);
	});
	if (watch_error)
		return watch_error;
	update_signal_intervals();
	data.max_inline = static_cast<uint32_t>(tx_attr.inject_size);
	data.read_fence = ((tx_attr.msg_order | rx_attr.msg_order) & kFencedOrder) ? IBV_SEND_FENCE : 0;
	/* Where it fences, fi_send, fi_write and fi_read go their general
	 * way (post_one leaves an endpoint with extras to it), which decides
	 * the fence; fi_inject's fast path is left only while a fence is due
	 * (SlowTx::fence, sync_fence). */
	if (data.read_fence) {
		ND_INFO(FI_LOG_EP_CTRL, "endpoint %p: a send or write after reads carries a fence (FI_ORDER_WAR/SAR)\n",
			static_cast<void *>(this));
		(void)bindings.extras_made();
	}
	/* A work request carries at most UINT32_MAX bytes (ibv_sge::length,
	 * ibv_wc::byte_len): the fast paths test this bound alone. */
	data.max_msg = std::min<size_t>(setup->max_msg_size ? setup->max_msg_size : UINT32_MAX, UINT32_MAX);
	if (options.framed) {
		/* The header rides inline too; a message fits a receive buffer. */
		data.max_inline += static_cast<uint32_t>(kFrameHeaderSize);
		data.max_msg = std::min(data.max_msg, domain->tagged_msg_size);
		if (int ret = setup_framing(rx))
			return ret;
	}
	/* FI_MORE is a promise about the next call, so it is taken from a
	 * call's own flags only, never as a default for every call. */
	data.tx.op_flags = tx_attr.op_flags & ~FI_MORE;
	data.rx.op_flags = rx_attr.op_flags;
	/* The locks were switched on with the endpoint (its constructor); the
	 * posts that take them go out of line. Where they lock, a CQ's poller
	 * that writes this endpoint's receive credits on its send queue
	 * (flush_pending_credits, by try_lock) meets the poster there. */
	const bool locked = data.tx.lock.enabled();
	/* Sends on an endpoint with receive credits look at them first. */
	const bool injects_counted = bindings.counter(CounterKind::send) || bindings.counter(CounterKind::write);
	data.link.set_slow_tx(static_cast<uint8_t>((locked ? SlowTx::locked : 0) | (bindings.stx() ? SlowTx::shared : 0) |
						   (data.credits ? SlowTx::credits : 0) |
						   (injects_counted ? SlowTx::counted : 0)));
	/* Where credits are the one reason for the slow path, the one-buffer
	 * calls' fast paths keep them: entry points of their own, so that an
	 * endpoint without credits tests nothing for them. */
	if (data.credits && !options.framed) {
		ep.msg = &ep_credit_msg_ops;
		ep.rma = &ep_credit_rma_ops;
	}
	/* Receives: the bits fi_enable fixes (not_ready and multi are kept
	 * where they change). */
	data.recv_reports = !bindings.rx_selective || (data.rx.op_flags & FI_COMPLETION);
	const bool recv_flags_slow = (data.rx.op_flags & FI_MULTI_RECV) || (data.recv_reports && !bindings.user_rx_cq);
	data.set_slow_rx(static_cast<uint8_t>((locked ? SlowRx::locked : 0) | (domain->iwarp ? SlowRx::iwarp : 0) |
					      (bindings.srx() || options.framed ? SlowRx::other : 0) |
					      (recv_flags_slow ? SlowRx::op_flags : 0)),
			 true);
	return 0;
}

bool Endpoint::grow_queue(bool send) noexcept
{
	WorkQueue &queue = send ? static_cast<WorkQueue &>(*data.tx.queue) : *data.rx.queue;
	CompletionQueue *cq = send ? bindings.tx_cq : bindings.rx_cq;
	/* Both directions on one CQ reserve as one (setup_data_path). */
	uint32_t *reserved = send || bindings.tx_cq == bindings.rx_cq ? &data.tx.reserved : &data.rx.reserved;
	if (!queue.growth() || cq->grow(queue, send ? data.tx.verbs_cq : data.rx.verbs_cq, reserved) <= 0)
		return false;
	if (send)
		update_signal_intervals();
	return true;
}

/* Every signal_interval-th send-queue request is signaled, so that the
 * unsignaled ones before it retire: half what the ring holds now, so that
 * a ring that started small fills only when that many requests are in
 * flight at once (a ping-pong signals every send and never grows the ring;
 * a stream grows it, and signals less often as it does). */
void Endpoint::update_signal_intervals() noexcept
{
	/* An unsignaled request retires only when a later one of its own
	 * queue completes; under a shared budget, requests that completed but
	 * wait for that could hold the budget that the signaled one needs. So
	 * every request on a shared transmit context is signaled. */
	data.tx.queue->set_signal_interval(bindings.stx() ? 1 : std::max<uint32_t>(data.tx.queue->limit() / 2, 1));
}

/* At close (or when fi_enable fails), after the queue pair was flushed:
 * every request still outstanding completes (FI_ECANCELED) into its CQ
 * before the records go. The bindings stay (see unbind_all). */
void Endpoint::release_queues() noexcept
{
	constexpr int kDrainMs = 2000;
	if (data.tx.queue && watches_stalls())
		bindings.tx_cq->unwatch_stalls(data.tx.queue.get());
	if (data.rx.queue && data.rx.queue->framing()) {
		/* Receives waiting in nd complete now; nd's own buffers are
		 * flushed with the queue pair and not reposted. */
		Framing *framing = framing_of(*data.rx.queue);
		framing->qp.store(nullptr, std::memory_order_release);
		framing->cancel_all(*bindings.rx_cq);
	}
	post_drain_marker();
	/* What is not flushed in time stays with the CQ, which keeps the
	 * records until their completions come. */
	auto release = [&](auto &queue, CompletionQueue *cq) {
		if (!queue || !cq || cq->drain(*queue, kDrainMs) || cq->is_internal())
			return;
		if (MultiRecv *const multi = queue->multi()) {
			/* The queue pair goes below: nothing more reaches it. */
			std::lock_guard<Mutex> hold(multi->lock);
			multi->qp = nullptr;
		}
		ND_WARN(FI_LOG_EP_CTRL, "fi_close(ep): %llu request(s) not flushed yet; the CQ keeps their records\n",
			static_cast<unsigned long long>(queue->outstanding()));
		cq->adopt_orphan(AnyQueue(queue.release()));
	};
	release(data.tx.queue, bindings.tx_cq);
	release(data.rx.queue, bindings.rx_cq);
	if (bindings.counters_watch) {
		bindings.for_each_counter([&](Counter *c) {
			c->unwatch(bindings.tx_cq);
			if (bindings.rx_cq != bindings.tx_cq)
				c->unwatch(bindings.rx_cq);
		});
		bindings.counters_watch = false;
	}
	if (data.qp)
		async::remove_qp(data.qp.get());
	data.qp.reset();
	if (bindings.tx_cq && data.tx.reserved)
		bindings.tx_cq->unreserve(static_cast<int>(data.tx.reserved), static_cast<int>(data.tx.promised),
					  data.tx.verbs_cq);
	if (bindings.rx_cq && data.rx.reserved)
		bindings.rx_cq->unreserve(static_cast<int>(data.rx.reserved), static_cast<int>(data.rx.promised),
					  data.rx.verbs_cq);
	data.tx.reserved = data.rx.reserved = 0;
	data.tx.promised = data.rx.promised = 0;
	data.tx.queue.reset();
	data.rx.queue.reset();
	if (CompletionQueue *own = bindings.own_cq())
		own->close();
	bindings.tx_cq = bindings.rx_cq = nullptr;
}

/* The close markers (linger, drain) take the CQ entry fi_enable reserved
 * for one, or reserve it now; false (logged) when the CQ has no room. */
bool Endpoint::reserve_close_marker(const char *otherwise) noexcept
{
	if (data.marker_reserved)
		return true;
	if (!bindings.tx_cq || !bindings.tx_cq->reserve_one(data.tx.verbs_cq, &data.tx.reserved)) {
		ND_INFO(FI_LOG_EP_CTRL, "fi_close(ep): no room on the CQ for a close marker; %s\n", otherwise);
		return false;
	}
	data.marker_reserved = true;
	return true;
}

/* Under the send lock: a close marker's work request, signaled, in the
 * slot the ring keeps for it; nd's own (no context, no CQ flags). */
ibv_send_wr Endpoint::claim_close_marker(ibv_wr_opcode opcode) noexcept
{
	assert_held(data.tx.lock, "Endpoint::claim_close_marker");
	const Claimed claimed = data.tx.queue->claim<SendKind::internal>(SendClaim{nullptr, 0, 0, false, true});
	ibv_send_wr wr{};
	wr.wr_id = reinterpret_cast<uintptr_t>(claimed.record);
	wr.opcode = opcode;
	wr.send_flags = claimed.send_flags;
	return wr;
}

/*
 * Unsignaled sends that succeeded never complete, so after the flush the
 * send ring may still count them. A signaled request posted to the queue
 * pair in the error state completes (flushed) after all of them, and its
 * completion retires the whole ring: the way the kernel drains a QP.
 * Where the device never completes such a request (Domain::
 * synchronous_flush), its flush has already completed everything still on
 * the queue pair, and what is left is retired without one.
 */
void Endpoint::post_drain_marker() noexcept
{
	if (!data.tx.queue || !data.qp || send_queue_idle())
		return;
	/* The linger marker is still out: signaled, it is flushed last and
	 * drains the ring as this one would (one slot, one CQ entry kept). */
	if (data.lingered)
		return;
	if (domain->synchronous_flush && data.moved_to_error) {
		if (!bindings.tx_cq->retire_after_synchronous_flush(*data.tx.queue))
			ND_INFO(FI_LOG_EP_CTRL, "fi_close(ep): %llu request(s) still out after the flush (a signaled one, a read, or "
				"completions the CQ has no room for yet); waiting for their completions\n",
				static_cast<unsigned long long>(data.tx.queue->outstanding()));
		return;
	}
	if (!reserve_close_marker("the flush alone drains the send queue"))
		return;
	std::lock_guard<OptionalLock> guard(data.tx.lock);
	ibv_send_wr wr = claim_close_marker(IBV_WR_SEND);
	(void)submit(wr, "fi_close(ep): drain marker", true);
}

/*
 * fi_close of a connected endpoint lets the requests it posted reach the
 * peer before the connection ends. The disconnect flushes the send queue
 * (rdma_disconnect: the queue pair in error on InfiniBand and RoCE; on
 * iWARP SQD, which soft-iWARP takes as closing the stream, aborting the
 * request on the wire), so an fi_inject, or an unsignaled send the
 * application counts as done, would be lost: MPICH finalizes right after
 * its last sends over ofi_rxm (libfabric#6720) and barriers first only for
 * the verbs provider. A signaled zero-byte RDMA write behind them
 * completes once every request before it has (reliable connection
 * order); close waits for it at most kLingerMs: long enough for a peer
 * whose CPU is busy elsewhere to acknowledge (docs/mpi.md, finalize), and
 * paid in full only where a peer vanished without a word, since a peer's
 * dead queue pair fails the write after the transport's retries and a
 * closed iWARP stream fails it at once. A zero-byte write names
 * no memory (InfiniBand C9-88; soft-iWARP checks no STag for it); on
 * iWARP it names the peer's receive-credit word, registered for the
 * peer's writes, where the endpoint has one. fi_shutdown keeps ND's
 * rule: everything outstanding is cancelled.
 */
void Endpoint::linger() noexcept
{
	constexpr int kLingerMs = 2000;
	if (!data.tx.queue || !data.qp || !bindings.tx_cq || bindings.stx() || send_queue_idle() ||
	    fsm.state() != EpState::connected || data.link.state() != LinkState::up)
		return;
	if (!reserve_close_marker("requests still on the wire may be flushed"))
		return;
	{
		std::lock_guard<OptionalLock> guard(data.tx.lock);
		ibv_send_wr wr = claim_close_marker(IBV_WR_RDMA_WRITE);
		if (data.credits) {
			wr.wr.rdma.remote_addr = data.credits->peer_addr();
			wr.wr.rdma.rkey = data.credits->peer_rkey();
		}
		if (submit(wr, "fi_close(ep): linger marker", true))
			return;
	}
	if (bindings.tx_cq->drain(*data.tx.queue, kLingerMs))
		return;
	data.lingered = true; /* the marker is still out */
	ND_INFO(FI_LOG_EP_CTRL, "fi_close(ep): %llu request(s) still unconfirmed after %d ms; the disconnect flushes them\n",
		static_cast<unsigned long long>(data.tx.queue->outstanding()), kLingerMs);
}

/* Whether nothing is outstanding on the send queue once the completions
 * already in its CQ have retired their requests (a signaled request that
 * completed, as an iWARP connector's ready write, leaves nothing for the
 * close markers to wait on). */
bool Endpoint::send_queue_idle() noexcept
{
	if (data.tx.queue->outstanding() != 0 && bindings.tx_cq)
		bindings.tx_cq->progress();
	return data.tx.queue->outstanding() == 0;
}

bool Endpoint::watches_stalls() const noexcept
{
	/* iWARP's credits are looked at too (CompletionQueue::look_for_stalls),
	 * with the stall watch off. */
	return (domain->stall_timeout_s || data.credits) && bindings.tx_cq && !bindings.tx_cq->is_internal();
}

} // namespace nd
