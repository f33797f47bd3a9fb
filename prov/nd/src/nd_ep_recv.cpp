/*
 * nd_ep_recv.cpp: an endpoint's receives: posting them (post_rx, multi-
 * receive buffers included), the ones posted before the queue pair could
 * take them, and fi_cancel of a receive nd still holds. A framed endpoint's
 * receives are in nd_ep_tagged.cpp.
 */
#include "nd_cntr.h"
#include "nd_cq.h"
#include "nd_domain.h"
#include "nd_ep.h"
#include "nd_framing.h"
#include "nd_mr.h"
#include "nd_multi_recv.h"

#include <cstring>

namespace nd {

ssize_t Endpoint::post_rx(const iovec *iov, void **desc, size_t count, void *context, uint64_t flags)
{
	if (bindings.srx()) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recv: the endpoint takes its receives from its shared receive context\n");
		return -FI_EOPNOTSUPP;
	}
	if (!data.rx.queue) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recv: call fi_enable first\n");
		return -FI_EOPBADSTATE;
	}
	if (data.link.ended())
		return link_error("fi_recv");
	const bool report = !bindings.rx_selective || (flags & FI_COMPLETION);
	if (report && !bindings.user_rx_cq) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recv: no CQ is bound with FI_RECV\n");
		return -FI_ENOCQ;
	}
	const bool multi = flags & FI_MULTI_RECV;
	if (multi && !(attr.caps & FI_MULTI_RECV)) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recv: FI_MULTI_RECV on an endpoint opened without the capability\n");
		return -FI_EBADFLAGS;
	}
	if (multi && count != 1) {
		ND_WARN(FI_LOG_EP_DATA, "fi_recv: a multi-receive buffer is one iov; %zu given\n", count);
		return -FI_EINVAL;
	}
	ibv_sge sge[kMaxSge];
	uint64_t total = 0;
	ssize_t built = gather_sges("fi_recv", iov, desc, count, data.rx.iov_limit, true, true, sge, &total);
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

	RecvPostLock guard(this);
	/* Again under the lock: a flush (flush_queue_pair, under it) may have
	 * ended the link since; nothing is posted to a queue pair in error. */
	if (data.link.ended())
		return link_error("fi_recv");
	/* A ring that started small grows first (nd_wq.h). */
	if (data.rx.queue->full() && !grow_queue(false)) {
		bindings.rx_cq->progress();
		if (data.rx.queue->full())
			return -FI_EAGAIN;
	}
	if (multi && !data.rx.queue->multi()) {
		try {
			auto made = std::make_unique<MultiRecv>(bindings.min_multi_recv());
			made->qp = data.qp.get();
			made->ready = data.recv_ready();
			data.rx.queue->set_multi(std::move(made));
			data.set_slow_rx(SlowRx::multi, true);
		} catch (const std::bad_alloc &) {
			return -FI_ENOMEM;
		}
	}
	OpRecord &record = data.rx.queue->claim_recv(context, FI_RECV | FI_MSG | (multi ? kPlacedByNd : 0),
					       static_cast<uint32_t>(std::min<uint64_t>(total, UINT32_MAX)), report);
	if (MultiRecv *const multi_recv = data.rx.queue->multi()) {
		/* Behind a multi-receive buffer (or to become one), in order. */
		std::lock_guard<Mutex> hold(multi_recv->lock);
		int rc;
		try {
			rc = multi_recv->submit(&record, sge, static_cast<size_t>(built), multi);
		} catch (const std::bad_alloc &) {
			rc = ENOMEM;
		}
		if (rc) {
			data.rx.queue->unclaim_recv(1);
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
	if (!data.recv_ready()) {
		/* Before INIT the queue pair takes no receives: keep it for then. */
		try {
			PendingRecv pending{wr, std::vector<ibv_sge>(sge, sge + built)};
			setup->pending_recvs.push_back(std::move(pending));
		} catch (const std::bad_alloc &) {
			data.rx.queue->unclaim_recv(1);
			return -FI_ENOMEM;
		}
		return 0;
	}
	ibv_recv_wr *bad = nullptr;
	if (int rc = post_recv(data.qp.get(), &wr, &bad))
		return post_recv_failed(rc);
	/* FI_MORE: the next receive call tells the peer of both. */
	if (data.credits && !(flags & FI_MORE))
		advertise_credits(false);
	return 0;
}

ssize_t Endpoint::post_rx_one_general(void *buf, size_t len, void *desc, void *context, uint64_t flags)
{
	iovec iov{buf, len};
	return post_rx(&iov, &desc, 1, context, flags);
}

/* A receive's post failed (post_rx, post_recv_one): its slot goes back. */
ssize_t Endpoint::post_recv_failed(int rc)
{
	data.rx.queue->unclaim_recv(1);
	ND_WARN(FI_LOG_EP_DATA, "fi_recv: ibv_post_recv: %s\n", std::strerror(rc));
	return fi_error_of_post(rc);
}

/* The queue pair reached INIT (or ERR, where verbs flushes them): post the
 * receives that waited for it, in order. */
void Endpoint::post_pending_receives() noexcept
{
	std::lock_guard<OptionalLock> guard(data.rx.lock);
	post_pending_receives_locked();
}

void Endpoint::post_pending_receives_locked() noexcept
{
	assert_held(data.rx.lock, "Endpoint::post_pending_receives_locked");
	data.set_slow_rx(SlowRx::not_ready, false);
	std::vector<PendingRecv> none;
	for (PendingRecv &pending : setup ? setup->pending_recvs : none) {
		pending.wr.sg_list = pending.sge.data();
		ibv_recv_wr *bad = nullptr;
		int rc = post_recv(data.qp.get(), &pending.wr, &bad);
		if (rc)
			ND_WARN(FI_LOG_EP_DATA, "posting a receive made before the connection: %s\n",
				std::strerror(rc));
	}
	if (setup)
		std::vector<PendingRecv>().swap(setup->pending_recvs);
	if (MultiRecv *const multi_recv = data.rx.queue ? data.rx.queue->multi() : nullptr) {
		std::lock_guard<Mutex> hold(multi_recv->lock);
		multi_recv->ready = true;
		multi_recv->pump();
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
	std::lock_guard<OptionalLock> guard(data.rx.lock);
	if (!data.rx.queue) {
		ND_INFO(FI_LOG_EP_DATA, "fi_cancel: no receive is posted before fi_enable\n");
		return -FI_ENOENT;
	}
	if (Framing *const framing = framing_of(*data.rx.queue))
		return framing->cancel(context, *bindings.rx_cq);
	/* The unposted receives, in ring order: those made before the
	 * connection, then those waiting behind a multi-receive buffer. */
	std::vector<OpRecord **> unposted;
	std::vector<OpRecord *> pending_records;
	std::vector<PendingRecv> none;
	std::vector<PendingRecv> &pending_recvs = setup ? setup->pending_recvs : none;
	pending_records.reserve(pending_recvs.size());
	for (PendingRecv &p : pending_recvs)
		pending_records.push_back(record_of(p.wr.wr_id));
	for (OpRecord *&r : pending_records)
		unposted.push_back(&r);
	std::unique_lock<Mutex> hold;
	MultiRecv *const multi_recv = data.rx.queue->multi();
	if (multi_recv) {
		hold = std::unique_lock<Mutex>(multi_recv->lock);
		for (MultiRecv::Held &h : multi_recv->held)
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
		const uint64_t seq = data.rx.queue->posted() -
				     ((data.rx.queue->posted() - from->seq()) & kSeqMask);
		OpRecord *to = &data.rx.queue->record_at(seq - 1);
		*to = *from;
		to->set_seq(seq - 1);
		*unposted[i] = to;
	}
	if (found < pending_records.size()) {
		pending_recvs.erase(pending_recvs.begin() + static_cast<std::ptrdiff_t>(found));
		pending_records.erase(pending_records.begin() + static_cast<std::ptrdiff_t>(found));
		for (size_t i = found; i < pending_recvs.size(); i++)
			pending_recvs[i].wr.wr_id = reinterpret_cast<uintptr_t>(pending_records[i]);
	} else {
		auto &held = multi_recv->held;
		held.erase(held.begin() + static_cast<std::ptrdiff_t>(found - pending_records.size()));
	}
	data.rx.queue->unclaim_recv(1);
	if (hold.owns_lock())
		hold.unlock(); /* the CQ takes its own lock, then this one, when it retires */
	if (const CounterCells cells = data.rx.queue->counter(CounterKind::recv))
		cells.count(false);
	/* A multi-receive buffer's entry says it is released. */
	const uint64_t flags = (canceled.flags & kPlacedByNd) ? (canceled.flags & ~kPlacedByNd) | FI_MULTI_RECV
							      : canceled.flags;
	bindings.rx_cq->report_canceled(canceled.context, flags); /* a full error ring logs */
	return 0;
}

void Endpoint::set_min_multi_recv(size_t bytes)
{
	bindings.extras_made().min_multi_recv = bytes;
	std::lock_guard<OptionalLock> guard(data.rx.lock);
	if (MultiRecv *const multi_recv = data.rx.queue ? data.rx.queue->multi() : nullptr) {
		std::lock_guard<Mutex> hold(multi_recv->lock);
		multi_recv->min_free = bytes;
	}
}

} // namespace nd
