/* nd_framing.cpp: tagged messages on a framed endpoint (nd_framing.h). */
#include "nd_framing.h"

#include <arpa/inet.h>
#include <endian.h>

#include <algorithm>
#include <cstring>

namespace nd {
namespace frame {

Header make_header(Kind kind, uint64_t tag, bool has_data, uint64_t data) noexcept
{
	Header h{};
	h.magic = htole16(kMagic);
	h.kind = static_cast<uint8_t>(kind);
	h.flags = has_data ? kHasData : 0;
	h.tag = htole64(tag);
	h.data = htole64(has_data ? data : 0);
	return h;
}

bool read_header(const void *bytes, size_t length, Header *out) noexcept
{
	if (length < sizeof(Header))
		return false;
	Header h;
	std::memcpy(&h, bytes, sizeof(h));
	if (le16toh(h.magic) != kMagic ||
	    (h.kind != static_cast<uint8_t>(Kind::message) && h.kind != static_cast<uint8_t>(Kind::tagged)))
		return false;
	h.magic = kMagic;
	h.tag = le64toh(h.tag);
	h.data = le64toh(h.data);
	*out = h;
	return true;
}

size_t scatter(const iovec *iov, size_t count, const uint8_t *from, size_t length) noexcept
{
	size_t copied = 0;
	for (size_t i = 0; i < count && copied < length; i++) {
		const size_t n = std::min(iov[i].iov_len, length - copied);
		if (n && iov[i].iov_base)
			std::memcpy(iov[i].iov_base, from + copied, n);
		copied += iov[i].iov_base ? n : 0;
	}
	return copied;
}

} // namespace frame

void UnexpectedMessages::make(size_t arena_bytes, uint32_t buffers)
{
	arena_ = std::make_unique_for_overwrite<uint8_t[]>(arena_bytes);
	arena_size_ = arena_bytes;
	capacity_ = kMaxCopies + buffers;
	messages_ = std::make_unique_for_overwrite<Message[]>(capacity_);
}

uint8_t *UnexpectedMessages::reserve_arena(size_t length, size_t *at) noexcept
{
	length = (length + 7) & ~size_t{7};
	if (copies_ == 0)
		arena_begin_ = arena_end_ = 0;
	if (arena_end_ >= arena_begin_) {
		/* [begin, end) is used: room after end, or from 0 to begin
		 * (strictly less, so that a full ring is not an empty one). */
		if (arena_size_ - arena_end_ >= length) {
			*at = arena_end_;
		} else if (length < arena_begin_) {
			*at = 0;
		} else {
			return nullptr;
		}
	} else if (arena_begin_ - arena_end_ > length) {
		*at = arena_end_; /* wrapped: room between end and begin */
	} else {
		return nullptr;
	}
	arena_end_ = *at + length;
	return arena_.get() + *at;
}

bool UnexpectedMessages::keep(const frame::Header &header, uint8_t *buffer, const uint8_t *payload,
			      uint32_t length) noexcept
{
	if (count_ == capacity_) { /* cannot be: one entry per buffer is kept free */
		ND_WARN(FI_LOG_EP_DATA, "framed endpoint: %u messages wait already\n", count_);
		return false;
	}
	Message &m = messages_[count_];
	m.header = header;
	m.length = length;
	size_t at = 0;
	uint8_t *copy = copies_ < kMaxCopies ? reserve_arena(length, &at) : nullptr;
	if (copy) {
		std::memcpy(copy, payload, length);
		m.payload = copy;
		m.buffer = nullptr;
		m.arena_at = at;
		copies_++;
	} else {
		m.payload = payload;
		m.buffer = buffer;
		m.arena_at = 0;
	}
	count_++;
	return copy != nullptr;
}

void UnexpectedMessages::take(uint32_t i) noexcept
{
	const bool copied = messages_[i].buffer == nullptr;
	std::copy(&messages_[i + 1], &messages_[count_], &messages_[i]);
	count_--;
	if (!copied)
		return;
	copies_--;
	/* The oldest copy still kept marks where the used bytes begin. */
	for (uint32_t j = 0; j < count_; j++) {
		if (!messages_[j].buffer) {
			arena_begin_ = messages_[j].arena_at;
			return;
		}
	}
	arena_begin_ = arena_end_ = 0;
}

void UnexpectedMessages::clear() noexcept
{
	count_ = copies_ = 0;
	arena_begin_ = arena_end_ = 0;
}

namespace {

uint64_t cq_flags_of(const frame::Header &header) noexcept
{
	return FI_RECV | (header.kind == static_cast<uint8_t>(frame::Kind::tagged) ? FI_TAGGED : FI_MSG) |
	       ((header.flags & frame::kHasData) ? FI_REMOTE_CQ_DATA : 0);
}

uint64_t cq_flags_of(const FramedRecv &recv) noexcept
{
	return FI_RECV | (recv.tagged ? FI_TAGGED : FI_MSG);
}

} // namespace

std::unique_ptr<Framing> Framing::make(ibv_pd *pd, uint32_t count, size_t max_payload, int *err)
{
	auto framing = std::make_unique<Framing>();
	framing->count = count;
	framing->slot_size = sizeof(frame::Header) + max_payload;
	const size_t bytes = framing->slot_size * count;
	framing->slab = std::make_unique<uint8_t[]>(bytes);
	framing->unexpected.make(bytes, count);
	*err = 0;
	if (!pd)
		return framing;
	framing->mr.reset(ibv_reg_mr(pd, framing->slab.get(), bytes, IBV_ACCESS_LOCAL_WRITE));
	if (!framing->mr) {
		*err = errno ? errno : ENOMEM;
		return nullptr;
	}
	return framing;
}

OpRecord &Framing::claim_bounce(ReceiveQueue &in, uint8_t *bounce, ibv_recv_wr &wr, ibv_sge &sge) noexcept
{
	/* Its completions go to on_message through WorkQueue::retire. */
	OpRecord &record = in.claim_recv(bounce, FI_RECV | kPlacedByNd, static_cast<uint32_t>(slot_size), false);
	sge.addr = reinterpret_cast<uintptr_t>(bounce);
	sge.length = static_cast<uint32_t>(slot_size);
	sge.lkey = mr ? mr->lkey : 0;
	wr.wr_id = reinterpret_cast<uintptr_t>(&record);
	wr.next = nullptr;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return record;
}

void Framing::repost(uint8_t *bounce) noexcept
{
	ibv_qp *to = qp.load(std::memory_order_acquire);
	if (!to)
		return; /* the endpoint is closing */
	if (queue->full()) {
		ND_WARN(FI_LOG_EP_DATA, "framed endpoint: no ring slot to repost a receive buffer\n");
		return;
	}
	ibv_recv_wr wr;
	ibv_sge sge;
	claim_bounce(*queue, bounce, wr, sge);
	ibv_recv_wr *bad = nullptr;
	if (int rc = post_recv(to, &wr, &bad)) {
		queue->unclaim_recv(1);
		ND_WARN(FI_LOG_EP_DATA, "framed endpoint: reposting a receive buffer: %s\n", std::strerror(rc));
		return;
	}
	if (reposted)
		reposted(owner);
}

void Framing::deliver(const FramedRecv &recv, const frame::Header &header, const uint8_t *payload,
		      size_t length, CompletionSink &sink) noexcept
{
	const size_t copied = frame::scatter(recv.iov, recv.count, payload, std::min<uint64_t>(length, recv.capacity));
	const bool fits = length <= recv.capacity;
	if (recv_counter)
		recv_counter.count(fits);
	const uint64_t data = (header.flags & frame::kHasData) ? header.data : 0;
	if (!fits) {
		ND_INFO(FI_LOG_EP_DATA, "framed endpoint: a %zu-byte message for a %llu-byte receive; truncated\n",
			length, static_cast<unsigned long long>(recv.capacity));
		fi_cq_err_entry error{};
		error.op_context = recv.context;
		error.flags = cq_flags_of(header);
		error.len = copied;
		error.data = data;
		error.tag = header.tag;
		error.olen = length - copied;
		error.err = FI_ETRUNC;
		error.prov_errno = IBV_WC_LOC_LEN_ERR; /* what the adapter would have said */
		sink.error(error);
		return;
	}
	if (!recv.report)
		return;
	CqEntry entry;
	entry.op_context = recv.context;
	entry.flags = cq_flags_of(header);
	entry.len = length;
	entry.buf = nullptr;
	entry.data = data;
	entry.tag = header.kind == static_cast<uint8_t>(frame::Kind::tagged) ? header.tag : 0;
	sink.success(entry);
}

bool Framing::on_message(const ibv_wc &wc, uint8_t *bounce, CompletionSink &sink) noexcept
{
	if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
		/* A remote fi_writedata consumed one of nd's buffers. */
		repost(bounce);
		CqEntry entry;
		entry.op_context = nullptr;
		entry.flags = FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;
		entry.len = wc.byte_len;
		entry.buf = nullptr;
		entry.data = ntohl(wc.imm_data);
		entry.tag = 0;
		sink.success(entry);
		return true;
	}
	frame::Header header;
	if (!frame::read_header(bounce, wc.byte_len, &header)) {
		/* Nothing of it reaches the application, and no later message
		 * could be trusted to be matched right: the connection ends
		 * (retire breaks the link, on_end cancels what waits, FI_SHUTDOWN
		 * follows). The buffer stays out of the adapter, as after a
		 * failed receive. */
		ND_WARN(FI_LOG_EP_DATA, "framed endpoint: a %u-byte message without nd's frame (a peer that is "
			"not framed, or lies: both endpoints of a connection must be opened with FI_TAGGED); "
			"the connection is ended\n", wc.byte_len);
		if (unframed)
			unframed(owner);
		return false;
	}
	const uint8_t *payload = bounce + sizeof(frame::Header);
	const size_t length = wc.byte_len - sizeof(frame::Header);
	const frame::Kind kind = static_cast<frame::Kind>(header.kind);
	{
		std::lock_guard<Mutex> hold(lock);
		auto it = std::find_if(posted.begin(), posted.end(), [&](const FramedRecv &r) {
			return frame::matches(r.tagged, r.tag, r.ignore, kind, header.tag);
		});
		if (it == posted.end()) {
			if (!unexpected.keep(header, bounce, payload, static_cast<uint32_t>(length)))
				return true; /* it waits in its buffer */
		} else {
			const FramedRecv match = *it;
			posted.erase(it);
			deliver(match, header, payload, length, sink);
		}
	}
	repost(bounce);
	return true;
}

ssize_t Framing::post(const FramedRecv &recv, CompletionQueue &cq)
{
	return cq.complete_now([&](CompletionSink &sink) -> ssize_t {
		std::unique_lock<Mutex> hold(lock);
		for (uint32_t i = 0; i < unexpected.size(); i++) {
			const UnexpectedMessages::Message message = unexpected[i];
			if (!frame::matches(recv.tagged, recv.tag, recv.ignore,
					    static_cast<frame::Kind>(message.header.kind), message.header.tag))
				continue;
			if (recv.report && !sink.has_room()) {
				ND_INFO(FI_LOG_EP_DATA, "fi_recv: a message waits for this receive but the CQ is full; read it first\n");
				return -FI_EAGAIN;
			}
			deliver(recv, message.header, message.payload, message.length, sink);
			unexpected.take(i); /* its bytes are copied out */
			hold.unlock();
			if (message.buffer)
				repost(message.buffer);
			return 0;
		}
		if (posted.size() >= posted_limit) {
			ND_INFO(FI_LOG_EP_DATA, "fi_recv: %zu receives wait already (rx_attr->size)\n", posted.size());
			return -FI_EAGAIN;
		}
		try {
			posted.push_back(recv);
		} catch (const std::bad_alloc &) {
			return -FI_ENOMEM;
		}
		return 0;
	});
}

ssize_t Framing::cancel(void *context, CompletionQueue &cq)
{
	FramedRecv canceled;
	{
		std::lock_guard<Mutex> hold(lock);
		auto it = std::find_if(posted.begin(), posted.end(),
				       [&](const FramedRecv &r) { return r.context == context; });
		if (it == posted.end()) {
			ND_INFO(FI_LOG_EP_DATA, "fi_cancel: no receive with context %p waits; sends are not cancelled\n",
				context);
			return -FI_ENOENT;
		}
		canceled = *it;
		posted.erase(it);
	}
	if (recv_counter)
		recv_counter.count(false);
	cq.report_canceled(canceled.context, cq_flags_of(canceled));
	return 0;
}

void Framing::on_end(CompletionSink &sink) noexcept
{
	std::lock_guard<Mutex> hold(lock);
	while (!posted.empty()) {
		const FramedRecv recv = posted.front();
		posted.pop_front(); /* frees, never allocates */
		if (recv_counter)
			recv_counter.count(false);
		if (!recv.report)
			continue;
		fi_cq_err_entry error{};
		error.op_context = recv.context;
		error.flags = cq_flags_of(recv);
		error.err = FI_ECANCELED;
		sink.error(error);
	}
}

void Framing::cancel_all(CompletionQueue &cq) noexcept
{
	cq.complete_now([&](CompletionSink &sink) -> ssize_t {
		{
			std::lock_guard<Mutex> hold(lock);
			unexpected.clear(); /* held buffers go with the endpoint */
		}
		on_end(sink);
		return 0;
	});
}

} // namespace nd
