/*
 * nd_ep_send.cpp: posting to an endpoint's send queue (post_tx, for the
 * message and RMA calls): FI_MORE batches, making room in a full ring, and
 * the reasons a send is refused. fi_inject and its kin take their own path
 * (nd_ep_inject.h) into the out-of-line parts here.
 *
 * The fast path takes no lock unless the threading model needs one
 * (FI_THREAD_SAFE, FI_THREAD_ENDPOINT, FI_THREAD_FID) and allocates nothing: records come from the rings fixed at fi_enable and
 * scatter/gather lists live on the stack.
 */
#include "nd_cq.h"
#include "nd_domain.h"
#include "nd_ep.h"
#include "nd_framing.h"
#include "nd_mr.h"

#include <arpa/inet.h>

#include <cstring>

namespace nd {

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

ssize_t Endpoint::post_tx(const TxRequest &r)
{
	if (data.link.state(std::memory_order_relaxed) != LinkState::up)
		return link_error(r.call);
	/* iWARP has no immediate data: the data goes into the peer's slot for
	 * the receive the message takes (nd_credits.h), where credits are kept. */
	const bool data_in_slot =
		(r.opcode == IBV_WR_SEND_WITH_IMM || r.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) && domain->iwarp;
	if (data_in_slot && !data.credits)
		return no_immediate_data(r.call);
	/* An atomic is a read at the responder (nd_atomic.h): it takes the
	 * read budget, and lands its old value in the local buffer. */
	const bool is_atomic = is_atomic_opcode(r.opcode);
	const bool is_read = r.opcode == IBV_WR_RDMA_READ || is_atomic;
	/* A framed message's header goes first, from its ring slot's copy. */
	const uint32_t header_bytes = r.header ? static_cast<uint32_t>(kFrameHeaderSize) : 0;
	/* Whether the data may go inline: it must fit the probed limit; a
	 * descriptor is then not needed. */
	uint64_t total = 0;
	for (size_t i = 0; i < r.count && r.iov; i++)
		total += r.iov[i].iov_len;
	const bool inline_data = !is_read && total + header_bytes <= data.max_inline;
	if ((r.flags & FI_INJECT) && !inline_data && !is_atomic) {
		ND_WARN(FI_LOG_EP_DATA, "%s: %llu bytes to inject; inject_size is %u\n", r.call,
			static_cast<unsigned long long>(total), data.max_inline - header_bytes);
		return -FI_EMSGSIZE;
	}
	ibv_sge sge[kMaxSge + 1];
	ssize_t ret = gather_sges(r.call, r.iov, r.desc, r.count, data.tx.iov_limit, !inline_data, false,
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
		ND_WARN(FI_LOG_EP_DATA, "%s: the connection allows no RDMA reads%s (negotiated outbound read limit 0)\n",
			r.call, is_atomic ? " and so no atomics" : "");
		return -FI_EACCES;
	}
	/* fi_cntr(3): reads and fetching atomics count as reads, fi_atomic
	 * as a write. */
	Counter *counter = bindings.counter((r.cq_flags & FI_READ) ? CounterKind::read
					    : (r.opcode == IBV_WR_SEND || r.opcode == IBV_WR_SEND_WITH_IMM)
						    ? CounterKind::send
						    : CounterKind::write);
	if (r.report && !bindings.user_tx_cq) {
		ND_WARN(FI_LOG_EP_DATA, "%s: a completion is wanted but no CQ is bound with FI_TRANSMIT\n", r.call);
		return -FI_ENOCQ;
	}

	CreditsAfterUnlock credits_after_unlock{this};
	std::lock_guard<OptionalLock> guard(data.tx.lock);
	/* Again under the lock: a flush (flush_queue_pair, under it) may have
	 * ended the link since; nothing is posted to a queue pair in error. */
	if (data.link.state(std::memory_order_relaxed) != LinkState::up)
		return link_error(r.call);
	if (!peer_spoke(true))
		return peer_not_ready(r.call);
	const bool takes_receive = r.opcode == IBV_WR_SEND || r.opcode == IBV_WR_SEND_WITH_IMM || data_in_slot;
	if (data_in_slot && !data.credits->carries_data())
		return no_immediate_data(r.call);
	if (data.credits && takes_receive && !data.credits->can_send())
		return no_credit(r.call);
	if (data.tx.queue->no_room() || (is_read && data.tx.queue->reads_in_flight() >= conn.effective.outbound)) {
		/* Post what FI_MORE held back, retire what has completed, then
		 * look again. */
		if ((ret = free_send_slots(r.call)))
			return ret;
		if (is_read && data.tx.queue->reads_in_flight() >= conn.effective.outbound)
			return -FI_EAGAIN; /* never more reads in flight than negotiated */
	}
	/* ofi_rxm's flow control (nd_flow_ctrl.h): a request that takes one
	 * of the peer's receives needs a credit. */
	const bool flow_taken = takes_peer_receive(r.opcode) && data.flow.enabled();
	if (flow_taken && !data.flow.take(r.flags & kFlowPriority))
		return no_flow_credit(r.call);
	if (data_in_slot) {
		ret = post_with_data_slot(r, sge, num_sge, static_cast<uint32_t>(total), inline_data, counter != nullptr);
		credits_after_post(ret == 0);
		return ret;
	}
	/* An unsignaled request retires when a later signaled one completes
	 * (nd_wq.h), and an unsignaled read gives its read budget back then.
	 * Every signal_interval-th request is signaled, to retire the ring, and
	 * every (outbound limit / 2)-th read: whenever the limit is reached, a
	 * signaled request is then among those in flight, and the first half
	 * retiring still leaves the pipe half full. */
	const SendClaim request{r.context, static_cast<uint32_t>(r.cq_flags), static_cast<uint32_t>(total), r.report,
				r.report || counter};
	const Claimed claimed =
		is_read ? data.tx.queue->claim<SendKind::read>(request, data.read_signal_every)
			: data.tx.queue->claim<SendKind::send_or_write>(request, 1, data.read_fence);
	sync_fence();
	OpRecord &record = *claimed.record;
	if (r.header) {
		/* The slot's header lives as long as the request does. */
		uint8_t *header = data.tx_headers->bytes.get() +
				  static_cast<size_t>(data.tx.queue->slot_of(record)) * kFrameHeaderSize;
		std::memcpy(header, r.header, kFrameHeaderSize);
		sge[0].addr = reinterpret_cast<uintptr_t>(header);
		sge[0].length = static_cast<uint32_t>(kFrameHeaderSize);
		sge[0].lkey = data.tx_headers->mr->lkey;
	}

	ibv_send_wr wr;
	wr.wr_id = reinterpret_cast<uintptr_t>(&record);
	wr.next = nullptr;
	wr.sg_list = sge;
	wr.num_sge = num_sge;
	wr.opcode = r.opcode;
	wr.send_flags = claimed.send_flags | (inline_data && total + header_bytes ? IBV_SEND_INLINE : 0);
	wr.imm_data = r.imm_data;
	if (is_atomic) {
		wr.wr.atomic.remote_addr = r.remote_addr;
		wr.wr.atomic.compare_add = r.compare_add;
		wr.wr.atomic.swap = r.swap;
		wr.wr.atomic.rkey = static_cast<uint32_t>(r.remote_key);
	} else {
		wr.wr.rdma.remote_addr = r.remote_addr;
		wr.wr.rdma.rkey = static_cast<uint32_t>(r.remote_key);
	}
	/* The slot is committed (claim): a batch that cannot be made posts
	 * the request at once. */
	const bool more = (r.flags & FI_MORE) && start_batch();
	if (more) {
		ret = defer(wr, inline_data && total + header_bytes, r.call);
	} else {
		ret = submit(wr, r.call);
	}
	if (data.credits)
		credits_after_post(ret == 0 && takes_receive);
	if (flow_taken && ret != 0)
		data.flow.give_back();
	return ret;
}

/* A message that would take a receive the peer has not told of waits
 * (-FI_EAGAIN) until its credit message comes (ofi_rxm's flow control). */
ssize_t Endpoint::no_flow_credit(const char *call) const noexcept
{
	ND_INFO(FI_LOG_EP_DATA, "%s: the peer told of no receive for it yet (ofi_rxm's flow control)\n", call);
	return -FI_EAGAIN;
}

/*
 * Remote CQ data on iWARP (nd_credits.h), under the send lock, with credit
 * and room for the application's request: the data goes by RDMA write
 * into the peer's slot for the receive the message takes, then the
 * message. fi_writedata's message is a zero-byte send behind its write,
 * which the peer reports as the remote write with its data. The requests
 * before the message report nothing; the message is the application's
 * (its context, flags, counter). They take up to two send-ring slots past
 * the application's room, out of the internal ones (the ring holds them:
 * a request is claimed only while the application's room is not full).
 */
ssize_t Endpoint::post_with_data_slot(const TxRequest &r, ibv_sge *sge, int num_sge, uint32_t total, bool inline_data,
				      bool counted)
{
	assert_held(data.tx.lock, "Endpoint::post_with_data_slot");
	ReceiveCredits &c = *data.credits;
	SendQueue &queue = *data.tx.queue;
	const bool write = r.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
	const uint32_t inline_flag = inline_data && total ? IBV_SEND_INLINE : 0;
	ibv_send_wr wr[3] = {};
	int n = 0;
	if (write) {
		const Claimed claimed = queue.claim<SendKind::send_or_write>(SendClaim{nullptr, 0, total, false, false}, 1,
								    data.read_fence);
		ibv_send_wr &w = wr[n++];
		w.wr_id = reinterpret_cast<uintptr_t>(claimed.record);
		w.sg_list = sge;
		w.num_sge = num_sge;
		w.opcode = IBV_WR_RDMA_WRITE;
		w.send_flags = claimed.send_flags | inline_flag;
		w.wr.rdma.remote_addr = r.remote_addr;
		w.wr.rdma.rkey = static_cast<uint32_t>(r.remote_key);
	}
	const Claimed slot_claimed = queue.claim<SendKind::internal>(
		SendClaim{nullptr, 0, static_cast<uint32_t>(kDataSlotBytes), false, false});
	/* Its source stays as written until this request retires: one per
	 * send-ring slot. */
	uint64_t *source = c.slot_source(queue.slot_of(*slot_claimed.record));
	source[0] = DataSlot::encode(write ? DataSlotKind::write : DataSlotKind::message, c.sent(), ntohl(r.imm_data));
	source[1] = write ? total : 0;
	ibv_sge slot_sge;
	slot_sge.addr = reinterpret_cast<uintptr_t>(source);
	slot_sge.length = static_cast<uint32_t>(kDataSlotBytes);
	slot_sge.lkey = c.lkey();
	{
		ibv_send_wr &w = wr[n++];
		w.wr_id = reinterpret_cast<uintptr_t>(slot_claimed.record);
		w.sg_list = &slot_sge;
		w.num_sge = 1;
		w.opcode = IBV_WR_RDMA_WRITE;
		w.send_flags = slot_claimed.send_flags;
		w.wr.rdma.remote_addr = c.next_slot_address();
		w.wr.rdma.rkey = c.peer_rkey();
	}
	const SendClaim request{r.context, static_cast<uint32_t>(r.cq_flags), total, r.report, r.report || counted};
	const Claimed claimed = queue.claim<SendKind::send_or_write>(request, 1, data.read_fence);
	sync_fence();
	{
		ibv_send_wr &w = wr[n++];
		w.wr_id = reinterpret_cast<uintptr_t>(claimed.record);
		w.sg_list = write ? nullptr : sge;
		w.num_sge = write ? 0 : num_sge;
		w.opcode = IBV_WR_SEND;
		w.send_flags = claimed.send_flags | (write ? 0 : inline_flag);
	}
	for (int i = 0; i + 1 < n; i++)
		wr[i].next = &wr[i + 1];
	return submit(wr[0], r.call);
}

/* iWARP's fi_injectdata and fi_inject_writedata: three requests or two,
 * not one inline post, so through post_tx with FI_INJECT (inline, no
 * completion). */
ssize_t Endpoint::inject_with_data_slot(ibv_wr_opcode opcode, const void *buf, size_t len, uint32_t imm_data,
					uint64_t remote_addr, uint64_t remote_key)
{
	const bool write = opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
	iovec iov{const_cast<void *>(buf), len};
	TxRequest r;
	r.opcode = opcode;
	r.iov = &iov;
	r.desc = nullptr;
	r.count = 1;
	r.remote_addr = remote_addr;
	r.remote_key = remote_key;
	r.imm_data = imm_data;
	r.context = nullptr;
	r.flags = FI_INJECT;
	r.cq_flags = write ? FI_RMA | FI_WRITE : FI_SEND | FI_MSG;
	r.report = false;
	r.call = write ? "fi_inject_writedata" : "fi_injectdata";
	return post_tx(r);
}

/* Under the send lock, after a post: a message took one of the peer's
 * receives, and a count that could not be written before goes now. */
void Endpoint::credits_after_post(bool took_receive) noexcept
{
	data.credits->count_sent(took_receive);
	if (data.credits->write_pending())
		write_credits();
}

/* While FI_MORE holds requests back, fi_inject takes its slow path, which
 * posts them first. Where the send lock is taken, every inject takes that
 * path anyway, and the slow-transmit bits, which posters read without the lock, is left
 * as fi_enable set it. */
void Endpoint::hold_injects(bool held) noexcept
{
	const uint8_t bits = data.link.slow_tx();
	if (bits & SlowTx::locked)
		return;
	data.link.set_slow_tx(static_cast<uint8_t>(held ? bits | SlowTx::held : bits & ~SlowTx::held));
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
	else
		hold_injects(true);
	++b.count;
	return b.has_room(data.max_inline) ? 0 : post_batch(nullptr, call);
}

/* Posts what FI_MORE held back, if anything. */
ssize_t Endpoint::post_deferred(const char *call)
{
	return data.batch && data.batch->count ? post_batch(nullptr, call) : 0;
}

/* Posts the held-back requests, followed by `last` (claimed, or null),
 * with one doorbell. On failure what was not posted is unclaimed; held-back
 * requests among it are lost, which the log says (the provider's own
 * accounting keeps the queue within the device's limits, so this takes a
 * device failure). */
ssize_t Endpoint::post_batch(ibv_send_wr *last, const char *call, bool own)
{
	assert_held(data.tx.lock, "Endpoint::post_batch");
	SendBatch &b = *data.batch;
	ibv_send_wr *first = b.count ? &b.wr[0] : last;
	if (b.count) {
		b.wr[b.count - 1].next = last;
		hold_injects(false);
	}
	b.count = b.sges = b.inline_used = 0;
	if (!first)
		return 0;
	ibv_send_wr *bad = nullptr;
	const int rc = post_send(data.qp.get(), first, &bad);
	return rc ? submit_failed(rc, bad, first, call, own) : 0;
}

/* Where the send lock is taken every post is out of line anyway, and the
 * bits are left as fi_enable set them (as hold_injects leaves them). */
void Endpoint::sync_fence_bit() noexcept
{
	const uint8_t bits = data.link.slow_tx();
	if (bits & SlowTx::locked)
		return;
	const bool must_fence = data.tx.queue->reads_unfenced();
	if (static_cast<bool>(bits & SlowTx::fence) != must_fence)
		data.link.set_slow_tx(static_cast<uint8_t>(must_fence ? bits | SlowTx::fence : bits & ~SlowTx::fence));
}

ssize_t Endpoint::single_failed(int rc, ibv_wr_opcode opcode, const char *call, bool own) noexcept
{
	ibv_send_wr last{};
	last.wr_id = reinterpret_cast<uintptr_t>(&data.tx.queue->record_at(data.tx.queue->posted() - 1));
	last.opcode = opcode;
	return submit_failed(rc, &last, &last, call, own);
}

ssize_t Endpoint::submit_failed(int rc, ibv_send_wr *unposted, ibv_send_wr *first, const char *call,
				bool own) noexcept
{
	if (!unposted)
		unposted = first;
	/* Requests FI_MORE held back are those before the batch's last
	 * (they are the batch's own array). */
	bool held_lost = false;
	if (data.batch)
		for (const ibv_send_wr *w = unposted; w; w = w->next) {
			if (w < data.batch->wr || w >= data.batch->wr + SendBatch::kMaxRequests)
				continue;
			held_lost = true;
			/* Its caller took a flow credit and returned; the
			 * credit is given back here, as the caller of the
			 * failed last request gives back its own. */
			if (takes_peer_receive(w->opcode) && data.flow.enabled())
				data.flow.give_back();
		}
	data.tx.queue->unclaim(unposted);
	sync_fence();
	/* nd's own request alone is info; the application's, or its held
	 * requests lost behind nd's, are a warning. */
	if (own && !held_lost)
		ND_INFO(FI_LOG_EP_DATA, "endpoint %p: %s: ibv_post_send: %s\n", static_cast<void *>(this), call,
			std::strerror(rc));
	else
		ND_WARN(FI_LOG_EP_DATA, "%s: ibv_post_send: %s%s\n", call, std::strerror(rc),
			held_lost ? " (requests posted earlier with FI_MORE are lost with it)" : "");
	return fi_error_of_post(rc);
}

/* Remote CQ data travels as immediate data, which iWARP does not have:
 * there it goes into the peer's data slots, which need receive credits on
 * both sides (fi_getinfo reports cq_data_size 0 where they cannot be
 * kept). Tagged endpoints carry it in their frame header instead and never
 * come here with it. */
ssize_t Endpoint::no_immediate_data(const char *call) const
{
	if (!data.credits)
		ND_WARN(FI_LOG_EP_DATA, "%s: iWARP (%s) has no immediate data, and remote CQ data needs the endpoint's receive credits, which it does not keep (FI_RM_DISABLED, a shared receive context or FI_MULTI_RECV)\n",
			call, domain->info->domain_attr->name);
	else
		ND_WARN(FI_LOG_EP_DATA, "%s: iWARP (%s) has no immediate data, and the peer offered no slots for remote CQ data (it keeps no receive credits)\n",
			call, domain->info->domain_attr->name);
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
ssize_t Endpoint::free_send_slots(const char *call)
{
	assert_held(data.tx.lock, "Endpoint::free_send_slots");
	SendQueue &queue = *data.tx.queue;
	if (queue.full()) {
		/* Where a signaled request may have completed, the CQ is read
		 * first: the unsignaled run before it then retires. A ring at
		 * its working size (nd_wq.h) then grows only with what is
		 * really in flight; the inline ring grows anyway, but empty,
		 * so that it leaves nothing behind to keep (WorkQueue::grow
		 * then makes no extras). */
		if (queue.signaled_outstanding()) {
			bindings.tx_cq->progress();
			if (!queue.ring_is_inline() && !queue.no_room())
				return 0;
		}
		/* Else it grows (what FI_MORE holds back stays held). */
		if (grow_queue(true) && !queue.no_room())
			return 0;
	}
	if (ssize_t ret = post_deferred(call))
		return ret;
	bindings.tx_cq->progress();
	return data.tx.queue->no_room() ? -FI_EAGAIN : 0;
}

} // namespace nd
