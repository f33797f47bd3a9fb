/*
 * nd_ep_credits.cpp: an endpoint's receive credits on iWARP (nd_credits.h):
 * the offer made and taken at connection time, and the writes of the
 * receiver's count.
 */
#include "nd_credits.h"
#include "nd_domain.h"
#include "nd_memlock.h"
#include "nd_ep.h"
#include "nd_ep_post_one.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <mutex>
#include <thread>

namespace nd {

std::unique_ptr<ReceiveCredits> ReceiveCredits::open(ibv_pd *pd, uint32_t data_slots, uint32_t send_slots) noexcept
{
	auto credits = std::unique_ptr<ReceiveCredits>(new (std::nothrow) ReceiveCredits);
	if (!credits)
		return nullptr;
	/* The words, the slots the peer writes (at kDataSlotsOffset, as the
	 * peer computes it), then this side's slot-write sources. */
	const size_t bytes = sizeof(CreditWords) + (static_cast<size_t>(data_slots) + send_slots) * kDataSlotBytes;
	credits->block_.reset(new (std::nothrow) uint8_t[bytes + alignof(CreditWords)]);
	if (!credits->block_)
		return nullptr;
	void *start = credits->block_.get();
	size_t room = bytes + alignof(CreditWords);
	start = std::align(alignof(CreditWords), bytes, start, room);
	std::memset(start, 0, bytes);
	credits->words_ = new (start) CreditWords{};
	auto *after = reinterpret_cast<uint64_t *>(static_cast<uint8_t *>(start) + kDataSlotsOffset);
	credits->data_slots_ = data_slots ? after : nullptr;
	credits->data_slot_count_ = data_slots;
	credits->slot_sources_ = send_slots ? after + static_cast<size_t>(data_slots) * kDataSlotWords : nullptr;
	credits->mr_.reset(ibv_reg_mr(pd, start, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
	if (!credits->mr_) {
		warn_registration_failed(FI_LOG_EP_CTRL, "receive credits", bytes, errno);
		return nullptr;
	}
	return credits;
}

/* Whether this endpoint keeps receive credits: iWARP, FI_RM_ENABLED, and a
 * receive ring of its own without multi-receive buffers (nd_credits.h). */
bool Endpoint::wants_credits() const noexcept
{
	return domain->iwarp && attr.resource_mgmt && !bindings.srx() &&
	       !(attr.caps & FI_MULTI_RECV);
}

/* iWARP: the private data of a connect or accept gets this side's offer:
 * its credits, if it keeps them, and `limits` (the connector's offered read
 * limits, the accepter's negotiated ones). Where it keeps them it takes
 * part in the first-write handshake (nd_credits.h, "Who sends first"): a
 * connector always, an accepter where the connector's offer asked. */
void Endpoint::add_credit_offer(std::vector<uint8_t> *wire, cm::ReadLimits limits, bool accepting)
{
	if (!domain->iwarp)
		return;
	cm::CreditOffer offer;
	offer.inbound = static_cast<uint8_t>(limits.inbound);
	offer.outbound = static_cast<uint8_t>(limits.outbound);
	if (data.credits) {
		const uint64_t posted = data.rx.queue->posted_acquire();
		data.credits->offer(posted, &offer);
		offer.ready_handshake = !accepting || (data.link.slow_tx() & SlowTx::peer_first);
	} else if (accepting) {
		ND_INFO(FI_LOG_EP_CTRL, "endpoint %p: keeps no receive credits (a shared receive context, FI_MULTI_RECV or FI_RM_DISABLED), so it has no ready word: a message it sends before the connector has completed may end the connection (fi_nd(7), iWARP)\n",
			static_cast<void *>(this));
	}
	cm::append_credit_offer(offer, wire);
}

/* The peer's offer, from its connect or accept. A peer that made none (not
 * nd, or an nd without credits) leaves this side sending without them. */
void Endpoint::take_credit_offer(const std::optional<cm::CreditOffer> &peer, bool accepting)
{
	if (!data.credits)
		return;
	if (!peer || !peer->rkey) {
		ND_WARN(FI_LOG_EP_CTRL, "endpoint %p: the peer offered no receive credits; sending without them (FI_RM_ENABLED is not kept on this connection)\n",
			static_cast<void *>(this));
		/* Kept (other threads may be posting): it counts nothing now. */
		data.credits->take_no_offer();
		return;
	}
	data.credits->take_offer(*peer);
	ND_INFO(FI_LOG_EP_CTRL, "endpoint %p: receive credits: the peer has %u receives posted\n",
		static_cast<void *>(this), peer->posted);
	if (!peer->ready_handshake)
		return;
	/* Before the link is up: nothing posts to the send queue yet. */
	if (accepting)
		data.link.set_slow_tx(static_cast<uint8_t>(data.link.slow_tx() | SlowTx::peer_first));
	else
		data.credits->peer_waits_for_ready();
}

/* Connector, once its connection is complete, before anything else goes
 * to the send queue (it is empty): the write the accepter waits for. */
void Endpoint::write_ready() noexcept
{
	ReceiveCredits *c = data.credits.get();
	if (!c || !c->peer_waits())
		return;
	std::lock_guard<OptionalLock> guard(data.tx.lock);
	post_ready_write("the ready write");
	c->ready_written();
}

/* The CQ's look, under the CQ's lock: the connector's ready write again,
 * while repeats are left (ReceiveCredits::ready_written). The send lock is
 * only tried, as for credit writes from a poller; a ring without an
 * internal slot free leaves it to the next look. */
void Endpoint::repeat_ready() noexcept
{
	ReceiveCredits *c = data.credits.get();
	/* The link first: it goes up after the peer's offer was taken (by the
	 * thread reading the EQ), and peer_waits is read only after it. */
	if (data.link.state(std::memory_order_acquire) != LinkState::up || !c->peer_waits())
		return;
	if (!data.tx.lock.try_lock())
		return;
	std::lock_guard<OptionalLock> guard(data.tx.lock, std::adopt_lock);
	if (!data.tx.queue->internal_full() && c->take_ready_repeat())
		post_ready_write("the ready write, repeated");
}

/* Under the send lock, with an internal slot free: one write of 1 into the
 * accepter's ready word. */
void Endpoint::post_ready_write(const char *why) noexcept
{
	ReceiveCredits *c = data.credits.get();
	/* Signaled: it retires by itself, so that a connector that sends
	 * nothing else leaves nothing outstanding for its close to wait on
	 * (soft-iWARP never completes a drain marker posted after the flush). */
	const Claimed claimed = data.tx.queue->claim<SendKind::internal>(
		SendClaim{nullptr, 0, static_cast<uint32_t>(sizeof(uint64_t)), false, true});
	ibv_sge sge;
	sge.addr = c->ready_source();
	sge.length = sizeof(uint64_t);
	sge.lkey = c->lkey();
	ibv_send_wr wr{};
	wr.wr_id = reinterpret_cast<uintptr_t>(claimed.record);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = claimed.send_flags;
	wr.wr.rdma.remote_addr = c->peer_ready_addr();
	wr.wr.rdma.rkey = c->peer_rkey();
	if (submit(wr, why, true) != 0)
		ND_WARN(FI_LOG_EP_CTRL, "endpoint %p: %s could not be posted: the accepter's sends wait until the link ends\n",
			static_cast<void *>(this), why);
}

/* Accepter, under the send lock: whether the connector's ready write has
 * landed, so that this side may send (nd_credits.h). Once seen, the
 * endpoint's posts no longer ask. A post (`wait`) gives a write already on
 * the wire its moment to land, up to kReadyWait from the first post that
 * waited, so that a connector that has completed is not met with
 * -FI_EAGAIN; a connector that has not read its EQ yet is. */
bool Endpoint::peer_spoke_slow(bool wait) noexcept
{
	ReceiveCredits *c = data.credits.get();
	if (wait && !c->peer_ready()) {
		const auto until = c->ready_wait_until(std::chrono::steady_clock::now());
		while (!c->peer_ready() && data.link.state(std::memory_order_acquire) == LinkState::up &&
		       std::chrono::steady_clock::now() < until)
			std::this_thread::yield(); /* the adapter's thread, on a software device */
	}
	if (!c->peer_ready())
		return false;
	data.link.set_slow_tx(static_cast<uint8_t>(data.link.slow_tx() & ~SlowTx::peer_first));
	ND_INFO(FI_LOG_EP_DATA, "endpoint %p: the connector spoke first; this side sends now\n",
		static_cast<void *>(this));
	return true;
}

ssize_t Endpoint::peer_not_ready(const char *call) const noexcept
{
	ND_INFO(FI_LOG_EP_DATA, "%s: the connector has not completed its connection yet (iWARP: it sends first)\n", call);
	return -FI_EAGAIN;
}

/* After receives were posted, and once the link is up: the count goes to
 * the peer if it rose (nd_credits.h). `from_progress`: called while reading
 * a CQ, which the send path itself may be doing (free_send_slots), so the send
 * lock is only tried (flush_pending_credits). Otherwise (a receive call)
 * the count leaves before the call returns: a ring full of earlier requests
 * is retired by reading the send CQ until one completes. The requests in it
 * are the transport's to finish (a message has its receive, a read or a
 * write needs no call at the peer), so this ends in transport time; the
 * bound is for a link that dies meanwhile. With automatic data progress
 * (nd's default) the application may never call again: a count kept back
 * here would be receives the sender never learns of. */
void Endpoint::advertise_credits(bool from_progress) noexcept
{
	ReceiveCredits *c = data.credits.get();
	/* The link first: it goes up after the peer's offer was taken (by the
	 * thread reading the EQ, while this one may be posting receives). */
	if (!c || data.link.state(std::memory_order_acquire) != LinkState::up ||
	    !c->peer_known())
		return;
	if (!c->write_pending() &&
	    !c->worth_writing(data.rx.queue->posted_acquire()))
		return;
	if (from_progress) {
		c->hold_write();
		flush_pending_credits();
		return;
	}
	std::lock_guard<OptionalLock> guard(data.tx.lock);
	write_credits();
	/* Held until the connector speaks first: its write, not room in the
	 * ring, is what it waits for (the next post, or the CQ's look). */
	if (!c->write_pending() || (data.link.slow_tx() & SlowTx::peer_first))
		return;
	const auto give_up = std::chrono::steady_clock::now() + kCreditWriteWait;
	do {
		free_send_slots("receive credits");
		write_credits();
		if (!c->write_pending())
			return;
		std::this_thread::yield(); /* the adapter's thread, on a software device */
	} while (data.link.state(std::memory_order_acquire) == LinkState::up &&
		 std::chrono::steady_clock::now() < give_up);
	ND_INFO(FI_LOG_EP_DATA, "endpoint %p: receive credits: the send ring stayed full; the count goes with the next post or completion\n",
		static_cast<void *>(this));
}

/* A count that could not be written (pending) goes now if the send lock is
 * free; if it is held, its holder calls this after unlocking, so a count
 * marked pending while it held the lock is not left behind. A ring too full
 * for the write leaves it to the room hook (RetireTargets::room), which
 * calls back here when a request retires. */
void Endpoint::flush_pending_credits() noexcept
{
	ReceiveCredits *c = data.credits.get();
	while (c->write_pending() &&
	       data.link.state(std::memory_order_acquire) == LinkState::up) {
		if (!data.tx.lock.try_lock())
			return;
		{
			std::lock_guard<OptionalLock> guard(data.tx.lock, std::adopt_lock);
			write_credits();
		}
		if (c->write_pending())
			return;
	}
}

/* Under the send lock: one RDMA write of the posted count to the peer's
 * word, where it rose and the ring has room (post_credit_write). */
void Endpoint::write_credits() noexcept
{
	assert_held(data.tx.lock, "Endpoint::write_credits");
	ReceiveCredits *c = data.credits.get();
	const uint64_t posted = data.rx.queue->posted_acquire();
	if (!c->worth_writing(posted)) {
		c->write_done();
		return;
	}
	if (!peer_spoke(false)) {
		c->hold_write();
		return;
	}
	if (data.tx.queue->internal_full()) {
		c->hold_write();
		/* A poller that retired the ring's last request between the
		 * test and the hold found no write waiting and left: with
		 * nothing else outstanding, no completion would come to send
		 * it. So the ring is looked at again after the hold, and the
		 * poller looks at the hold after retiring (send_waiting_credits
		 * on a locked endpoint); the fences make one of the two see the
		 * other. */
		std::atomic_thread_fence(std::memory_order_seq_cst);
		if (data.tx.queue->internal_full())
			return;
	}
	c->write_done();
	/* With anything held back by FI_MORE (submit posts it first). */
	post_credit_write<false>(posted);
}

/* A message that would take a receive the peer has not posted waits
 * (-FI_EAGAIN) until the peer's count says it has. */
ssize_t Endpoint::no_credit(const char *call) const noexcept
{
	ND_INFO(FI_LOG_EP_DATA, "%s: the peer has no receive posted for it yet (%llu sent, %llu granted)\n",
		call, static_cast<unsigned long long>(data.credits->sent()),
		static_cast<unsigned long long>(data.credits->granted()));
	return -FI_EAGAIN;
}

} // namespace nd
