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
	framing->mr.reset(ibv_reg_mr(pd, framing->slab.get(), bytes, IBV_ACCESS_LOCAL_WRITE));
	if (!framing->mr) {
		*err = errno ? errno : ENOMEM;
		return nullptr;
	}
	*err = 0;
	return framing;
}

void Framing::fill_bounce(OpRecord &record, uint8_t *bounce, ibv_recv_wr &wr, ibv_sge &sge) noexcept
{
	record.context = bounce;
	/* FI_MULTI_RECV marks a buffer that nd places messages in: the CQ's
	 * inline path leaves it to complete() (WorkQueue::placed_message). */
	record.flags = FI_RECV | FI_MULTI_RECV;
	record.len = static_cast<uint32_t>(slot_size);
	record.read_mark = 0;
	record.report = false;
	sge.addr = reinterpret_cast<uintptr_t>(bounce);
	sge.length = static_cast<uint32_t>(slot_size);
	sge.lkey = mr->lkey;
	wr.wr_id = reinterpret_cast<uintptr_t>(&record);
	wr.next = nullptr;
	wr.sg_list = &sge;
	wr.num_sge = 1;
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
	OpRecord &record = queue->next();
	ibv_recv_wr wr;
	ibv_sge sge;
	fill_bounce(record, bounce, wr, sge);
	queue->commit();
	ibv_recv_wr *bad = nullptr;
	if (int rc = ibv_post_recv(to, &wr, &bad)) {
		queue->uncommit();
		ND_WARN(FI_LOG_EP_DATA, "framed endpoint: reposting a receive buffer: %s\n", std::strerror(rc));
		return;
	}
	if (reposted)
		reposted(owner);
}

bool Framing::deliver(const FramedRecv &recv, const frame::Header &header, const uint8_t *payload,
		      size_t length, CqEntry *out, CompletionQueue &cq) noexcept
{
	const size_t copied = frame::scatter(recv.iov, recv.count, payload, std::min<uint64_t>(length, recv.capacity));
	const bool fits = length <= recv.capacity;
	if (recv_counter)
		recv_counter.count(fits);
	const uint64_t data = (header.flags & frame::kHasData) ? header.data : 0;
	if (!fits) {
		ND_INFO(FI_LOG_EP_DATA, "framed endpoint: a %zu-byte message for a %llu-byte receive; truncated\n",
			length, static_cast<unsigned long long>(recv.capacity));
		if (cq.internal)
			return false;
		CqError error{};
		error.entry.op_context = recv.context;
		error.entry.flags = cq_flags_of(header);
		error.entry.len = copied;
		error.entry.data = data;
		error.entry.tag = header.tag;
		error.entry.olen = length - copied;
		error.entry.err = FI_ETRUNC;
		error.entry.prov_errno = IBV_WC_LOC_LEN_ERR; /* what the adapter would have said */
		if (!cq.push_error(error))
			ND_WARN(FI_LOG_EP_DATA, "framed endpoint: out of memory for a truncated receive's error entry\n");
		return false;
	}
	out->op_context = recv.context;
	out->flags = cq_flags_of(header);
	out->len = length;
	out->buf = nullptr;
	out->data = data;
	out->tag = header.kind == static_cast<uint8_t>(frame::Kind::tagged) ? header.tag : 0;
	return true;
}

bool Framing::on_completion(const ibv_wc &wc, CqEntry *out, CompletionQueue &cq) noexcept
{
	OpRecord *record = record_of(wc.wr_id);
	uint8_t *bounce = static_cast<uint8_t *>(record->context);
	queue->retire_through(record);
	if (wc.status != IBV_WC_SUCCESS) {
		/* A flush is how a closed connection ends; anything else breaks
		 * it. Either way the buffer stays out of the adapter, and the
		 * receives the application posted (waiting here, not in the
		 * adapter) end as the adapter's would: FI_ECANCELED. */
		if (wc.status != IBV_WC_WR_FLUSH_ERR) {
			if (queue->targets.link)
				queue->targets.link->on(Link::Event::failed);
			ND_WARN(FI_LOG_EP_DATA, "framed endpoint: a receive failed: %s; the connection carries no more data\n",
				ibv_wc_status_str(wc.status));
		}
		cancel_posted(cq);
		return false;
	}
	if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
		/* A remote fi_writedata consumed one of nd's buffers. */
		repost(bounce);
		if (cq.internal)
			return false;
		out->op_context = nullptr;
		out->flags = FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;
		out->len = wc.byte_len;
		out->buf = nullptr;
		out->data = ntohl(wc.imm_data);
		out->tag = 0;
		return true;
	}
	frame::Header header;
	if (!frame::read_header(bounce, wc.byte_len, &header)) {
		/* Nothing of it reaches the application, and no later message
		 * could be trusted to be matched right: the connection ends
		 * (FI_SHUTDOWN; what is posted is flushed). The buffer stays
		 * out of the adapter, as after a failed receive. */
		ND_WARN(FI_LOG_EP_DATA, "framed endpoint: a %u-byte message without nd's frame (a peer that is "
			"not framed, or lies: both endpoints of a connection must be opened with FI_TAGGED); "
			"the connection is ended\n", wc.byte_len);
		if (queue->targets.link)
			queue->targets.link->on(Link::Event::failed);
		if (unframed)
			unframed(owner);
		return false;
	}
	const uint8_t *payload = bounce + sizeof(frame::Header);
	const size_t length = wc.byte_len - sizeof(frame::Header);
	const frame::Kind kind = static_cast<frame::Kind>(header.kind);
	FramedRecv match;
	bool found = false;
	{
		std::lock_guard<std::mutex> hold(lock);
		for (auto it = posted.begin(); it != posted.end(); ++it) {
			if (frame::matches(it->tagged, it->tag, it->ignore, kind, header.tag)) {
				match = *it;
				posted.erase(it);
				found = true;
				break;
			}
		}
		if (!found) {
			try {
				unexpected.push_back(Unexpected{header, std::vector<uint8_t>(payload, payload + length)});
			} catch (const std::bad_alloc &) {
				ND_WARN(FI_LOG_EP_DATA, "framed endpoint: out of memory for an unexpected %zu-byte message; it is lost\n",
					length);
			}
		}
	}
	bool report = false;
	if (found)
		report = deliver(match, header, payload, length, out, cq) && match.report && !cq.internal;
	repost(bounce);
	return report;
}

ssize_t Framing::post(const FramedRecv &recv, CompletionQueue &cq)
{
	std::lock_guard<OptionalLock> cq_guard(cq.lock);
	std::unique_lock<std::mutex> hold(lock);
	for (auto it = unexpected.begin(); it != unexpected.end(); ++it) {
		if (!frame::matches(recv.tagged, recv.tag, recv.ignore, static_cast<frame::Kind>(it->header.kind),
				    it->header.tag))
			continue;
		if (!cq.internal && cq.ready.room() == 0) {
			ND_INFO(FI_LOG_EP_DATA, "fi_recv: a message waits for this receive but the CQ is full; read it first\n");
			return -FI_EAGAIN;
		}
		Unexpected message = std::move(*it);
		unexpected.erase(it);
		hold.unlock();
		CqEntry entry;
		if (deliver(recv, message.header, message.payload.data(), message.payload.size(), &entry, cq) &&
		    recv.report && !cq.internal) {
			cq.ready.push_back(entry);
			if (cq.waitable)
				cq.signal(); /* wake an fi_cq_sread */
		} else if (!cq.internal && !cq.errors.empty() && cq.waitable) {
			cq.signal();
		}
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
}

ssize_t Framing::cancel(void *context, CompletionQueue &cq)
{
	FramedRecv canceled;
	{
		std::lock_guard<std::mutex> hold(lock);
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
	if (!cq.report_canceled(canceled.context, cq_flags_of(canceled)))
		ND_WARN(FI_LOG_EP_DATA, "fi_cancel: out of memory for the cancelled receive's error entry\n");
	return 0;
}

void Framing::cancel_posted(CompletionQueue &cq) noexcept
{
	std::deque<FramedRecv> waiting;
	{
		std::lock_guard<std::mutex> hold(lock);
		waiting.swap(posted);
	}
	for (const FramedRecv &recv : waiting) {
		if (recv_counter)
			recv_counter.count(false);
		if (!recv.report || cq.internal)
			continue;
		CqError error{};
		error.entry.op_context = recv.context;
		error.entry.flags = cq_flags_of(recv);
		error.entry.err = FI_ECANCELED;
		if (!cq.push_error(error))
			ND_WARN(FI_LOG_EP_DATA, "framed endpoint: out of memory for a cancelled receive's error entry\n");
	}
}

void Framing::cancel_all(CompletionQueue &cq) noexcept
{
	{
		std::lock_guard<std::mutex> hold(lock);
		unexpected.clear();
	}
	/* The CQ's lock, then this one's, as post() takes them. */
	std::lock_guard<OptionalLock> cq_guard(cq.lock);
	cancel_posted(cq);
}

} // namespace nd
