/* nd_cq.cpp: completion queues: open, read in every format, errors, waiting. */
#include "nd_cq.h"
#include "nd_device.h"
#include "nd_domain.h"
#include "nd_memlock.h"
#include "nd_unsupported.h"
#include "nd_wait.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>

namespace nd {

int fi_error_of_wc_status(ibv_wc_status status) noexcept
{
	switch (status) {
	case IBV_WC_SUCCESS: return 0;
	case IBV_WC_WR_FLUSH_ERR: return FI_ECANCELED;
	case IBV_WC_LOC_LEN_ERR: return FI_ETRUNC;	/* message longer than the receive */
	case IBV_WC_LOC_PROT_ERR:
	case IBV_WC_LOC_ACCESS_ERR:
	case IBV_WC_REM_ACCESS_ERR:
	case IBV_WC_MW_BIND_ERR: return FI_EACCES;
	case IBV_WC_RETRY_EXC_ERR: return FI_ETIMEDOUT;
	case IBV_WC_RNR_RETRY_EXC_ERR: return FI_ENORX;
	case IBV_WC_REM_ABORT_ERR: return FI_ECONNABORTED;
	case IBV_WC_REM_INV_REQ_ERR:	/* e.g. the peer's receive was too short */
	case IBV_WC_REM_OP_ERR:
	case IBV_WC_LOC_QP_OP_ERR:
	case IBV_WC_LOC_EEC_OP_ERR:
	case IBV_WC_BAD_RESP_ERR:
	default: return FI_EIO;
	}
}

namespace {

/* The CQ entry of a request that succeeded. */
inline void success_entry(const ibv_wc &wc, const Retired &done, void *buf, CqEntry *out) noexcept
{
	out->op_context = done.context;
	out->buf = buf; /* a multi-receive buffer's message; else NULL */
	out->data = 0;
	out->tag = 0;
	switch (wc.opcode) {
	case IBV_WC_RECV:
		/* The record's: FI_RECV | FI_MSG, and FI_MULTI_RECV when the
		 * message released its buffer. */
		out->flags = done.flags;
		out->len = wc.byte_len;
		break;
	case IBV_WC_RECV_RDMA_WITH_IMM:
		/* A remote fi_writedata consumed this receive. */
		out->flags = FI_RMA | FI_REMOTE_WRITE;
		out->len = wc.byte_len;
		break;
	default:
		out->flags = done.flags;
		out->len = 0;
		break;
	}
	if ((wc.opcode & IBV_WC_RECV) && (wc.wc_flags & IBV_WC_WITH_IMM)) {
		out->flags |= FI_REMOTE_CQ_DATA;
		out->data = ntohl(wc.imm_data);
	}
}

/* Writes one entry in the CQ's format. */
template <fi_cq_format Format>
void store(void *buf, size_t index, const CqEntry &entry) noexcept
{
	if constexpr (Format == FI_CQ_FORMAT_CONTEXT) {
		static_cast<fi_cq_entry *>(buf)[index].op_context = entry.op_context;
	} else if constexpr (Format == FI_CQ_FORMAT_MSG) {
		fi_cq_msg_entry &out = static_cast<fi_cq_msg_entry *>(buf)[index];
		out.op_context = entry.op_context;
		out.flags = entry.flags;
		out.len = entry.len;
	} else if constexpr (Format == FI_CQ_FORMAT_DATA) {
		static_assert(offsetof(fi_cq_tagged_entry, data) == offsetof(fi_cq_data_entry, data),
			      "fi_cq_data_entry is a prefix of fi_cq_tagged_entry");
		std::memcpy(static_cast<fi_cq_data_entry *>(buf) + index, &entry, sizeof(fi_cq_data_entry));
	} else {
		static_cast<fi_cq_tagged_entry *>(buf)[index] = entry;
	}
}

CompletionQueue *cq_of(fid_cq *cq) { return from_fid<CompletionQueue>(cq); }

template <fi_cq_format Format>
ssize_t cq_read(fid_cq *cq, void *buf, size_t count) noexcept
{
	return cq_of(cq)->read<Format>(buf, count);
}

template <fi_cq_format Format>
ssize_t cq_readfrom(fid_cq *cq, void *buf, size_t count, fi_addr_t *src_addr) noexcept
{
	ssize_t n = cq_of(cq)->read<Format>(buf, count);
	/* Connected endpoints have no address vector to name the source. */
	if (n > 0 && src_addr)
		std::fill(src_addr, src_addr + n, FI_ADDR_NOTAVAIL);
	return n;
}

ssize_t cq_readerr(fid_cq *cq, fi_cq_err_entry *buf, uint64_t flags) noexcept
{
	return guarded("fi_cq_readerr", [&] { return cq_of(cq)->readerr(buf, flags); });
}

ssize_t cq_sread(fid_cq *cq, void *buf, size_t count, const void *cond, int timeout) noexcept
{
	return guarded("fi_cq_sread",
		       [&] { return cq_of(cq)->sread(buf, count, cond, timeout, false, nullptr); });
}

ssize_t cq_sreadfrom(fid_cq *cq, void *buf, size_t count, fi_addr_t *src_addr, const void *cond,
		     int timeout) noexcept
{
	return guarded("fi_cq_sreadfrom",
		       [&] { return cq_of(cq)->sread(buf, count, cond, timeout, true, src_addr); });
}

int cq_signal(fid_cq *cq) noexcept
{
	return cq_of(cq)->signal();
}

const char *cq_strerror(fid_cq *, int prov_errno, const void *, char *buf, size_t len) noexcept
{
	const char *text = ibv_wc_status_str(static_cast<ibv_wc_status>(prov_errno));
	if (buf && len) {
		std::strncpy(buf, text, len - 1);
		buf[len - 1] = '\0';
		return buf;
	}
	return text;
}

template <fi_cq_format Format>
constexpr fi_ops_cq make_cq_ops()
{
	return fi_ops_cq{
		.size = sizeof(fi_ops_cq),
		.read = cq_read<Format>,
		.readfrom = cq_readfrom<Format>,
		.readerr = cq_readerr,
		.sread = cq_sread,
		.sreadfrom = cq_sreadfrom,
		.signal = cq_signal,
		.strerror = cq_strerror,
	};
}

fi_ops_cq cq_ops_context = make_cq_ops<FI_CQ_FORMAT_CONTEXT>();
fi_ops_cq cq_ops_msg = make_cq_ops<FI_CQ_FORMAT_MSG>();
fi_ops_cq cq_ops_data = make_cq_ops<FI_CQ_FORMAT_DATA>();
fi_ops_cq cq_ops_tagged = make_cq_ops<FI_CQ_FORMAT_TAGGED>();

int cq_close(fid *fid) noexcept
{
	return guarded("fi_close(cq)", [&] { return from_fid<CompletionQueue>(fid)->close(); });
}

int cq_control(fid *fid, int command, void *arg) noexcept
{
	return guarded("fi_control(cq)",
		       [&] { return from_fid<CompletionQueue>(fid)->control(command, arg); });
}

fi_ops cq_fid_ops = {
	.size = sizeof(fi_ops),
	.close = cq_close,
	.bind = unsupported::bind,
	.control = cq_control,
	.ops_open = unsupported::ops_open,
	.tostr = nullptr,
	.ops_set = nullptr,
};

/* The default number of entries of a CQ opened with size 0. */
constexpr int kDefaultCqSize = 1024;
/* Work completions taken per ibv_poll_cq. */
constexpr int kPollBatch = 16;

int set_nonblocking(int fd)
{
	int flags = fcntl(fd, F_GETFL);
	return flags < 0 ? -1 : fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

} // namespace

/* ---- open and close ---- */

int CompletionQueue::open(Domain *domain, const fi_cq_attr *attr, void *context, bool internal,
			  CompletionQueue **out)
{
	fi_cq_format format = attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_CONTEXT : attr->format;
	if (format != FI_CQ_FORMAT_CONTEXT && format != FI_CQ_FORMAT_MSG &&
	    format != FI_CQ_FORMAT_DATA && format != FI_CQ_FORMAT_TAGGED) {
		ND_WARN(FI_LOG_CQ, "fi_cq_open: unknown format %d\n", attr->format);
		return -FI_EINVAL;
	}
	bool waitable;
	switch (attr->wait_obj) {
	case FI_WAIT_NONE: waitable = false; break;
	case FI_WAIT_UNSPEC:
	case FI_WAIT_FD:
	case FI_WAIT_SET: waitable = true; break;
	default:
		ND_WARN(FI_LOG_CQ, "fi_cq_open: wait object %d not supported (FI_WAIT_NONE, FI_WAIT_FD, FI_WAIT_SET, FI_WAIT_UNSPEC)\n",
			attr->wait_obj);
		return -FI_ENOSYS;
	}
	WaitSet *wait_set = nullptr;
	if (attr->wait_obj == FI_WAIT_SET && !(wait_set = wait_set_of(attr->wait_set, "fi_cq_open")))
		return -FI_EINVAL;
	if (attr->flags & ~static_cast<uint64_t>(FI_AFFINITY)) {
		ND_WARN(FI_LOG_CQ, "fi_cq_open: flags 0x%llx not supported\n",
			static_cast<unsigned long long>(attr->flags));
		return -FI_EBADFLAGS;
	}
	if (attr->wait_cond != FI_CQ_COND_NONE && attr->wait_cond != FI_CQ_COND_THRESHOLD) {
		ND_WARN(FI_LOG_CQ, "fi_cq_open: wait condition %d not supported\n", attr->wait_cond);
		return -FI_ENOSYS;
	}
	/* A size beyond the device's is opened at the device's: the size only
	 * guards against an overrun, and nd reserves room for every request
	 * its endpoints may have outstanding when each is enabled, so no
	 * completion is ever lost; fi_enable refuses what truly does not fit.
	 * (libfabric's rxm asks for its whole universe, 262144 by default.) */
	int size = std::min(kDefaultCqSize, domain->max_cqe);
	if (attr->size > static_cast<size_t>(domain->max_cqe)) {
		ND_INFO(FI_LOG_CQ, "fi_cq_open: size %zu > the device's %d entries: opened with %d\n",
			attr->size, domain->max_cqe, domain->max_cqe);
		size = domain->max_cqe;
	} else if (attr->size) {
		size = static_cast<int>(attr->size);
	}
	int vector = (attr->flags & FI_AFFINITY) ? attr->signaling_vector : 0;
	if (vector < 0 || vector >= domain->context->num_comp_vectors) {
		ND_WARN(FI_LOG_CQ, "fi_cq_open: signaling vector %d; the device has %d\n", vector,
			domain->context->num_comp_vectors);
		return -FI_EINVAL;
	}

	auto cq = std::make_unique<CompletionQueue>();
	cq->domain = domain;
	cq->format = format;
	cq->internal = internal;
	cq->waitable = waitable;
	cq->vector = vector;
	cq->reserved = 0;
	cq->lock.enable(domain->shared_objects_lock());
	/* The wait objects come on first use (make_wait_objects), but a wait
	 * set nests the CQ's wait fd now. */
	if (wait_set)
		if (int ret = cq->make_wait_objects("fi_cq_open"))
			return ret;
	/* The verbs CQ and the rings come with the first endpoint (reserve),
	 * sized for it at once: a CQ no endpoint uses costs no device memory,
	 * and an endpoint's own CQ is never resized on the connect path. */
	cq->requested_size = size;
	cq->capacity = 0;
	cq->cq.fid.fclass = FI_CLASS_CQ;
	cq->cq.fid.context = context;
	cq->cq.fid.ops = &cq_fid_ops;
	cq->cq.ops = format == FI_CQ_FORMAT_CONTEXT ? &cq_ops_context
		     : format == FI_CQ_FORMAT_MSG   ? &cq_ops_msg
		     : format == FI_CQ_FORMAT_DATA  ? &cq_ops_data
						    : &cq_ops_tagged;
	if (wait_set) { /* last: the set may try the CQ at once */
		if (int ret = cq->wait_fd.join(wait_set, &cq->cq.fid))
			return ret;
	}
	domain->children.acquire();
	*out = cq.release();
	return 0;
}

CompletionQueue::~CompletionQueue()
{
	wait_fd.leave();
	/* wait_fd closes its fds, then the verbs CQs go before channel
	 * (declared after it): every channel event was acknowledged when it
	 * was read. */
}

int CompletionQueue::close()
{
	return close_bound_domain_child(this, FI_LOG_CQ, "cq");
}

int CompletionQueue::make_wait_objects(const char *call) noexcept
{
	if (!waitable)
		return -FI_EINVAL;
	return wait_objects.run([&]() noexcept {
		channel.reset(ibv_create_comp_channel(domain->context));
		if (!channel) {
			int err = errno;
			ND_WARN(FI_LOG_CQ, "%s: ibv_create_comp_channel: %s\n", call, std::strerror(err));
			return fi_error_of_errno(err);
		}
		if (int err = wait_fd.open()) {
			ND_WARN(FI_LOG_CQ, "%s: %s: %s\n", call,
				wait_fd.failed_call() == WaitFd::kEpollCtl ? "epoll_ctl" : "wait fd",
				std::strerror(err));
			channel.reset();
			return fi_error_of_errno(err);
		}
		int err = set_nonblocking(channel->fd) ? errno : wait_fd.add(channel->fd);
		if (err) {
			ND_WARN(FI_LOG_CQ, "%s: wait fd: %s\n", call, std::strerror(err));
			wait_fd.close();
			channel.reset();
			return fi_error_of_errno(err);
		}
		return 0;
	});
}

ibv_cq *CompletionQueue::create_verbs_cq(int size) noexcept
{
	return ibv_create_cq(domain->context, size, this, channel.get(), vector);
}

/* Entries a chained verbs CQ starts with at most (it doubles as endpoints
 * join and their rings grow). */
constexpr int kVerbsCqBase = 64;
/* Entries the first verbs CQ is made with at most, when more were asked:
 * room for half as many endpoints at rest (each queue's ring starts with
 * room for one request), where ofi_rxm asks for 262,144; the device may
 * round it up (Soft-RoCE to the next 2^n - 1). */
constexpr int kFirstVerbsCqMax = 8192;

int CompletionQueue::reserve(int count, int promise, ibv_cq **where)
{
	std::lock_guard<OptionalLock> guard(lock);
	const int max_cqe = domain->max_cqe;
	if (promise > max_cqe) {
		ND_WARN(FI_LOG_CQ, "CQ %p: one endpoint may have %d requests outstanding here; the device's largest CQ holds %d (make tx_attr/rx_attr->size smaller)\n",
			static_cast<void *>(this), promise, max_cqe);
		return -FI_ENOSPC;
	}
	/* A device that cannot resize CQs (soft-iWARP) is known before the
	 * first one is made, so that its CQs are made large at once. */
	resizable = resizable && domain->cqs_resize();
	/* The first verbs CQ with room, or one that can grow to make it
	 * (takes_endpoint); a new one when none takes it. */
	VerbsCqSlot *slot = nullptr;
	for (VerbsCqSlot &candidate : slots) {
		const bool fits = resizable ? takes_endpoint(candidate, count, promise, max_cqe)
					    : candidate.reserved + count <= candidate.capacity;
		if (fits) {
			slot = &candidate;
			break;
		}
	}
	int before = slot ? slot->capacity : 0;
	if (slot && slot->reserved + count > slot->capacity) {
		const int needed = slot->reserved + count;
		int grown = 0;
		int rc = double_to(*slot, needed, &grown);
		if (rc == EOPNOTSUPP || rc == ENOSYS) {
			/* soft-iWARP, for one: CQs keep their size, so more room
			 * comes as another chained CQ, as past the largest. */
			ND_INFO(FI_LOG_CQ, "CQ %p: the device cannot resize CQs; chaining instead\n",
				static_cast<void *>(this));
			resizable = false;
			slot = nullptr;
			before = 0;
		} else if (rc) {
			ND_WARN(FI_LOG_CQ, "CQ %p: ibv_resize_cq(%d) for %d outstanding requests: %s\n",
				static_cast<void *>(this), grown, needed, std::strerror(rc));
			return -FI_ENOSPC;
		}
	}
	if (!slot) {
		/* A waitable CQ's verbs CQs complete on its channel, which only
		 * exists before them. */
		if (waitable)
			if (int ret = make_wait_objects("fi_enable"))
				return ret;
		VerbsCqSlot added;
		/* The first at the size asked, up to kFirstVerbsCqMax, as the
		 * application sized it for what it expects outstanding: the
		 * endpoints that join later reserve their room in it and
		 * resize nothing until they need more than that (size once,
		 * then double). It is made here rather than at fi_cq_open, so
		 * that a CQ no endpoint uses costs no device memory. One
		 * chained past the device's largest starts small and doubles.
		 * Where CQs cannot be resized, each is made as large as asked
		 * (or as the first), so that it holds more than one endpoint. */
		const int base = !resizable     ? (slots.empty() ? requested_size : slots.front().capacity)
				 : slots.empty() ? std::min(requested_size, kFirstVerbsCqMax)
						 : std::min(requested_size, kVerbsCqBase);
		const int size = std::min(max_cqe, std::max(count, base));
		added.cq.reset(domain->make_with_room("fi_enable: ibv_create_cq", [&] { return create_verbs_cq(size); }));
		if (!added.cq) {
			int err = errno;
			ND_WARN(FI_LOG_CQ, "CQ %p: ibv_create_cq(%d) for verbs CQ %zu: %s%s\n",
				static_cast<void *>(this), size, slots.size() + 1, std::strerror(err),
				object_limit_note(err));
			return fi_error_of_errno(err, -FI_ENOSPC);
		}
		added.capacity = added.cq->cqe;
		added.floor = added.capacity;
		if (waitable) /* armed like its siblings: a waiter asleep now wakes for it */
			ibv_req_notify_cq(added.cq.get(), 0);
		if (slots.empty())
			ND_INFO(FI_LOG_CQ, "CQ %p: verbs CQ of %d entries for the first endpoint (%d asked at open)\n",
				static_cast<void *>(this), added.capacity, requested_size);
		else
			ND_INFO(FI_LOG_CQ, "CQ %p: verbs CQ %zu of %d entries chained (%d requests outstanding on the others)\n",
				static_cast<void *>(this), slots.size() + 1, added.capacity, reserved);
		try {
			slots.push_back(std::move(added));
		} catch (const std::bad_alloc &) {
			return -FI_ENOMEM;
		}
		slots_changed();
		slot = &slots.back();
	}
	const int total = capacity + slot->capacity - before;
	try {
		size_rings(total); /* nothing for an internal CQ */
	} catch (const std::bad_alloc &) {
		ND_WARN(FI_LOG_CQ, "CQ %p: out of memory for %d entries\n", static_cast<void *>(this), total);
		return -FI_ENOMEM;
	}
	capacity = total;
	slot->reserved += count;
	slot->promised += promise;
	reserved += count;
	*where = slot->cq.get();
	return 0;
}

VerbsCqSlot *CompletionQueue::slot_of(ibv_cq *where) noexcept
{
	for (VerbsCqSlot &candidate : slots)
		if (candidate.cq.get() == where)
			return &candidate;
	return nullptr;
}

int CompletionQueue::double_to(VerbsCqSlot &slot, int needed, int *grown) noexcept
{
	/* Doubling: an endpoint's queue grows in as many steps as its depth
	 * has bits, the CQ in as many as its size has. */
	*grown = std::min(std::max(needed, slot.capacity * 2), domain->max_cqe);
	const int rc = ibv_resize_cq(slot.cq.get(), *grown);
	if (rc == 0)
		slot.capacity = slot.cq->cqe;
	return rc;
}

int CompletionQueue::grow_to_reserve(VerbsCqSlot &slot, int more, uint32_t becomes) noexcept
{
	const int max_cqe = domain->max_cqe;
	const int needed = slot.reserved + more;
	if (needed > max_cqe) {
		ND_INFO(FI_LOG_CQ, "CQ %p: a queue would grow to %u requests, but its verbs CQ holds %d of the device's largest %d already\n",
			static_cast<void *>(this), becomes, slot.reserved, max_cqe);
		return -FI_EAGAIN;
	}
	const int before = slot.capacity;
	int grown = 0;
	if (needed > slot.capacity) {
		if (int rc = double_to(slot, needed, &grown)) {
			ND_WARN(FI_LOG_CQ, "CQ %p: ibv_resize_cq(%d) for a queue growing to %u requests: %s\n",
				static_cast<void *>(this), grown, becomes, std::strerror(rc));
			return -FI_EAGAIN;
		}
	}
	const int total = capacity + slot.capacity - before;
	try {
		size_rings(total);
	} catch (const std::bad_alloc &) {
		ND_WARN(FI_LOG_CQ, "CQ %p: out of memory for %d entries\n", static_cast<void *>(this), total);
		capacity = total; /* the verbs CQ did grow; the rings keep their size */
		return -FI_EAGAIN;
	}
	capacity = total;
	return 0;
}

int CompletionQueue::grow(WorkQueue &queue, ibv_cq *where, uint32_t *reserved_by_endpoint) noexcept
{
	std::lock_guard<OptionalLock> guard(lock);
	const int more = static_cast<int>(queue.growth());
	VerbsCqSlot *slot = slot_of(where);
	if (more == 0 || !slot)
		return -FI_EAGAIN;
	if (int ret = grow_to_reserve(*slot, more, queue.limit() + static_cast<uint32_t>(more)))
		return ret;
	if (!queue.grow()) {
		ND_WARN(FI_LOG_CQ, "CQ %p: out of memory for a queue's ring of %u requests\n",
			static_cast<void *>(this), queue.limit() + more);
		return -FI_EAGAIN;
	}
	slot->reserved += more;
	reserved += more;
	*reserved_by_endpoint += static_cast<uint32_t>(more);
	return more;
}

bool CompletionQueue::reserve_one(ibv_cq *where, uint32_t *reserved_by_endpoint) noexcept
{
	std::lock_guard<OptionalLock> guard(lock);
	VerbsCqSlot *slot = slot_of(where);
	if (!slot || (slot->reserved + 1 > slot->capacity && (!resizable || grow_to_reserve(*slot, 1, 1))))
		return false;
	slot->reserved++;
	reserved++;
	(*reserved_by_endpoint)++;
	return true;
}

void CompletionQueue::adopt_orphan(AnyQueue queue) noexcept
{
	std::lock_guard<OptionalLock> guard(lock);
	queue->clear_targets();
	try {
		orphans.push_back(std::move(queue));
	} catch (const std::bad_alloc &) {
		(void)queue.release(); /* leaked: a late completion stays safe */
	}
}

void CompletionQueue::shrink(VerbsCqSlot &slot) noexcept
{
	/* A verbs CQ grown for many endpoints (one CQ for thousands, as
	 * ofi_rxm binds them) gives its memory back as they close: halved
	 * once a quarter of it is reserved, so that growing again takes as
	 * many endpoints joining, down to the size it was made with. What it
	 * holds is at most what is reserved there, unless a closed
	 * endpoint's requests may still complete (orphans): then it keeps its
	 * size. */
	if (!resizable || !orphans.empty() || slot.capacity <= slot.floor ||
	    slot.reserved > slot.capacity / 4)
		return;
	const int target = std::max(slot.capacity / 2, slot.floor);
	if (int rc = ibv_resize_cq(slot.cq.get(), target)) {
		ND_INFO(FI_LOG_CQ, "CQ %p: ibv_resize_cq(%d) to shrink a verbs CQ of %d entries (%d reserved): %s; kept\n",
			static_cast<void *>(this), target, slot.capacity, slot.reserved, std::strerror(rc));
		return;
	}
	capacity -= slot.capacity - slot.cq->cqe;
	slot.capacity = slot.cq->cqe;
}

void CompletionQueue::unreserve(int count, int promise, ibv_cq *where) noexcept
{
	std::lock_guard<OptionalLock> guard(lock);
	for (size_t i = 0; i < slots.size(); i++) {
		VerbsCqSlot &slot = slots[i];
		if (slot.cq.get() != where)
			continue;
		slot.reserved -= count;
		slot.promised -= promise;
		reserved -= count;
		/* Closed endpoints' queues whose requests all completed. */
		orphans.erase(std::remove_if(orphans.begin(), orphans.end(),
					     [](const AnyQueue &q) { return q->outstanding() == 0; }),
			      orphans.end());
		if (orphans.empty())
			release_storage(orphans);
		/* A chained verbs CQ that no endpoint completes into any more
		 * goes back to the device: every endpoint reserved on it was
		 * drained and its queue pair destroyed before it unreserved,
		 * so unless a closed endpoint's queue still waits for its
		 * completions (orphans) nothing can arrive there. Its channel
		 * events were acknowledged as they were read; the kernel drops
		 * those not read. The first verbs CQ stays: the CQ's base. */
		if (i > 0 && slot.reserved == 0 && orphans.empty()) {
			ND_INFO(FI_LOG_CQ, "CQ %p: verbs CQ %zu of %d entries released (no endpoint completes there)\n",
				static_cast<void *>(this), i + 1, slot.capacity);
			capacity -= slot.capacity;
			slots.erase(slots.begin() + static_cast<std::ptrdiff_t>(i));
			slots_changed();
			if (next_slot >= slots.size())
				next_slot = 0;
			return;
		}
		shrink(slot);
		return;
	}
}

bool CompletionQueue::report_canceled(void *context, uint64_t flags)
{
	std::lock_guard<OptionalLock> guard(lock);
	if (internal)
		return true;
	CqError error{};
	error.entry.op_context = context;
	error.entry.flags = flags;
	error.entry.err = FI_ECANCELED;
	return push_error(error);
}

bool CompletionQueue::push_error(const CqError &error) noexcept
{
	assert_held(lock, "CompletionQueue::push_error");
	if (!errors.room()) {
		/* Not while completing (see size_rings): only a cancellation
		 * the application asks for with that many errors unread. */
		ND_WARN(FI_LOG_CQ, "CQ %p: %zu error entries unread; the error of request %p is not queued\n",
			static_cast<void *>(this), errors.size(), error.entry.op_context);
		return false;
	}
	errors.push_back(error);
	return true;
}

void CompletionQueue::size_rings(int total)
{
	if (internal) /* reports nothing */
		return;
	ready.reserve(static_cast<size_t>(total));
	errors.reserve(errors.size() + 2 * static_cast<size_t>(total));
}

bool CompletionQueue::Sink::has_room() const noexcept
{
	return cq_.internal || cq_.ready.room() > 0;
}

bool CompletionQueue::Sink::success(const CqEntry &entry) noexcept
{
	if (cq_.internal)
		return true;
	if (!cq_.ready.room()) {
		/* Not while completing: a read polls only while there is room. */
		ND_WARN(FI_LOG_CQ, "CQ %p: full; the completion of request %p is not queued\n",
			static_cast<void *>(&cq_), entry.op_context);
		return false;
	}
	cq_.ready.push_back(entry);
	queued_ = true;
	return true;
}

bool CompletionQueue::Sink::error(const fi_cq_err_entry &entry) noexcept
{
	if (cq_.internal)
		return true;
	CqError error;
	error.entry = entry;
	if (!cq_.push_error(error))
		return false;
	queued_ = true;
	return true;
}

ssize_t CompletionQueue::complete_now_with(ssize_t (*fn)(void *arg, CompletionSink &sink) noexcept, void *arg)
{
	std::lock_guard<OptionalLock> guard(lock);
	Sink sink(*this);
	const ssize_t ret = fn(arg, sink);
	if (sink.queued() && waitable)
		signal(); /* wake an fi_cq_sread */
	return ret;
}

/* ---- completions ---- */

bool CompletionQueue::complete(ibv_wc &wc, CqEntry *out) noexcept
{
	assert_held(lock, "CompletionQueue::complete");
	WorkQueue *queue = record_of(wc.wr_id)->owner;
	Sink sink(*this);
	Placement placement;
	placement.sink = &sink;
	const Retired done = WorkQueue::retire(wc, &placement);
	if (placement.nd_buffer)
		return false; /* what it delivered is in the rings */
	if (wc.status != IBV_WC_SUCCESS) {
		/* A flushed request the application asked no completion for
		 * stays silent; a real failure of the application's is always
		 * reported. nd's own requests (a receive-credit write, a data
		 * slot write, the drain marker: no CQ flags) are not the
		 * application's, and their failure is the link's, which its
		 * own requests and the EQ report: an entry for one would carry
		 * no context, which ofi_rxm takes for its own buffer and
		 * follows (a peer that closes while a credit write is on the
		 * wire fails it with a local QP error on soft-iWARP). */
		const bool flushed = wc.status == IBV_WC_WR_FLUSH_ERR;
		if (internal || (!done.report && (flushed || done.flags == 0)))
			return false;
		CqError error{};
		error.entry.op_context = done.context;
		error.entry.flags = done.flags;
		error.entry.len = 0;
		error.entry.err = fi_error_of_wc_status(wc.status);
		/* The first request flushed because nothing moved (StallWatch)
		 * says why, as exhausted transport retries would. */
		if (flushed && queue->take_stalled())
			error.entry.err = FI_ETIMEDOUT;
		error.entry.prov_errno = wc.status;
		push_error(error);
		return false;
	}
	if (internal || !done.report)
		return false;
	success_entry(wc, done, placement.buf, out);
	return true;
}

bool CompletionQueue::progress_locked()
{
	assert_held(lock, "CompletionQueue::progress_locked");
	ibv_wc wc[kPollBatch];
	for (VerbsCqSlot &slot : slots) {
		for (;;) {
			/* The software queue holds at most what the CQ was sized
			 * for; the rest waits in the verbs CQs for the
			 * application to read. */
			const size_t room = ready.size() < static_cast<size_t>(capacity)
						    ? static_cast<size_t>(capacity) - ready.size()
						    : 0;
			if (!internal && room == 0)
				return false;
			const int want = internal ? kPollBatch
						  : static_cast<int>(std::min<size_t>(room, kPollBatch));
			int n = poll_cq(slot.cq.get(), want, wc);
			if (n <= 0)
				break;
			for (int i = 0; i < n; i++) {
				CqEntry entry;
				/* A send ring's unsignaled run retires here (Endpoint::free_send_slots)
				 * every half ring: the common case inline, as reads
				 * take it (complete_into). */
				if (__builtin_expect(wc[i].status == IBV_WC_SUCCESS &&
							     !WorkQueue::placed_message(wc[i]),
						     1)) {
					const Retired done = WorkQueue::retire(wc[i]);
					if (!done.report || internal)
						continue;
					success_entry(wc[i], done, nullptr, &entry);
					ready.push_back(entry);
				} else if (complete(wc[i], &entry)) {
					ready.push_back(entry);
				}
			}
			if (n < want)
				break;
		}
	}
	return true;
}

int CompletionQueue::progress()
{
	std::lock_guard<OptionalLock> guard(lock);
	size_t before = ready.size() + errors.size();
	progress_locked();
	return static_cast<int>(ready.size() + errors.size() - before);
}

bool CompletionQueue::pending()
{
	std::lock_guard<OptionalLock> guard(lock);
	progress_locked();
	return !ready.empty() || !errors.empty();
}

bool CompletionQueue::drain(const WorkQueue &queue, int timeout_ms)
{
	const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
	for (;;) {
		progress();
		if (queue.outstanding() == 0)
			return true;
		if (std::chrono::steady_clock::now() >= deadline)
			return false;
		std::this_thread::sleep_for(std::chrono::microseconds(200));
	}
}

bool CompletionQueue::retire_after_synchronous_flush(SendQueue &queue)
{
	std::lock_guard<OptionalLock> guard(lock);
	if (!progress_locked())
		return false;
	return queue.outstanding() == 0 || queue.retire_completed_unsignaled();
}

/* Nothing to return: says whether errors wait, and lets the stall watch
 * look now and then (a busy poller pays a clock read every
 * kEmptyReadsPerLook). Under the lock; inline, since most reads end here,
 * on CQs the stall watch watches too. */
inline ssize_t CompletionQueue::nothing_read() noexcept
{
	if (__builtin_expect(stall_watch.count.load(std::memory_order_relaxed) != 0, 0) &&
	    __builtin_expect(++stall_watch.empty_reads >= StallWatch::kEmptyReadsPerLook, 0)) {
		stall_watch.empty_reads = 0;
		look_for_stalls();
	}
	return errors.empty() ? -FI_EAGAIN : -FI_EAVAIL;
}

/*
 * The read every progress loop makes, most often on a CQ with nothing in
 * it: with one verbs CQ and nothing found before, it polls that verbs CQ
 * itself, and an empty poll returns from here. One success found is
 * reported from here too (complete_polled, inline: the frame already
 * saves every register the empty poll needs, so it costs the empty read
 * nothing, and a call of its own cost a hit 25 instructions of argument
 * moves, saves and restores). More found, and chained verbs CQs or
 * entries found before, take the out-of-line paths.
 */
template <fi_cq_format Format>
ssize_t CompletionQueue::read(void *buf, size_t count)
{
	if (__builtin_expect(!buf, 0) && count) {
		ND_WARN(FI_LOG_CQ, "fi_cq_read: buf is NULL\n");
		return -FI_EINVAL;
	}
	std::lock_guard<OptionalLock> guard(lock);
	ibv_cq *const verbs = only_cq;
	if (__builtin_expect(!verbs || !ready.empty() || count == 0, 0))
		return read_found<Format>(buf, count);
	ibv_wc wc[kPollBatch];
	const int want = count < kPollBatch ? static_cast<int>(count) : kPollBatch;
	const int got = poll_cq(verbs, want, wc);
	if (__builtin_expect(got > 0, 0))
		return complete_polled<Format>(verbs, wc, got, want, buf, count);
	return nothing_read();
}

/* The fast path's poll found `got` of the `want` it asked: they are
 * completed into buf, and polling goes on while the buffer has room. They
 * may all have been errors, or completions that report nothing. */
template <fi_cq_format Format>
inline ssize_t CompletionQueue::complete_polled(ibv_cq *verbs, ibv_wc *wc, int got, int want, void *buf,
					 size_t count)
{
	/* A progress loop's read most often finds one completion, a success:
	 * reported from here, with no loop and no path for the rest live.
	 * One found is all there was, or the buffer holds one: when it is
	 * reported, no more polling either way. */
	if (got == 1 && __builtin_expect(wc->status == IBV_WC_SUCCESS, 1) &&
	    !WorkQueue::placed_message(*wc)) {
		const Retired done = WorkQueue::retire(*wc);
		if (done.report && !internal) {
			if constexpr (Format == FI_CQ_FORMAT_CONTEXT) {
				static_cast<fi_cq_entry *>(buf)->op_context = done.context;
			} else {
				CqEntry entry;
				success_entry(*wc, done, nullptr, &entry);
				store<Format>(buf, 0, entry);
			}
			return 1;
		}
		if (got < want)
			return nothing_read();
		/* It reported nothing and the buffer still has room: more
		 * may wait in the verbs CQ. */
		const size_t n = poll_into<Format>(verbs, buf, 0, count);
		return n ? static_cast<ssize_t>(n) : nothing_read();
	}
	return complete_many<Format>(verbs, wc, got, want, buf, count);
}

/* complete_polled's general case. */
template <fi_cq_format Format>
ssize_t CompletionQueue::complete_many(ibv_cq *verbs, ibv_wc *wc, int got, int want, void *buf,
				       size_t count)
{
	size_t n = complete_into<Format>(wc, got, buf, 0, count);
	if (got == want && n < count)
		n = poll_into<Format>(verbs, buf, n, count);
	return n ? static_cast<ssize_t>(n) : nothing_read();
}

/* Entries found before (by progress, or a framed endpoint's), chained
 * verbs CQs, or none made yet. Under the lock. */
template <fi_cq_format Format>
ssize_t CompletionQueue::read_found(void *buf, size_t count)
{
	assert_held(lock, "CompletionQueue::read_found");
	size_t n = 0;
	while (n < count && !ready.empty()) {
		store<Format>(buf, n++, ready.front());
		ready.pop_front();
	}
	if (slots.size() == 1) {
		n = poll_into<Format>(slots.front().cq.get(), buf, n, count);
	} else if (!slots.empty()) {
		/* Chained verbs CQs, in turn from where the last read stopped:
		 * a busy one does not starve the others. */
		const size_t first = next_slot < slots.size() ? next_slot : 0;
		for (size_t i = 0; i < slots.size() && n < count; i++)
			n = poll_into<Format>(slots[(first + i) % slots.size()].cq.get(), buf, n, count);
		next_slot = first + 1 < slots.size() ? first + 1 : 0;
	}
	if (n)
		return static_cast<ssize_t>(n);
	return nothing_read();
}

void CompletionQueue::watch_stalls(SendQueue *queue, int timeout_s)
{
	std::lock_guard<OptionalLock> guard(lock);
	stall_watch.queues.push_back({queue, queue->retired(),
				      std::chrono::steady_clock::now(), timeout_s, false});
	stall_watch.count.store(stall_watch.queues.size(), std::memory_order_relaxed);
}

void CompletionQueue::unwatch_stalls(const SendQueue *queue) noexcept
{
	std::lock_guard<OptionalLock> guard(lock);
	auto &queues = stall_watch.queues;
	queues.erase(std::remove_if(queues.begin(), queues.end(),
				    [&](const StallWatch::Entry &e) { return e.queue == queue; }),
		     queues.end());
	if (queues.empty())
		release_storage(queues);
	stall_watch.count.store(queues.size(), std::memory_order_relaxed);
}

/* Bytes of the requests between tail and head (what may still be moving:
 * a long transfer completes nothing until its end). */
static uint64_t outstanding_bytes(WorkQueue &queue, uint64_t tail, uint64_t head) noexcept
{
	uint64_t bytes = 0;
	for (uint64_t i = tail; i != head; i++)
		bytes += queue.record_at(i).len;
	return bytes;
}

void CompletionQueue::look_for_stalls() noexcept
{
	assert_held(lock, "CompletionQueue::look_for_stalls");
	StallWatch &w = stall_watch;
	const auto now = std::chrono::steady_clock::now();
	if (now - w.last_look < std::chrono::seconds(1))
		return;
	w.last_look = now;
	/* Read once a look, and only for a queue near its timeout. */
	enum class Naks { unread, coming, none } naks = Naks::unread;
	for (StallWatch::Entry &e : w.queues) {
		SendQueue &q = *e.queue;
		/* What waits for no completion (QueueHooks::look). */
		q.tell_look();
		if (e.timeout_s == 0)
			continue; /* FI_ND_PEER_TIMEOUT=0: watched for that alone */
		const uint64_t tail = q.retired();
		const uint64_t head = q.posted_acquire();
		/* Loaded after head, it may belong to a request claimed since. */
		const uint64_t signaled = std::min(q.last_signaled_end(), head);
		if (tail != e.tail || signaled <= tail) {
			/* Moved, or nothing outstanding will complete by itself
			 * (unsignaled requests wait for a later signaled one). */
			e.tail = tail;
			e.since = now;
			e.told = false;
			continue;
		}
		if (e.told)
			continue;
		const auto still = now - e.since;
		const uint64_t bytes = outstanding_bytes(q, tail, head);
		/* The count is read from kNakQuiet before the timeout on, so
		 * that at the timeout it tells whether NAKs came since. */
		if (!StallWatch::lost(still + StallWatch::kNakQuiet, e.timeout_s, bytes, false))
			continue;
		if (naks == Naks::unread) {
			uint64_t reading = 0;
			naks = !domain->not_ready_naks_path.empty() &&
					       read_sysfs_counter(domain->not_ready_naks_path, &reading) &&
					       w.naks.coming(reading, now)
				       ? Naks::coming
				       : Naks::none;
		}
		if (!StallWatch::lost(still, e.timeout_s, bytes, naks == Naks::coming))
			continue;
		e.told = true;
		const auto still_s = std::chrono::duration_cast<std::chrono::seconds>(still).count();
		ND_WARN(FI_LOG_CQ, "CQ %p: %llu request(s) of endpoint %p, %llu bytes, made no progress for %lld s "
			"(FI_ND_PEER_TIMEOUT %d; %s): the peer is taken as lost\n", static_cast<void *>(this),
			static_cast<unsigned long long>(head - tail), q.owner(), static_cast<unsigned long long>(bytes),
			static_cast<long long>(still_s), e.timeout_s,
			naks == Naks::coming ? "not-ready NAKs still coming, past 30 times the timeout"
			: domain->not_ready_naks_path.empty() ? "the device counts no not-ready NAKs"
							      : "no not-ready NAK for 2 s");
		/* Everything outstanding is flushed now, whether or not the
		 * application reads its EQ; the EQ then ends the connection. */
		q.end_stalled();
	}
}

template <fi_cq_format Format>
size_t CompletionQueue::poll_into(ibv_cq *verbs, void *buf, size_t n, size_t count)
{
	ibv_wc wc[kPollBatch];
	while (n < count) {
		const int want = static_cast<int>(std::min<size_t>(count - n, kPollBatch));
		const int got = poll_cq(verbs, want, wc);
		if (got > 0)
			n = complete_into<Format>(wc, got, buf, n, count);
		if (got < want)
			break;
	}
	return n;
}

/* The work completions of one poll, into buf from index n (there is room
 * for each: one completion makes at most one entry). */
template <fi_cq_format Format>
inline size_t CompletionQueue::complete_into(ibv_wc *wc, int got, void *buf, size_t n, size_t count)
{
	for (int i = 0; i < got; i++) {
		/* The common case inline: a success (retire() inlines its own
		 * common case); complete() takes everything else, multi-receive
		 * messages included. */
		if (__builtin_expect(wc[i].status == IBV_WC_SUCCESS && !WorkQueue::placed_message(wc[i]), 1)) {
			const Retired done = WorkQueue::retire(wc[i]);
			if (!done.report || internal)
				continue;
			if constexpr (Format == FI_CQ_FORMAT_CONTEXT) {
				static_cast<fi_cq_entry *>(buf)[n++].op_context = done.context;
			} else {
				CqEntry entry;
				success_entry(wc[i], done, nullptr, &entry);
				store<Format>(buf, n++, entry);
			}
			continue;
		}
		CqEntry entry;
		if (complete(wc[i], &entry)) {
			store<Format>(buf, n++, entry);
		} else {
			/* A framed endpoint's delivery, queued by the sink (at
			 * most one per completion, in order). */
			while (n < count && !ready.empty()) {
				store<Format>(buf, n++, ready.front());
				ready.pop_front();
			}
		}
	}
	return n;
}

template ssize_t CompletionQueue::read<FI_CQ_FORMAT_CONTEXT>(void *, size_t);
template ssize_t CompletionQueue::read<FI_CQ_FORMAT_MSG>(void *, size_t);
template ssize_t CompletionQueue::read<FI_CQ_FORMAT_DATA>(void *, size_t);
template ssize_t CompletionQueue::read<FI_CQ_FORMAT_TAGGED>(void *, size_t);

ssize_t CompletionQueue::read_any(void *buf, size_t count)
{
	switch (format) {
	case FI_CQ_FORMAT_MSG: return read<FI_CQ_FORMAT_MSG>(buf, count);
	case FI_CQ_FORMAT_DATA: return read<FI_CQ_FORMAT_DATA>(buf, count);
	case FI_CQ_FORMAT_TAGGED: return read<FI_CQ_FORMAT_TAGGED>(buf, count);
	default: return read<FI_CQ_FORMAT_CONTEXT>(buf, count);
	}
}

ssize_t CompletionQueue::readerr(fi_cq_err_entry *buf, uint64_t flags)
{
	if (!buf) {
		ND_WARN(FI_LOG_CQ, "fi_cq_readerr: buf is NULL\n");
		return -FI_EINVAL;
	}
	std::lock_guard<OptionalLock> guard(lock);
	if (errors.empty()) {
		progress_locked();
		if (errors.empty())
			return -FI_EAGAIN;
	}
	fi_cq_err_entry entry = errors.front().entry;
	if (!(flags & FI_PEEK))
		errors.pop_front();
	/* Before API 1.5 the structure ended at err_data; no error data is
	 * carried, so a caller's own err_data buffer is left untouched. */
	if (FI_VERSION_LT(domain->api_version, FI_VERSION(1, 5))) {
		std::memcpy(buf, &entry, offsetof(fi_cq_err_entry, err_data_size));
		buf->err_data = nullptr;
	} else {
		entry.err_data = buf->err_data_size ? buf->err_data : nullptr;
		entry.err_data_size = 0;
		*buf = entry;
	}
	return 1;
}

/* ---- waiting ---- */

namespace {

/* Acknowledges every event the completion channel holds. */
void drain_channel(ibv_comp_channel *channel)
{
	ibv_cq *cq;
	void *context;
	while (ibv_get_cq_event(channel, &cq, &context) == 0)
		ibv_ack_cq_events(cq, 1);
}

} // namespace

ssize_t CompletionQueue::sread(void *buf, size_t count, const void *, int timeout, bool with_src,
			       fi_addr_t *src_addr)
{
	if (!waitable) {
		ND_WARN(FI_LOG_CQ, "fi_cq_sread: the CQ was opened with FI_WAIT_NONE\n");
		return -FI_EINVAL;
	}
	if (int ret = make_wait_objects("fi_cq_sread"))
		return ret;
	const auto start = std::chrono::steady_clock::now();
	auto read_now = [&] {
		ssize_t n = read_any(buf, count);
		if (n > 0 && with_src && src_addr)
			std::fill(src_addr, src_addr + n, FI_ADDR_NOTAVAIL);
		return n;
	};
	for (;;) {
		ssize_t n = read_now();
		if (n != -FI_EAGAIN)
			return n;
		/* Arm, then look again: a completion that arrived before the
		 * arm would otherwise raise no event. */
		int rc;
		{
			std::lock_guard<OptionalLock> guard(lock);
			rc = arm_all();
		}
		if (rc)
			return fi_error_of_errno(rc);
		n = read_now();
		if (n != -FI_EAGAIN)
			return n;
		int wait_ms = -1;
		if (timeout >= 0) {
			auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
					     std::chrono::steady_clock::now() - start).count();
			if (spent >= timeout)
				return -FI_EAGAIN;
			wait_ms = static_cast<int>(timeout - spent);
		}
		/* A watched queue (StallWatch) is looked at by empty reads:
		 * a waiter wakes each second to read. */
		if (stall_watch.count.load(std::memory_order_relaxed) && (wait_ms < 0 || wait_ms > 1000))
			wait_ms = 1000;
		int ready_fds = wait_fd.wait(wait_ms);
		if (ready_fds < 0 && errno != EINTR)
			return fi_error_of_errno(errno);
		if (ready_fds == 0 && stall_watch.count.load(std::memory_order_relaxed)) {
			/* A waiter's two reads a second would take a minute to
			 * reach kEmptyReadsPerLook: it looks itself. */
			std::lock_guard<OptionalLock> guard(lock);
			look_for_stalls();
		}
		drain_channel(channel.get());
		if (wait_fd.drain())
			return -FI_EAGAIN; /* fi_cq_signal: wake the waiter */
	}
}

int CompletionQueue::arm_all() noexcept
{
	for (VerbsCqSlot &slot : slots)
		if (int rc = ibv_req_notify_cq(slot.cq.get(), 0))
			return rc;
	return 0;
}

int CompletionQueue::signal()
{
	if (!waitable) {
		ND_WARN(FI_LOG_CQ, "fi_cq_signal: the CQ was opened with FI_WAIT_NONE\n");
		return -FI_EINVAL;
	}
	if (int ret = make_wait_objects("fi_cq_signal"))
		return ret;
	return wait_fd.signal();
}

int CompletionQueue::control(int command, void *arg)
{
	if (waitable && command == FI_GETWAIT)
		if (int ret = make_wait_objects("fi_control(FI_GETWAIT)"))
			return ret;
	return control_wait(FI_LOG_CQ, "cq", command, arg, waitable ? wait_fd.fd() : -1,
			    waitable ? FI_WAIT_FD : FI_WAIT_NONE);
}

int CompletionQueue::trywait()
{
	if (!waitable) {
		ND_WARN(FI_LOG_CQ, "fi_trywait: the CQ was opened with FI_WAIT_NONE\n");
		return -FI_EINVAL;
	}
	if (int ret = make_wait_objects("fi_trywait"))
		return ret;
	std::lock_guard<OptionalLock> guard(lock);
	progress_locked();
	if (!ready.empty() || !errors.empty())
		return -FI_EAGAIN;
	drain_channel(channel.get());
	wait_fd.drain();
	if (int rc = arm_all())
		return fi_error_of_errno(rc);
	progress_locked();
	return ready.empty() && errors.empty() ? 0 : -FI_EAGAIN;
}

int cq_progress(CompletionQueue &cq)
{
	return cq.progress();
}

int cq_channel_fd(CompletionQueue &cq) noexcept
{
	return cq.waitable && cq.make_wait_objects("fi_enable(counter)") == 0 ? cq.channel->fd : -1;
}

int cq_arm(CompletionQueue &cq) noexcept
{
	if (!cq.waitable)
		return -FI_EINVAL;
	if (int ret = cq.make_wait_objects("fi_cntr_wait"))
		return ret;
	drain_channel(cq.channel.get());
	std::lock_guard<OptionalLock> guard(cq.lock);
	int rc = cq.arm_all();
	return rc ? fi_error_of_errno(rc) : 0;
}

int cq_trywait(fid *cq) noexcept
{
	return guarded("fi_trywait", [&] { return from_fid<CompletionQueue>(cq)->trywait(); });
}

int cq_open(fid_domain *fdomain, fi_cq_attr *attr, fid_cq **out, void *context) noexcept
{
	return guarded("fi_cq_open", [&] {
		if (!fdomain || !attr || !out) {
			ND_WARN(FI_LOG_CQ, "fi_cq_open: domain, attr and cq must not be NULL\n");
			return -FI_EINVAL;
		}
		CompletionQueue *cq = nullptr;
		int ret = CompletionQueue::open(from_fid<Domain>(fdomain), attr, context, false, &cq);
		if (ret)
			return ret;
		*out = &cq->fid();
		return 0;
	});
}

} // namespace nd
