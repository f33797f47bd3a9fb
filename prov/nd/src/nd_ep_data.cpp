/*
 * nd_ep_data.cpp: an endpoint's data path: binding CQs, counters and a
 * shared receive context; the send and receive queues; posting; and the
 * message operations (fi_send ... fi_recvmsg). RMA is in nd_ep_rma.cpp.
 *
 * The fast path takes no lock unless the domain is FI_THREAD_SAFE and
 * allocates nothing: records come from the rings fixed at fi_enable and
 * scatter/gather lists live on the stack.
 */
#include "nd_cntr.h"
#include "nd_async.h"
#include "nd_cq.h"
#include "nd_domain.h"
#include "nd_ep.h"
#include "nd_ep_inject.h"
#include "nd_framing.h"
#include "nd_info.h"
#include "nd_mr.h"
#include "nd_multi_recv.h"
#include "nd_params.h"
#include "nd_srx.h"
#include "nd_stx.h"

#include <arpa/inet.h>

#include <cstring>

namespace nd {

/* ---- binding ---- */

int Endpoint::bind_cq(CompletionQueue *cq, uint64_t flags)
{
	if (fsm.enabled()) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cq): bind before fi_enable\n");
		return -FI_EOPBADSTATE;
	}
	if (cq->domain != domain) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cq): the CQ belongs to another domain\n");
		return -FI_EINVAL;
	}
	if (!(flags & (FI_TRANSMIT | FI_RECV)) ||
	    (flags & ~(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION))) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cq): flags 0x%llx; FI_TRANSMIT and/or FI_RECV, "
			"optionally FI_SELECTIVE_COMPLETION\n", static_cast<unsigned long long>(flags));
		return -FI_EBADFLAGS;
	}
	if (((flags & FI_TRANSMIT) && bindings.user_tx_cq) || ((flags & FI_RECV) && bindings.user_rx_cq)) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cq): a CQ is already bound for that direction\n");
		return -FI_EINVAL;
	}
	const bool selective = flags & FI_SELECTIVE_COMPLETION;
	if (flags & FI_TRANSMIT) {
		bindings.user_tx_cq = cq;
		bindings.tx_selective = selective;
		cq->bound.acquire();
	}
	if (flags & FI_RECV) {
		bindings.user_rx_cq = cq;
		bindings.rx_selective = selective;
		cq->bound.acquire();
	}
	return 0;
}

int Endpoint::bind_cntr(Counter *cntr, uint64_t flags)
{
	if (fsm.enabled()) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): bind before fi_enable\n");
		return -FI_EOPBADSTATE;
	}
	if (cntr->domain != domain) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): the counter belongs to another domain\n");
		return -FI_EINVAL;
	}
	if (flags & (FI_REMOTE_READ | FI_REMOTE_WRITE)) {
		/* The target's NIC places RDMA data without a completion. */
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): FI_REMOTE_READ/FI_REMOTE_WRITE counters are not "
			"supported: RDMA reads and writes complete at the target without a completion\n");
		return -FI_ENOSYS;
	}
	if (!(flags & (FI_SEND | FI_RECV | FI_READ | FI_WRITE)) ||
	    (flags & ~(FI_SEND | FI_RECV | FI_READ | FI_WRITE))) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): flags 0x%llx; FI_SEND, FI_RECV, FI_READ, FI_WRITE\n",
			static_cast<unsigned long long>(flags));
		return -FI_EBADFLAGS;
	}
	if ((flags & FI_RECV) && bindings.srx) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): receive counters with a shared receive context are not supported\n");
		return -FI_ENOSYS;
	}
	Counter **slots[] = {&bindings.send_cntr, &bindings.recv_cntr, &bindings.read_cntr, &bindings.write_cntr};
	const uint64_t bits[] = {FI_SEND, FI_RECV, FI_READ, FI_WRITE};
	for (int i = 0; i < 4; i++) {
		if ((flags & bits[i]) && *slots[i]) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): a counter is already bound for those events\n");
			return -FI_EINVAL;
		}
	}
	for (int i = 0; i < 4; i++)
		if (flags & bits[i])
			*slots[i] = cntr;
	cntr->attach(this);
	return 0;
}

namespace {

/* What binding a shared context (srx, stx) first asks of the endpoint:
 * not enabled yet, none of that kind bound, and the same domain. */
int check_context_bind(const char *call, bool enabled, bool has_one, bool same_domain)
{
	if (enabled) {
		ND_WARN(FI_LOG_EP_CTRL, "%s: bind before fi_enable\n", call);
		return -FI_EOPBADSTATE;
	}
	if (has_one || !same_domain) {
		ND_WARN(FI_LOG_EP_CTRL, "%s: %s\n", call,
			has_one ? "the endpoint already has one" : "the context belongs to another domain");
		return -FI_EINVAL;
	}
	return 0;
}

} // namespace

int Endpoint::bind_srx(SharedRx *rx)
{
	if (options.framed) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(srx): an endpoint with FI_TAGGED matches its messages in nd "
			"and takes no shared receive context\n");
		return -FI_EOPNOTSUPP;
	}
	if (int ret = check_context_bind("fi_ep_bind(srx)", fsm.enabled(), bindings.srx, rx->domain == domain))
		return ret;
	if (bindings.recv_cntr) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(srx): receive counters with a shared receive context are not supported\n");
		return -FI_ENOSYS;
	}
	bindings.srx = rx;
	rx->bound.acquire();
	return 0;
}

int Endpoint::bind_stx(SharedTx *tx)
{
	if (int ret = check_context_bind("fi_ep_bind(stx)", fsm.enabled(), bindings.stx, tx->domain == domain))
		return ret;
	if (info->ep_attr->tx_ctx_cnt != FI_SHARED_CONTEXT) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(stx): the endpoint was opened with its own transmit "
			"context; ask for ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT\n");
		return -FI_EINVAL;
	}
	bindings.stx = tx;
	tx->bound.acquire();
	return 0;
}

/* ---- queues ---- */

int Endpoint::setup_data_path()
{
	/* A shared transmit context's attributes stand for the endpoint's own. */
	const fi_tx_attr &tx_attr = bindings.stx ? bindings.stx->attr : *info->tx_attr;
	const uint32_t tx = static_cast<uint32_t>(tx_attr.size ? tx_attr.size : 1);
	const uint32_t rx = static_cast<uint32_t>(info->rx_attr->size ? info->rx_attr->size : 1);
	data.tx_iov_limit = static_cast<uint32_t>(tx_attr.iov_limit ? tx_attr.iov_limit : 1);
	data.rx_iov_limit = static_cast<uint32_t>(info->rx_attr->iov_limit ? info->rx_attr->iov_limit : 1);
	if (data.tx_iov_limit > kMaxSge || data.rx_iov_limit > kMaxSge) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_enable: iov_limit %u/%u > %zu\n", data.tx_iov_limit, data.rx_iov_limit,
			kMaxSge);
		return -FI_EINVAL;
	}
	const uint32_t rx_completions = bindings.srx ? bindings.srx->queue.depth : rx;
	/* iWARP: receive credits, whose writes take send-ring slots of their
	 * own and complete into the send CQ (nd_credits.h). */
	const uint32_t credit_slots = wants_credits() ? ReceiveCredits::kWriteSlots : 0;
	if (credit_slots && !(data.credits = ReceiveCredits::open(domain->pd.get())))
		return -FI_ENOMEM;
	const uint32_t tx_completions = tx + 1 + credit_slots; /* + the close marker */
	if (!bindings.user_tx_cq || !bindings.user_rx_cq) {
		/* Sized for the reservations below (the send queue's includes the
		 * close marker), so that they never resize it. */
		fi_cq_attr attr{};
		attr.size = (bindings.user_tx_cq ? 0 : tx_completions) + (bindings.user_rx_cq ? 0 : rx_completions);
		attr.format = FI_CQ_FORMAT_CONTEXT;
		/* A counter with a wait object sleeps on its CQs' channels. */
		bool counter_waits = false;
		bindings.for_each_counter([&](Counter *c) { counter_waits |= c->waitable; });
		attr.wait_obj = counter_waits ? FI_WAIT_FD : FI_WAIT_NONE;
		int ret = CompletionQueue::open(domain, &attr, nullptr, true, &bindings.own_cq);
		if (ret)
			return ret;
	}
	bindings.tx_cq = bindings.user_tx_cq ? bindings.user_tx_cq : bindings.own_cq;
	bindings.rx_cq = bindings.user_rx_cq ? bindings.user_rx_cq : bindings.own_cq;
	/* Both sides on one CQ reserve in one step, so that a CQ that has to
	 * grow grows once (on Soft-RoCE each resize is a system call and a new
	 * mapping of the queue, and connection setup paid for two). */
	const bool one_cq = bindings.tx_cq == bindings.rx_cq;
	int ret = bindings.tx_cq->reserve(static_cast<int>(tx_completions + (one_cq ? rx_completions : 0)), &data.tx_verbs_cq);
	if (ret)
		return ret;
	/* One step on one CQ: both directions complete into the same verbs
	 * CQ, and the receive side's share goes back with the send side's. */
	data.tx_reserved = tx_completions + (one_cq ? rx_completions : 0);
	data.rx_verbs_cq = data.tx_verbs_cq;
	if (!one_cq) {
		if ((ret = bindings.rx_cq->reserve(static_cast<int>(rx_completions), &data.rx_verbs_cq)))
			return ret;
		data.rx_reserved = rx_completions;
	}

	/* What retiring a request touches (nd_wq.h): the counters bound for its
	 * kind (bound before fi_enable), and this endpoint's link. */
	auto cells = [](Counter *c) { return c ? c->cells() : CounterCells{}; };
	RetireTargets send_targets;
	send_targets.link = &data.link;
	send_targets.peer_lost = ep_peer_lost;
	send_targets.owner = this;
	send_targets.flush_breaks_link = domain->iwarp;
	/* The CQ's StallWatch (nd_cq.h) found nothing moving: the queue
	 * pair goes to the error state at once (under the CQ's lock: a
	 * verbs call, no lock of nd's), whether or not the EQ is read. */
	send_targets.stall = [](void *owner) noexcept {
		auto *ep = static_cast<Endpoint *>(owner);
		if (!ep->data.qp)
			return;
		ibv_qp_attr attr{};
		attr.qp_state = IBV_QPS_ERR;
		if (int rc = ibv_modify_qp(ep->data.qp.get(), &attr, IBV_QP_STATE))
			ND_WARN(FI_LOG_EP_DATA, "endpoint %p: ibv_modify_qp(ERR): %s\n", owner, std::strerror(rc));
	};
	send_targets.counters[static_cast<size_t>(CounterKind::send)] = cells(bindings.send_cntr);
	send_targets.counters[static_cast<size_t>(CounterKind::read)] = cells(bindings.read_cntr);
	send_targets.counters[static_cast<size_t>(CounterKind::write)] = cells(bindings.write_cntr);
	/* A credit write that found the ring full goes when room is made, even
	 * if this side never posts again (its peer may be waiting for it). */
	if (data.credits)
		send_targets.room = [](void *owner) noexcept {
			auto *ep = static_cast<Endpoint *>(owner);
			if (ep->data.credits->pending.load(std::memory_order_acquire))
				ep->advertise_credits(true);
		};
	data.sq = std::make_unique<WorkQueue>(QueueKind::send, tx, credit_slots);
	data.sq->set_targets(send_targets);
	if (watches_stalls())
		bindings.tx_cq->watch_stalls(data.sq.get(), domain->stall_timeout_s);
	if (bindings.stx)
		data.sq->set_budget(bindings.stx->budget);
	if (!bindings.srx) {
		RetireTargets recv_targets;
		recv_targets.link = &data.link;
		recv_targets.flush_breaks_link = domain->iwarp;
		recv_targets.counters[static_cast<size_t>(CounterKind::recv)] = cells(bindings.recv_cntr);
		data.rq = std::make_unique<WorkQueue>(QueueKind::recv, rx);
		data.rq->set_targets(recv_targets);
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
	/* An unsignaled request retires only when a later one of its own
	 * queue completes; under a shared budget, requests that completed but
	 * wait for that could hold the budget that the signaled one needs. So
	 * every request on a shared transmit context is signaled. */
	data.signal_interval = bindings.stx ? 1 : std::max<uint32_t>(data.sq->depth / 2, 1);
	data.send_signal_interval = bindings.send_cntr ? 1 : data.signal_interval;
	data.write_signal_interval = bindings.write_cntr ? 1 : data.signal_interval;
	data.max_inline = static_cast<uint32_t>(tx_attr.inject_size);
	data.read_fence = ((tx_attr.msg_order | info->rx_attr->msg_order) & kFencedOrder) ? IBV_SEND_FENCE : 0;
	data.max_msg = info->ep_attr && info->ep_attr->max_msg_size ? info->ep_attr->max_msg_size : UINT32_MAX;
	if (options.framed) {
		/* The header rides inline too; a message fits a receive buffer. */
		data.max_inline += static_cast<uint32_t>(kFrameHeaderSize);
		data.max_msg = std::min(data.max_msg, read_params().tagged_msg_size);
		if (int ret = setup_framing(rx))
			return ret;
	}
	/* FI_MORE is a promise about the next call, so it is taken from a
	 * call's own flags only, never as a default for every call. */
	data.tx_op_flags = tx_attr.op_flags & ~FI_MORE;
	data.rx_op_flags = info->rx_attr->op_flags;
	const bool locked = domain->threading == FI_THREAD_SAFE;
	data.tx_lock.enable(locked);
	data.rx_lock.enable(locked);
	/* Sends on an endpoint with receive credits look at them first. */
	data.slow_tx = locked || bindings.stx || data.credits;
	return 0;
}

/* At close (or when fi_enable fails), after the queue pair was flushed:
 * every request still outstanding completes (FI_ECANCELED) into its CQ
 * before the records go. The bindings stay (see unbind_all). */
void Endpoint::release_queues() noexcept
{
	constexpr int kDrainMs = 2000;
	struct Direction {
		std::unique_ptr<WorkQueue> &queue;
		CompletionQueue *cq;
	};
	if (data.sq && watches_stalls())
		bindings.tx_cq->unwatch_stalls(data.sq.get());
	if (data.rq && data.rq->framing) {
		/* Receives waiting in nd complete now; nd's own buffers are
		 * flushed with the queue pair and not reposted. */
		Framing *framing = static_cast<Framing *>(data.rq->framing.get());
		framing->qp.store(nullptr, std::memory_order_release);
		framing->cancel_all(*bindings.rx_cq);
	}
	post_drain_marker();
	for (Direction d : {Direction{data.sq, bindings.tx_cq}, Direction{data.rq, bindings.rx_cq}}) {
		if (!d.queue || !d.cq)
			continue;
		if (!d.cq->drain(*d.queue, kDrainMs) && d.cq != bindings.own_cq) {
			if (d.queue->multi) {
				/* The queue pair goes below: nothing more reaches it. */
				std::lock_guard<std::mutex> hold(d.queue->multi->lock);
				d.queue->multi->qp = nullptr;
			}
			ND_WARN(FI_LOG_EP_CTRL, "fi_close(ep): %llu request(s) not flushed yet; the CQ keeps their records\n",
				static_cast<unsigned long long>(d.queue->outstanding()));
			d.cq->adopt_orphan(std::move(d.queue));
		}
	}
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
	if (bindings.tx_cq && data.tx_reserved)
		bindings.tx_cq->unreserve(static_cast<int>(data.tx_reserved), data.tx_verbs_cq);
	if (bindings.rx_cq && data.rx_reserved)
		bindings.rx_cq->unreserve(static_cast<int>(data.rx_reserved), data.rx_verbs_cq);
	data.tx_reserved = data.rx_reserved = 0;
	data.sq.reset();
	data.rq.reset();
	if (bindings.own_cq)
		bindings.own_cq->close();
	bindings.own_cq = bindings.tx_cq = bindings.rx_cq = nullptr;
}

/* At close: the CQs, counters and shared contexts let go. */
void Endpoint::unbind_all() noexcept
{
	for (Counter *c : {bindings.send_cntr, bindings.recv_cntr, bindings.read_cntr, bindings.write_cntr})
		if (c)
			c->detach(this);
	bindings.send_cntr = bindings.recv_cntr = bindings.read_cntr = bindings.write_cntr = nullptr;
	if (bindings.user_tx_cq)
		bindings.user_tx_cq->bound.release();
	if (bindings.user_rx_cq)
		bindings.user_rx_cq->bound.release();
	if (bindings.srx)
		bindings.srx->bound.release();
	if (bindings.stx)
		bindings.stx->bound.release();
	bindings.user_tx_cq = bindings.user_rx_cq = nullptr;
	bindings.srx = nullptr;
	bindings.stx = nullptr;
}

/*
 * Unsignaled sends that succeeded never complete, so after the flush the
 * send ring may still count them. A signaled request posted to the queue
 * pair in the error state completes (flushed) after all of them, and its
 * completion retires the whole ring: the way the kernel drains a QP.
 */
void Endpoint::post_drain_marker() noexcept
{
	if (!data.sq || !data.qp || data.sq->outstanding() == 0)
		return;
	std::lock_guard<OptionalLock> guard(data.tx_lock);
	OpRecord &record = data.sq->next(); /* the ring keeps one slot for this */
	record.context = nullptr;
	record.flags = 0;
	record.len = 0;
	record.read_mark = data.sq->reads_posted;
	record.report = false;
	ibv_send_wr wr{};
	wr.wr_id = reinterpret_cast<uintptr_t>(&record);
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	data.sq->count_budget();
	data.sq->commit();
	ibv_send_wr *bad = nullptr;
	if (int rc = ibv_post_send(data.qp.get(), &wr, &bad)) {
		data.sq->uncommit();
		ND_INFO(FI_LOG_EP_CTRL, "fi_close(ep): drain marker: %s\n", std::strerror(rc));
	}
}

ssize_t Endpoint::link_error(const char *call) const
{
	switch (data.link.state(std::memory_order_relaxed)) {
	case LinkState::broken:
		ND_INFO(FI_LOG_EP_DATA, "%s: a transfer on this connection failed; it carries no more data\n", call);
		return -FI_ECONNABORTED;
	case LinkState::down:
		ND_INFO(FI_LOG_EP_DATA, "%s: the connection was shut down\n", call);
		return -FI_ENOTCONN;
	default:
		ND_INFO(FI_LOG_EP_DATA, "%s: the endpoint is not connected\n", call);
		return -FI_ENOTCONN;
	}
}


bool Endpoint::watches_stalls() const noexcept
{
	return domain->stall_timeout_s && bindings.tx_cq && !bindings.tx_cq->internal;
}

ssize_t Endpoint::post_tx(const TxRequest &r)
{
	if (data.link.state(std::memory_order_relaxed) != LinkState::up)
		return link_error(r.call);
	if ((r.opcode == IBV_WR_SEND_WITH_IMM || r.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) &&
	    domain->iwarp)
		return no_immediate_data(r.call);
	const bool is_read = r.opcode == IBV_WR_RDMA_READ;
	/* A framed message's header goes first, from its ring slot's copy. */
	const uint32_t header_bytes = r.header ? static_cast<uint32_t>(kFrameHeaderSize) : 0;
	/* Whether the data may go inline: it must fit the probed limit; a
	 * descriptor is then not needed. */
	uint64_t total = 0;
	for (size_t i = 0; i < r.count && r.iov; i++)
		total += r.iov[i].iov_len;
	const bool inline_data = !is_read && total + header_bytes <= data.max_inline;
	if ((r.flags & FI_INJECT) && !inline_data) {
		ND_WARN(FI_LOG_EP_DATA, "%s: %llu bytes to inject; inject_size is %u\n", r.call,
			static_cast<unsigned long long>(total), data.max_inline - header_bytes);
		return -FI_EMSGSIZE;
	}
	ibv_sge sge[kMaxSge + 1];
	ssize_t ret = gather_sges(r.call, r.iov, r.desc, r.count, data.tx_iov_limit, !inline_data, false,
				  sge + (r.header ? 1 : 0), &total);
	if (ret < 0)
		return ret;
	const int num_sge = static_cast<int>(ret) + (r.header ? 1 : 0);
	if (total > data.max_msg) {
		ND_WARN(FI_LOG_EP_DATA, "%s: %llu bytes; max_msg_size is %zu\n", r.call,
			static_cast<unsigned long long>(total), data.max_msg);
		return -FI_EMSGSIZE;
	}
	if (is_read && conn.effective.outbound == 0) {
		ND_WARN(FI_LOG_EP_DATA, "%s: the connection allows no RDMA reads (negotiated outbound read limit 0)\n",
			r.call);
		return -FI_EACCES;
	}
	Counter *counter = r.opcode == IBV_WR_RDMA_READ ? bindings.read_cntr
			   : (r.opcode == IBV_WR_SEND || r.opcode == IBV_WR_SEND_WITH_IMM) ? bindings.send_cntr
											     : bindings.write_cntr;
	if (r.report && bindings.tx_cq == bindings.own_cq) {
		ND_WARN(FI_LOG_EP_DATA, "%s: a completion is wanted but no CQ is bound with FI_TRANSMIT\n", r.call);
		return -FI_ENOCQ;
	}

	CreditsAfterUnlock credits_after_unlock{this};
	std::lock_guard<OptionalLock> guard(data.tx_lock);
	const bool takes_receive = r.opcode == IBV_WR_SEND || r.opcode == IBV_WR_SEND_WITH_IMM;
	if (data.credits && takes_receive && !data.credits->can_send())
		return no_credit(r.call);
	if (data.sq->no_room() || (is_read && data.sq->reads_in_flight() >= conn.effective.outbound)) {
		/* Post what FI_MORE held back, retire what has completed, then
		 * look again. */
		if ((ret = make_room(r.call)))
			return ret;
		if (is_read && data.sq->reads_in_flight() >= conn.effective.outbound)
			return -FI_EAGAIN; /* never more reads in flight than negotiated */
	}
	/* An unsignaled request retires when a later signaled one completes
	 * (nd_wq.h), and an unsignaled read gives its read budget back then.
	 * Every signal_interval-th request is signaled, to retire the ring, and
	 * every (outbound limit / 2)-th read: whenever the limit is reached, a
	 * signaled request is then among those in flight, and the first half
	 * retiring still leaves the pipe half full. */
	bool signaled = r.report || counter || ++data.sq->unsignaled_run >= data.signal_interval ||
			(is_read && ++data.sq->unsignaled_reads >= std::max<uint32_t>(conn.effective.outbound / 2, 1));
	if (signaled) {
		data.sq->unsignaled_run = 0;
		data.sq->unsignaled_reads = 0;
	}
	OpRecord &record = data.sq->next();
	record.context = r.context;
	record.flags = static_cast<uint32_t>(r.cq_flags);
	record.len = static_cast<uint32_t>(total);
	record.read_mark = data.sq->reads_posted + is_read;
	record.report = r.report;
	if (r.header) {
		/* The slot's header lives as long as the request does. */
		uint8_t *header = data.tx_headers.get() + static_cast<size_t>(&record - data.sq->records.get()) * kFrameHeaderSize;
		std::memcpy(header, r.header, kFrameHeaderSize);
		sge[0].addr = reinterpret_cast<uintptr_t>(header);
		sge[0].length = static_cast<uint32_t>(kFrameHeaderSize);
		sge[0].lkey = data.tx_headers_mr->lkey;
	}

	ibv_send_wr wr;
	wr.wr_id = reinterpret_cast<uintptr_t>(&record);
	wr.next = nullptr;
	wr.sg_list = sge;
	wr.num_sge = num_sge;
	wr.opcode = r.opcode;
	wr.send_flags = (signaled ? IBV_SEND_SIGNALED : 0) |
			(inline_data && total + header_bytes ? IBV_SEND_INLINE : 0) |
			(is_read ? 0 : data.sq->fence_after_reads(data.read_fence));
	wr.imm_data = r.imm_data;
	wr.wr.rdma.remote_addr = r.remote_addr;
	wr.wr.rdma.rkey = static_cast<uint32_t>(r.remote_key);
	const bool more = (r.flags & FI_MORE) && start_batch();
	data.sq->reads_posted += is_read;
	/* Published before posting: the completion may be reaped at once. */
	data.sq->count_budget();
	data.sq->commit(signaled);
	if (more) {
		ret = defer(wr, inline_data && total + header_bytes, r.call);
	} else if (data.batch && data.batch->count) {
		ret = post_batch(&wr, r.call);
	} else {
		ret = post_committed(wr, r.call);
		if (ret)
			data.sq->reads_posted -= is_read;
	}
	if (data.credits)
		credits_after_post(ret == 0 && takes_receive);
	return ret;
}

/* Under the send lock, after a post: a message took one of the peer's
 * receives, and a count that could not be written before goes now. */
void Endpoint::credits_after_post(bool took_receive) noexcept
{
	data.credits->sent += took_receive;
	if (data.credits->pending.load(std::memory_order_acquire))
		write_credits();
}

/* Makes sure the FI_MORE batch exists; false (post at once) when it cannot
 * be allocated. */
bool Endpoint::start_batch() noexcept
{
	if (data.batch)
		return true;
	auto b = std::unique_ptr<SendBatch>(new (std::nothrow) SendBatch);
	if (!b)
		return false;
	b->inline_capacity = SendBatch::kMaxRequests * data.max_inline;
	b->inline_bytes.reset(new (std::nothrow) uint8_t[std::max<uint32_t>(b->inline_capacity, 1)]);
	if (!b->inline_bytes)
		return false;
	data.batch = std::move(b);
	return true;
}

/* Holds a committed request back for the next doorbell (SendBatch). */
ssize_t Endpoint::defer(const ibv_send_wr &wr, bool copy_inline, const char *call)
{
	SendBatch &b = *data.batch;
	ibv_send_wr &held = b.wr[b.count];
	held = wr;
	held.next = nullptr;
	ibv_sge *sge = &b.sge[b.sges];
	if (copy_inline) {
		uint8_t *to = b.inline_bytes.get() + b.inline_used;
		uint32_t len = 0;
		for (int i = 0; i < wr.num_sge; i++) {
			std::memcpy(to + len, reinterpret_cast<const void *>(wr.sg_list[i].addr), wr.sg_list[i].length);
			len += wr.sg_list[i].length;
		}
		sge->addr = reinterpret_cast<uintptr_t>(to);
		sge->length = len;
		sge->lkey = 0;
		held.num_sge = 1;
		b.inline_used += len;
	} else if (wr.num_sge) {
		std::memcpy(sge, wr.sg_list, sizeof(ibv_sge) * static_cast<size_t>(wr.num_sge));
	}
	held.sg_list = sge;
	b.sges += static_cast<uint32_t>(held.num_sge);
	if (b.count)
		b.wr[b.count - 1].next = &held;
	++b.count;
	return b.has_room(data.max_inline) ? 0 : post_batch(nullptr, call);
}

/* Posts what FI_MORE held back, if anything. */
ssize_t Endpoint::post_deferred(const char *call)
{
	return data.batch && data.batch->count ? post_batch(nullptr, call) : 0;
}

/* Posts the held-back requests, followed by `last` (committed, or null),
 * with one doorbell. On failure the slots of what was not posted are given
 * back; held-back requests among them are lost, which the log says (the
 * provider's own accounting keeps the queue within the device's limits, so
 * this takes a device failure). */
ssize_t Endpoint::post_batch(ibv_send_wr *last, const char *call)
{
	SendBatch &b = *data.batch;
	ibv_send_wr *first = b.count ? &b.wr[0] : last;
	if (b.count)
		b.wr[b.count - 1].next = last;
	b.count = b.sges = b.inline_used = 0;
	if (!first)
		return 0;
	ibv_send_wr *bad = nullptr;
	int rc = ibv_post_send(data.qp.get(), first, &bad);
	if (!rc)
		return 0;
	if (!bad)
		bad = first;
	uint64_t unposted = 0;
	for (ibv_send_wr *w = bad; w; w = w->next)
		++unposted;
	data.sq->reads_posted = record_of(bad->wr_id)->read_mark - (bad->opcode == IBV_WR_RDMA_READ);
	data.sq->uncommit(unposted);
	const uint64_t held_lost = unposted - (last ? 1 : 0);
	ND_WARN(FI_LOG_EP_DATA, "%s: ibv_post_send: %s%s\n", call, std::strerror(rc),
		held_lost ? " (requests posted earlier with FI_MORE are lost with it)" : "");
	return fi_error_of_post(rc);
}

/* Posting the send request whose slot was just committed failed
 * (post_committed): the slot goes back. */
ssize_t Endpoint::post_failed(int rc, const char *call)
{
	data.sq->uncommit();
	ND_WARN(FI_LOG_EP_DATA, "%s: ibv_post_send: %s\n", call, std::strerror(rc));
	return fi_error_of_post(rc);
}

/* Remote CQ data travels as immediate data, which iWARP does not have
 * (fi_getinfo reports cq_data_size 0 there); tagged endpoints carry it in
 * their frame header instead and never come here with it. */
ssize_t Endpoint::no_immediate_data(const char *call) const
{
	ND_WARN(FI_LOG_EP_DATA, "%s: remote CQ data needs immediate data, which iWARP (%s) does not carry\n",
		call, info->domain_attr->name);
	return -FI_EOPNOTSUPP;
}

/* Why fi_inject and its kin refuse a call (nd_ep_inject.h). */
ssize_t Endpoint::inject_refused(const void *buf, size_t len, uint64_t remote_key, const char *call) const
{
	if (data.link.state(std::memory_order_relaxed) != LinkState::up)
		return link_error(call);
	if (len > data.max_inline) {
		ND_WARN(FI_LOG_EP_DATA, "%s: %zu bytes to inject; inject_size is %u\n", call, len,
			data.max_inline);
		return -FI_EMSGSIZE;
	}
	if (!buf && len) {
		ND_WARN(FI_LOG_EP_DATA, "%s: buffer is NULL with length %zu\n", call, len);
		return -FI_EINVAL;
	}
	ND_WARN(FI_LOG_EP_DATA, "%s: key 0x%llx is wider than the 4 bytes of mr_key_size\n", call,
		static_cast<unsigned long long>(remote_key));
	return -FI_EINVAL;
}

/* The send queue is full: what FI_MORE held back goes, what completed
 * retires; 0 when there is room now. Under tx_lock. */
ssize_t Endpoint::make_room(const char *call)
{
	if (ssize_t ret = post_deferred(call))
		return ret;
	bindings.tx_cq->progress();
	return data.sq->no_room() ? -FI_EAGAIN : 0;
}

ssize_t Endpoint::post_rx(const iovec *iov, void **desc, size_t count, void *context, uint64_t flags)
{
	if (bindings.srx) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recv: the endpoint takes its receives from its shared receive context\n");
		return -FI_EOPNOTSUPP;
	}
	if (!data.rq) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recv: call fi_enable first\n");
		return -FI_EOPBADSTATE;
	}
	const LinkState state = data.link.state(std::memory_order_relaxed);
	if (state == LinkState::down || state == LinkState::broken)
		return link_error("fi_recv");
	const bool report = !bindings.rx_selective || (flags & FI_COMPLETION);
	if (report && bindings.rx_cq == bindings.own_cq) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recv: no CQ is bound with FI_RECV\n");
		return -FI_ENOCQ;
	}
	const bool multi = flags & FI_MULTI_RECV;
	if (multi && !(info->caps & FI_MULTI_RECV)) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recv: FI_MULTI_RECV on an endpoint opened without the capability\n");
		return -FI_EBADFLAGS;
	}
	if (multi && count != 1) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recv: a multi-receive buffer is one iov; %zu given\n", count);
		return -FI_EINVAL;
	}
	ibv_sge sge[kMaxSge];
	uint64_t total = 0;
	ssize_t built = gather_sges("fi_recv", iov, desc, count, data.rx_iov_limit, true, true, sge, &total);
	if (built < 0)
		return built;
	if (domain->iwarp)
		built = receive_sges_for_iwarp(built, sge);
	if (total > (multi ? UINT32_MAX : data.max_msg)) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recv: %llu bytes; the most is %zu\n",
			static_cast<unsigned long long>(total), multi ? size_t{UINT32_MAX} : data.max_msg);
		return -FI_EMSGSIZE;
	}
	if (multi && total == 0) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recv: a multi-receive buffer of 0 bytes\n");
		return -FI_EINVAL;
	}

	std::lock_guard<OptionalLock> guard(data.rx_lock);
	if (data.rq->full()) {
		bindings.rx_cq->progress();
		if (data.rq->full())
			return -FI_EAGAIN;
	}
	if (multi && !data.rq->multi) {
		try {
			auto made = std::make_unique<MultiRecv>(options.min_multi_recv);
			made->qp = data.qp.get();
			made->ready = data.recv_ready;
			data.rq->set_multi(std::move(made));
		} catch (const std::bad_alloc &) {
			return -FI_ENOMEM;
		}
	}
	OpRecord &record = data.rq->next();
	record.context = context;
	record.flags = FI_RECV | FI_MSG | (multi ? FI_MULTI_RECV : 0);
	record.len = static_cast<uint32_t>(std::min<uint64_t>(total, UINT32_MAX));
	record.read_mark = 0;
	record.report = report;
	if (data.rq->multi) {
		/* Behind a multi-receive buffer (or to become one), in order. */
		data.rq->commit();
		std::lock_guard<std::mutex> hold(data.rq->multi->lock);
		int rc;
		try {
			rc = data.rq->multi->submit(&record, sge, static_cast<size_t>(built), multi);
		} catch (const std::bad_alloc &) {
			rc = ENOMEM;
		}
		if (rc) {
			data.rq->uncommit();
			ND_WARN(FI_LOG_EP_DATA, "fi_recv: ibv_post_recv: %s\n", std::strerror(rc));
			return fi_error_of_post(rc);
		}
		return 0;
	}
	ibv_recv_wr wr;
	wr.wr_id = reinterpret_cast<uintptr_t>(&record);
	wr.next = nullptr;
	wr.sg_list = sge;
	wr.num_sge = static_cast<int>(built);
	if (!data.recv_ready) {
		/* Before INIT the queue pair takes no receives: keep it for then. */
		try {
			PendingRecv pending{wr, std::vector<ibv_sge>(sge, sge + built)};
			data.pending_recvs.push_back(std::move(pending));
		} catch (const std::bad_alloc &) {
			return -FI_ENOMEM;
		}
		data.rq->commit();
		return 0;
	}
	data.rq->commit();
	ibv_recv_wr *bad = nullptr;
	int rc = ibv_post_recv(data.qp.get(), &wr, &bad);
	if (rc) {
		data.rq->uncommit();
		ND_WARN(FI_LOG_EP_DATA, "fi_recv: ibv_post_recv: %s\n", std::strerror(rc));
		return fi_error_of_post(rc);
	}
	/* FI_MORE: the next receive call tells the peer of both. */
	if (data.credits && !(flags & FI_MORE))
		advertise_credits(false);
	return 0;
}

/* The queue pair reached INIT (or ERR, where verbs flushes them): post the
 * receives that waited for it, in order. */
void Endpoint::post_pending_receives() noexcept
{
	std::lock_guard<OptionalLock> guard(data.rx_lock);
	data.recv_ready = true;
	for (PendingRecv &pending : data.pending_recvs) {
		pending.wr.sg_list = pending.sge.data();
		ibv_recv_wr *bad = nullptr;
		int rc = ibv_post_recv(data.qp.get(), &pending.wr, &bad);
		if (rc)
			ND_WARN(FI_LOG_EP_DATA, "posting a receive made before the connection: %s\n",
				std::strerror(rc));
	}
	data.pending_recvs.clear();
	if (data.rq && data.rq->multi) {
		std::lock_guard<std::mutex> hold(data.rq->multi->lock);
		data.rq->multi->ready = true;
		data.rq->multi->pump();
	}
}

/*
 * fi_cancel: a receive nd still holds (posted before the connection, or
 * behind a multi-receive buffer) never reached the adapter, so it can be
 * taken back: it completes with FI_ECANCELED and the unposted receives
 * after it move down one ring slot, keeping the ring in posting order. A
 * receive the adapter holds cannot be taken back (verbs has no such call),
 * nor can a send; for those, and for contexts nd does not know, the call
 * says -FI_ENOENT and the request completes as it would have.
 */
ssize_t Endpoint::cancel(void *context)
{
	if (!context) {
		ND_WARN(FI_LOG_EP_DATA, "fi_cancel: a NULL context names no request\n");
		return -FI_EINVAL;
	}
	std::lock_guard<OptionalLock> guard(data.rx_lock);
	if (!data.rq) {
		ND_INFO(FI_LOG_EP_DATA, "fi_cancel: no receive is posted before fi_enable\n");
		return -FI_ENOENT;
	}
	if (data.rq->framing)
		return static_cast<Framing *>(data.rq->framing.get())->cancel(context, *bindings.rx_cq);
	/* The unposted receives, in ring order: those made before the
	 * connection, then those waiting behind a multi-receive buffer. */
	std::vector<OpRecord **> unposted;
	std::vector<OpRecord *> pending_records;
	pending_records.reserve(data.pending_recvs.size());
	for (PendingRecv &p : data.pending_recvs)
		pending_records.push_back(record_of(p.wr.wr_id));
	for (OpRecord *&r : pending_records)
		unposted.push_back(&r);
	std::unique_lock<std::mutex> hold;
	if (data.rq->multi) {
		hold = std::unique_lock<std::mutex>(data.rq->multi->lock);
		for (MultiRecv::Held &h : data.rq->multi->held)
			unposted.push_back(&h.record);
	}
	size_t found = unposted.size();
	for (size_t i = 0; i < unposted.size() && found == unposted.size(); i++)
		if ((*unposted[i])->context == context)
			found = i;
	if (found == unposted.size()) {
		ND_INFO(FI_LOG_EP_DATA, "fi_cancel: no receive with context %p waits in nd; one the "
			"adapter holds completes when a message fills it, and sends are not cancelled\n",
			context);
		return -FI_ENOENT;
	}
	const OpRecord canceled = **unposted[found];
	/* Later unposted receives take the slot before theirs. */
	for (size_t i = found + 1; i < unposted.size(); i++) {
		OpRecord *from = *unposted[i];
		const uint64_t slot = static_cast<uint64_t>(from - data.rq->records.get());
		OpRecord *to = &data.rq->records[(slot - 1) & data.rq->mask];
		*to = *from;
		*unposted[i] = to;
	}
	if (found < pending_records.size()) {
		data.pending_recvs.erase(data.pending_recvs.begin() + static_cast<std::ptrdiff_t>(found));
		pending_records.erase(pending_records.begin() + static_cast<std::ptrdiff_t>(found));
		for (size_t i = found; i < data.pending_recvs.size(); i++)
			data.pending_recvs[i].wr.wr_id = reinterpret_cast<uintptr_t>(pending_records[i]);
	} else {
		auto &held = data.rq->multi->held;
		held.erase(held.begin() + static_cast<std::ptrdiff_t>(found - pending_records.size()));
	}
	data.rq->uncommit();
	if (hold.owns_lock())
		hold.unlock(); /* the CQ takes its own lock, then this one, when it retires */
	if (const CounterCells &cells = data.rq->targets.counters[static_cast<size_t>(CounterKind::recv)])
		cells.count(false);
	if (!bindings.rx_cq->report_canceled(canceled.context, canceled.flags))
		ND_WARN(FI_LOG_EP_DATA, "fi_cancel: out of memory for the cancelled receive's error entry\n");
	return 0;
}

void Endpoint::set_min_multi_recv(size_t bytes)
{
	options.min_multi_recv = bytes;
	std::lock_guard<OptionalLock> guard(data.rx_lock);
	if (data.rq && data.rq->multi) {
		std::lock_guard<std::mutex> hold(data.rq->multi->lock);
		data.rq->multi->min_free = bytes;
	}
}

/* ---- fi_ops_msg ---- */

namespace {

Endpoint *ep_of(fid_ep *ep) { return reinterpret_cast<Endpoint *>(ep); }

uint32_t imm_of(uint64_t data) { return htonl(static_cast<uint32_t>(data)); }

bool wants_completion(const Endpoint *ep, uint64_t flags)
{
	return !ep->bindings.tx_selective || (flags & FI_COMPLETION);
}

ssize_t send_common(Endpoint *ep, const iovec *iov, void **desc, size_t count, void *context,
		    uint64_t flags, bool with_data, uint64_t data, bool report, const char *call)
{
	TxRequest r;
	r.opcode = with_data ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
	r.iov = iov;
	r.desc = desc;
	r.count = count;
	r.remote_addr = 0;
	r.remote_key = 0;
	r.imm_data = with_data ? imm_of(data) : 0;
	r.context = context;
	r.flags = flags;
	r.cq_flags = FI_SEND | FI_MSG;
	r.report = report;
	r.call = call;
	return ep->post_tx(r);
}

ssize_t ep_recv(fid_ep *fep, void *buf, size_t len, void *desc, fi_addr_t, void *context) noexcept
{
	Endpoint *ep = ep_of(fep);
	iovec iov{buf, len};
	return ep->post_rx(&iov, &desc, 1, context, ep->data.rx_op_flags);
}

ssize_t ep_recvv(fid_ep *fep, const iovec *iov, void **desc, size_t count, fi_addr_t,
		 void *context) noexcept
{
	Endpoint *ep = ep_of(fep);
	return ep->post_rx(iov, desc, count, context, ep->data.rx_op_flags);
}

ssize_t ep_recvmsg(fid_ep *fep, const fi_msg *msg, uint64_t flags) noexcept
{
	if (!msg) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recvmsg: msg is NULL\n");
		return -FI_EINVAL;
	}
	return ep_of(fep)->post_rx(msg->msg_iov, msg->desc, msg->iov_count, msg->context, flags);
}

ssize_t ep_send(fid_ep *fep, const void *buf, size_t len, void *desc, fi_addr_t,
		void *context) noexcept
{
	Endpoint *ep = ep_of(fep);
	iovec iov{const_cast<void *>(buf), len};
	return send_common(ep, &iov, &desc, 1, context, ep->data.tx_op_flags, false, 0,
			   wants_completion(ep, ep->data.tx_op_flags), "fi_send");
}

ssize_t ep_sendv(fid_ep *fep, const iovec *iov, void **desc, size_t count, fi_addr_t,
		 void *context) noexcept
{
	Endpoint *ep = ep_of(fep);
	return send_common(ep, iov, desc, count, context, ep->data.tx_op_flags, false, 0,
			   wants_completion(ep, ep->data.tx_op_flags), "fi_sendv");
}

ssize_t ep_sendmsg(fid_ep *fep, const fi_msg *msg, uint64_t flags) noexcept
{
	if (!msg) {
		ND_WARN(FI_LOG_EP_DATA, "fi_sendmsg: msg is NULL\n");
		return -FI_EINVAL;
	}
	Endpoint *ep = ep_of(fep);
	return send_common(ep, msg->msg_iov, msg->desc, msg->iov_count, msg->context, flags,
			   flags & FI_REMOTE_CQ_DATA, msg->data, wants_completion(ep, flags),
			   "fi_sendmsg");
}

ssize_t ep_inject(fid_ep *fep, const void *buf, size_t len, fi_addr_t) noexcept
{
	return ep_of(fep)->post_inline<IBV_WR_SEND>(buf, len, 0, 0, 0);
}

ssize_t ep_senddata(fid_ep *fep, const void *buf, size_t len, void *desc, uint64_t data,
		    fi_addr_t, void *context) noexcept
{
	Endpoint *ep = ep_of(fep);
	iovec iov{const_cast<void *>(buf), len};
	return send_common(ep, &iov, &desc, 1, context, ep->data.tx_op_flags, true, data,
			   wants_completion(ep, ep->data.tx_op_flags), "fi_senddata");
}

ssize_t ep_injectdata(fid_ep *fep, const void *buf, size_t len, uint64_t data, fi_addr_t) noexcept
{
	return ep_of(fep)->post_inline<IBV_WR_SEND_WITH_IMM>(buf, len, imm_of(data), 0, 0);
}

} // namespace

fi_ops_msg ep_msg_ops = {
	.size = sizeof(fi_ops_msg),
	.recv = ep_recv,
	.recvv = ep_recvv,
	.recvmsg = ep_recvmsg,
	.send = ep_send,
	.sendv = ep_sendv,
	.sendmsg = ep_sendmsg,
	.inject = ep_inject,
	.senddata = ep_senddata,
	.injectdata = ep_injectdata,
};

} // namespace nd
