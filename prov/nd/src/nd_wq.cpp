/* nd_wq.cpp: the work queue's records and the retirement of its requests. */
#include "nd_wq.h"
#include "nd.h"
#include "nd_multi_recv.h"
#include "nd_slab.h"

#include <arpa/inet.h>

#include <algorithm>
#include <bit>
#include <new>

namespace nd {

namespace {

/* Send rings of the working size (kWorkingRingSlots, 4 KiB): every send
 * ring that leaves its inline slots takes one, on the data path, so they
 * come from slabs of their own rather than malloc's heap. Never destroyed:
 * an endpoint the application leaves open at exit may still be closed by
 * a later destructor. */
SlabPool &working_rings()
{
	alignas(SlabPool) static unsigned char storage[sizeof(SlabPool)];
	static SlabPool *pool = new (storage) SlabPool(kWorkingRingSlots * sizeof(OpRecord));
	return *pool;
}

} // namespace

void RingDelete::operator()(OpRecord *ring) const noexcept
{
	if (slots == kWorkingRingSlots)
		working_rings().deallocate(ring);
	else
		delete[] ring;
}

/* A ring of `size` slots, each knowing its queue (the rest of a record is
 * written when a request takes it). */
static RingPtr make_ring(WorkQueue *owner, uint32_t size, bool nothrow)
{
	OpRecord *made;
	if (size == kWorkingRingSlots) {
		/* OpRecord is trivial: the pool's bytes are its records. */
		try {
			made = static_cast<OpRecord *>(working_rings().allocate());
		} catch (const std::bad_alloc &) {
			if (!nothrow)
				throw;
			made = nullptr;
		}
	} else {
		made = nothrow ? new (std::nothrow) OpRecord[size] : new OpRecord[size];
	}
	RingPtr ring(made, RingDelete{size});
	if (ring) {
		/* Sizes are powers of two; rings that grow are at least 4. */
		OpRecord *slot = ring.get();
		OpRecord *const end = slot + size;
		if (size % 4 == 0) {
			for (; slot != end; slot += 4) {
				slot[0].owner = owner;
				slot[1].owner = owner;
				slot[2].owner = owner;
				slot[3].owner = owner;
			}
		} else {
			for (; slot != end; slot++)
				slot->owner = owner;
		}
	}
	return ring;
}

/* Owned storage of a ring that is not the queue's inline one. */
void WorkQueue::free_ring(OpRecord *ring) const noexcept
{
	if (ring != inline_ring_)
		RingDelete{mask_ + 1}(ring);
}

/* The most requests a ring of `size` slots holds: one slot always stays
 * free for the close marker (nd_ep_queues.cpp), and `internal` are the
 * provider's own. */
static uint32_t ring_limit(uint32_t size, uint32_t internal, uint32_t depth)
{
	return std::min(depth, size - 1 - internal);
}

WorkQueue::WorkQueue(QueueKind k, uint32_t wanted_depth, uint32_t internal, uint32_t initial)
	: kind_(k), internal_slots_(static_cast<uint8_t>(internal)), depth_(std::max<uint32_t>(wanted_depth, 1))
{
	assert(internal <= UINT8_MAX);
	const uint32_t first = kind_ == QueueKind::shared_recv || initial == 0 ? depth_ : std::min(initial, depth_);
	uint32_t size = 1;
	while (size <= first + internal_slots_)
		size <<= 1;
	mask_ = size - 1;
	limit_ = ring_limit(size, internal_slots_, depth_);
	if (size <= kInlineRingSlots) {
		for (OpRecord &slot : inline_ring_)
			slot.owner = this;
		records_ = inline_ring_;
	} else {
		records_ = make_ring(this, size, false).release();
	}
	choose_retire_path();
}

SharedReceivePool::SharedReceivePool(uint32_t wanted_depth) : WorkQueue(QueueKind::shared_recv, wanted_depth)
{
	/* Every slot's index fits, so giving one back never allocates. */
	std::vector<uint32_t> &free = extras().free_slots;
	free.reserve(depth_);
	for (uint32_t i = depth_; i > 0; i--)
		free.push_back(i - 1);
}

void QueueDelete::operator()(WorkQueue *queue) const noexcept
{
	switch (queue->kind()) {
	case QueueKind::send:
		delete static_cast<SendQueue *>(queue);
		break;
	case QueueKind::recv:
		delete static_cast<ReceiveQueue *>(queue);
		break;
	case QueueKind::shared_recv:
		delete static_cast<SharedReceivePool *>(queue);
		break;
	}
}

QueueExtras::QueueExtras() = default;
QueueExtras::~QueueExtras() = default;

QueueExtras &WorkQueue::extras()
{
	if (!extras_)
		extras_ = std::make_unique<QueueExtras>();
	return *extras_;
}

/* A send ring leaving the queue's inline slots goes straight to its
 * working size (or its whole depth, if less): its unsignaled runs, not
 * only what is in flight, fill it, and each doubling on the way cost a
 * ring, a CQ reservation and a slow post. Rings double after that. */
uint32_t WorkQueue::grown_size() const noexcept
{
	const uint32_t doubled = (mask_ + 1) * 2;
	if (kind_ != QueueKind::send || records_ != inline_ring_)
		return doubled;
	/* The ring the whole depth needs: the power of two above it. */
	const uint32_t whole = std::bit_ceil(depth_ + internal_slots_ + 1u);
	return std::max(doubled, std::min(kWorkingRingSlots, whole));
}

uint32_t WorkQueue::growth() const noexcept
{
	if (kind_ == QueueKind::shared_recv || limit_ >= depth_)
		return 0;
	return ring_limit(grown_size(), internal_slots_, depth_) - limit_;
}

bool WorkQueue::grow() noexcept
{
	const uint32_t more = growth();
	if (!more)
		return false;
	const uint32_t size = grown_size();
	RingPtr ring = make_ring(this, size, true);
	if (!ring)
		return false;
	const uint64_t h = head_.load(std::memory_order_relaxed);
	const uint64_t t = tail_.load(std::memory_order_acquire);
	try {
		if (t != h || extras_) {
			/* Rings whose requests all retired go (the reaper reads
			 * nothing of a record once tail passed it: retire_through). */
			std::vector<OldRing> &old_rings = extras().old_rings;
			old_rings.erase(std::remove_if(old_rings.begin(), old_rings.end(),
						       [t](const OldRing &old) { return old.end <= t; }),
					old_rings.end());
			if (t != h) {
				OldRing old{records_, RingPtr(nullptr, RingDelete{mask_ + 1}), mask_, extras_->ring_first, h};
				if (records_ != inline_ring_)
					old.storage.reset(records_);
				try {
					old_rings.push_back(std::move(old));
				} catch (const std::bad_alloc &) {
					(void)old.storage.release(); /* still the queue's */
					throw;
				}
				records_ = nullptr; /* the old ring owns it now */
			}
		}
	} catch (const std::bad_alloc &) {
		return false;
	}
	if (records_)
		free_ring(records_);
	records_ = ring.release();
	mask_ = size - 1;
	if (extras_) /* without, nothing is outstanding in an older ring */
		extras_->ring_first = h;
	limit_ += more;
	return true;
}

void SendQueue::unclaim(const ibv_send_wr *unposted) noexcept
{
	uint64_t n = 0;
	bool signaled = false;
	unsigned fence_moves = 0;
	for (const ibv_send_wr *w = unposted; w; w = w->next) {
		const OpRecord &record = *record_of(w->wr_id);
		++n;
		signaled = signaled || record.signaled();
		fence_moves += record.moved_fence() ? 1 : 0;
	}
	if (!n)
		return;
	const OpRecord &first = *record_of(unposted->wr_id);
	const uint64_t from = head_.load(std::memory_order_relaxed) - n;
	reads_posted_ = first.read_mark - (reads_remote_memory(unposted->opcode) ? 1 : 0);
	if (signaled) {
		/* The last signaled request before `from` is outstanding (its
		 * record is kept, in this ring or an older one, until tail
		 * passes it) or it is the last one retired, tail - 1: tail moves
		 * to just past a signaled completion, and the reads it retired
		 * are reads_retired (stored before tail). A queue that never
		 * retired anything starts from nothing. */
		const uint64_t t = tail_.load(std::memory_order_acquire);
		uint64_t end = t;
		uint32_t reads = reads_retired_.load(std::memory_order_acquire);
		for (uint64_t seq = from; seq > t; --seq) {
			const OpRecord &record = record_at(seq - 1);
			if (record.signaled()) {
				end = seq;
				reads = record.read_mark;
				break;
			}
		}
		set_signaled_head(end);
		reads_at_signal_ = reads;
	}
	if (fence_moves == 1)
		reads_fenced_ = reads_fenced_before_;
	else if (fence_moves > 1)
		reads_fenced_ = reads_posted_ - 1; /* fence the next send or write */
	give_back(n);
}

OpRecord &WorkQueue::record_at(uint64_t seq) noexcept
{
	if (!extras_ || seq >= extras_->ring_first)
		return records_[seq & mask_];
	for (OldRing &old : extras_->old_rings)
		if (seq >= old.first && seq < old.end)
			return old.records[seq & old.mask];
	return records_[seq & mask_]; /* not outstanding: a caller's bug */
}

WorkQueue::~WorkQueue()
{
	free_ring(records_);
	if (SendBudget *b = budget())
		b->give_back(outstanding());
}

void WorkQueue::set_multi(std::unique_ptr<MultiRecv> m)
{
	extras().multi = std::move(m);
	choose_retire_path();
}

void WorkQueue::apply_remote_data(const OpRecord &record, uint64_t *slot, uint64_t word, ibv_wc &wc) noexcept
{
	const uint64_t write_len = __atomic_load_n(slot + 1, __ATOMIC_RELAXED);
	__atomic_store_n(slot, uint64_t{0}, __ATOMIC_RELAXED); /* read: the slot is the next message's */
	const DataSlot data = DataSlot::decode(word);
	if (!data.belongs_to(record.seq())) {
		ND_WARN(FI_LOG_CQ, "remote CQ data slot %zu holds 0x%llx, not written for receive %u: ignored\n",
			static_cast<size_t>(&record - records_), static_cast<unsigned long long>(word), record.seq());
		return;
	}
	wc.wc_flags |= IBV_WC_WITH_IMM;
	wc.imm_data = htonl(data.data);
	if (data.kind == DataSlotKind::write) {
		/* The zero-byte send after an fi_writedata: reported as the
		 * remote write it ends, as RDMA_WRITE_WITH_IMM's receive is,
		 * with the write's length. */
		wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
		wc.byte_len = static_cast<uint32_t>(write_len);
	}
}

uint64_t WorkQueue::retire_read_or_wait(OpRecord &record) noexcept
{
	if (!record.is_read()) {
		record.flags |= kDoneEarly;
		return 0;
	}
	uint64_t retired = retire_through(&record);
	/* Requests other than reads complete in order among themselves: past
	 * a signaled one that has not completed, none has. */
	const uint64_t h = head_.load(std::memory_order_acquire);
	const OpRecord *last = nullptr;
	for (uint64_t seq = tail_.load(std::memory_order_relaxed); seq < h; seq++) {
		const OpRecord &later = record_at(seq);
		if (later.is_read())
			break;
		if (later.done_early())
			last = &later;
		else if (later.signaled())
			break;
	}
	if (last)
		retired += retire_through(last);
	return retired;
}

Retired WorkQueue::retire_other(OpRecord &record, ibv_wc &wc, Placement *placement) noexcept
{
	/* Read before the slot is retired, when it may be reused. */
	Retired done{record.context, record.flags & ~kPlacedByNd, record.report()};
	bool ok = wc.status == IBV_WC_SUCCESS;
	if (ok && kind_ == QueueKind::recv && data_slots_)
		take_remote_data(record, wc); /* counted: before the slot retires */
	const bool placed_by_nd = record.flags & kPlacedByNd;
	bool release = true;
	MultiRecv *const multi = this->multi();
	PlacedReceiver *const framing = this->framing();
	if (placed_by_nd && multi) {
		/* A message in a multi-receive buffer: the slot stays the
		 * buffer's until it is released (then FI_MULTI_RECV says so). */
		std::lock_guard<Mutex> guard(multi->lock);
		const MultiRecv::Placed where = multi->complete(record, wc);
		if (placement)
			placement->buf = where.buf;
		release = where.released;
		if (release)
			done.flags |= FI_MULTI_RECV;
	}
	/* A framed endpoint's own buffer: its slot retires at once (the
	 * framing reposts it when the message is delivered), it reports
	 * nothing itself, and the receives it completes are counted by the
	 * framing, as they are delivered. */
	const bool framed_buffer = placed_by_nd && framing;
	if (!release) {
		/* counted below, as every message is */
	} else if (kind_ == QueueKind::shared_recv) {
		std::lock_guard<OptionalLock> guard(*extras_->pool_lock);
		extras_->free_slots.push_back(static_cast<uint32_t>(&record - records_));
	} else {
		const uint64_t retired = retire_in_read_order(record);
		if (SendBudget *b = budget())
			b->give_back(retired);
		tell_room();
	}
	if (framed_buffer) {
		done.report = false;
		if (placement)
			placement->nd_buffer = true;
		CompletionSink *sink = placement ? placement->sink : nullptr;
		if (ok && sink && !framing->on_message(wc, static_cast<uint8_t *>(done.context), *sink))
			ok = false; /* a message that cannot be trusted ends the link */
		if (!ok && sink)
			framing->on_end(*sink);
	} else if (kind_ != QueueKind::shared_recv) {
		/* Unsignaled requests before it never have a counter: binding one
		 * makes every request of its kind signaled. */
		const CounterKind which = counter_kind(done.flags);
		if (counted_ && which != CounterKind::none)
			if (const CounterCells cells = counter(which))
				cells.count(ok);
	}
	/* The one place a link breaks on a wc. */
	if (!ok && wc.status == IBV_WC_WR_FLUSH_ERR && flush_breaks_link_ && link_) {
		if (link_->on(Link::Event::stream_ended))
			ND_INFO(FI_LOG_CQ, "work request %p flushed while connected: the peer ended the stream\n",
				done.context);
	} else if (!ok) {
		if (wc.status != IBV_WC_SUCCESS)
			ND_INFO(FI_LOG_CQ, "work request %p: %s (vendor error 0x%x)\n", done.context,
				ibv_wc_status_str(wc.status), wc.vendor_err);
		if (wc.status != IBV_WC_WR_FLUSH_ERR) {
			if (link_)
				link_->on(Link::Event::failed);
			if (wc.status == IBV_WC_RETRY_EXC_ERR || wc.status == IBV_WC_RNR_RETRY_EXC_ERR)
				tell_peer_lost();
		}
	}
	return done;
}

} // namespace nd
