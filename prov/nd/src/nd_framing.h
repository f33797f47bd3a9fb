/*
 * nd_framing.h: tagged messages (FI_TAGGED) on an FI_EP_MSG endpoint.
 *
 * An RC queue pair places each message into the next receive posted, in
 * order; tagged messaging matches a message to the first posted receive
 * whose tag fits, in any order, and keeps a message that matches none (an
 * "unexpected" message) until one is posted. The adapter cannot do that,
 * so an endpoint opened with FI_TAGGED is "framed": nd owns its receive
 * queue, keeps it filled with buffers of its own (bounce buffers), and
 * every message (fi_send and fi_tsend alike) goes out behind a small header
 * that says its kind, tag and remote CQ data. When a message lands, nd
 * matches it against the receives the application posted, in posting
 * order, copies it into the first that fits and reports that receive's
 * completion; a message that matches nothing waits for fi_trecv/fi_recv,
 * which then completes at once (UnexpectedMessages below). This is the eager protocol of libfabric's
 * rxm and of every MPI, on one connection; both sides of a connection must
 * be framed (fi_nd(7)).
 *
 * A framed message is at most the endpoint's max_msg_size, which getinfo
 * sets to FI_ND_TAGGED_MSG_SIZE (a bounce buffer's payload); RDMA is not
 * framed. A receive whose buffer is too short completes in error with
 * FI_ETRUNC and the bytes that fit, as the man page of fi_msg says.
 *
 * Completing allocates nothing: a message's completion goes through
 * WorkQueue::retire like every other, which hands it here (PlacedReceiver)
 * with the CQ's sink for what it delivers.
 *
 * Locking: a message is handled by the CQ read that finds its completion,
 * under the CQ's lock; the application posts under the same CQ lock
 * (CompletionQueue::complete_now), then `lock`, in that order: a receive
 * that matches at once queues its completion and reposts the buffer, as a
 * completion does.
 */
#ifndef ND_FRAMING_H
#define ND_FRAMING_H

#include "nd.h"
#include "nd_cq.h"
#include "nd_mr.h"
#include "nd_wq.h"

#include <infiniband/verbs.h>
#include <rdma/fi_tagged.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

namespace nd {
namespace frame {

enum class Kind : uint8_t { message = 1, tagged = 2 };

constexpr uint16_t kMagic = 0x4e44;	/* "ND" */
constexpr uint8_t kHasData = 1;

/* What precedes every message of a framed endpoint, little-endian on the
 * wire. */
struct Header {
	uint16_t magic;
	uint8_t kind;
	uint8_t flags;
	uint32_t reserved;
	uint64_t tag;
	uint64_t data;
};
static_assert(sizeof(Header) == kFrameHeaderSize, "the header is part of the wire format");

Header make_header(Kind kind, uint64_t tag, bool has_data, uint64_t data) noexcept;
/* Checks and decodes a received header; false for bytes no framed peer
 * sends (a peer that is not framed, or fewer bytes than a header). */
bool read_header(const void *bytes, size_t length, Header *out) noexcept;

/* Whether a message of `kind` with `tag` matches a receive. */
inline bool matches(bool receive_tagged, uint64_t want, uint64_t ignore, Kind kind, uint64_t tag) noexcept
{
	if (receive_tagged != (kind == Kind::tagged))
		return false;
	return !receive_tagged || ((want ^ tag) & ~ignore) == 0;
}

/* Copies `length` bytes into a scatter list; returns the bytes copied. */
size_t scatter(const iovec *iov, size_t count, const uint8_t *from, size_t length) noexcept;

} // namespace frame

/*
 * Messages that matched no receive yet, in arrival order, in storage made
 * at fi_enable, so that completing never allocates: each is copied into an
 * arena while it has room (and its buffer goes straight back to the
 * adapter), else it stays in its buffer, out of the adapter until a
 * receive takes it (a sender that then finds no buffer waits for the
 * receiver-not-ready retry, or for receive credits on iWARP, as any RC
 * sender does). One entry per copy allowed plus one per buffer: keep()
 * never fails. The arena is a ring: a copy goes after the newest, and its
 * bytes come back when every older copy is taken.
 */
class UnexpectedMessages {
public:
	struct Message {
		frame::Header header;
		const uint8_t *payload;
		uint32_t length;
		uint8_t *buffer;	/* nd's buffer that still holds it; null: copied */
		size_t arena_at;	/* copied: where in the arena */
	};
	static constexpr uint32_t kMaxCopies = 1024;

	/* Throws std::bad_alloc; the memory is touched only as it is used. */
	void make(size_t arena_bytes, uint32_t buffers);
	/* Keeps a message that is in `buffer`; true when it was copied (the
	 * buffer may go back to the adapter). */
	bool keep(const frame::Header &header, uint8_t *buffer, const uint8_t *payload, uint32_t length) noexcept;
	uint32_t size() const noexcept { return count_; }
	const Message &operator[](uint32_t i) const noexcept { return messages_[i]; }
	/* Removes message i (after its bytes were copied out). */
	void take(uint32_t i) noexcept;
	void clear() noexcept;

private:
	uint8_t *reserve_arena(size_t length, size_t *at) noexcept;

	std::unique_ptr<uint8_t[]> arena_;
	size_t arena_size_ = 0;
	size_t arena_begin_ = 0;	/* the oldest copy's bytes */
	size_t arena_end_ = 0;		/* where the next copy goes */
	std::unique_ptr<Message[]> messages_;
	uint32_t capacity_ = 0;
	uint32_t count_ = 0;
	uint32_t copies_ = 0;
};

/* A receive the application posted on a framed endpoint. */
struct FramedRecv {
	void *context;
	iovec iov[kMaxSge];
	size_t count;
	uint64_t capacity;	/* bytes the iovs hold */
	bool tagged;
	uint64_t tag;
	uint64_t ignore;
	bool report;		/* a CQ entry is wanted */
};

struct Framing final : PlacedReceiver {
	/* Allocates and registers `count` bounce buffers of a header plus
	 * `max_payload` bytes on `pd` (no registration without a pd: the
	 * unit tests'); throws std::bad_alloc, returns an errno in *err (and
	 * nullptr) when the registration fails. */
	static std::unique_ptr<Framing> make(ibv_pd *pd, uint32_t count, size_t max_payload, int *err);

	uint32_t count;			/* bounce buffers */
	size_t slot_size;		/* header + max_payload */
	std::unique_ptr<uint8_t[]> slab;
	UniqueMr mr;
	/* Set once the queue pair exists; cleared when the endpoint closes,
	 * so that late completions repost nothing. */
	std::atomic<ibv_qp *> qp{nullptr};
	ReceiveQueue *queue = nullptr;	/* the receive queue that owns this */
	CounterCells recv_counter;	/* counts each receive completed */
	/* Told after a buffer is reposted (receive credits, nd_credits.h). */
	void (*reposted)(void *owner) noexcept = nullptr;
	/* Told when a message arrives without nd's frame (a peer that is not
	 * framed, or lies): the connection is ended, nothing delivered. */
	void (*unframed)(void *owner) noexcept = nullptr;
	void *owner = nullptr;
	uint32_t posted_limit;		/* application receives waiting at most */

	Mutex lock{LockRank::framing};
	std::deque<FramedRecv> posted;	/* in posting order */
	UnexpectedMessages unexpected;	/* under lock */

	uint8_t *slot(uint32_t index) noexcept { return slab.get() + size_t{index} * slot_size; }

	/* Claims a slot of receive queue `in` for bounce buffer `bounce`
	 * (its address) and fills the work request that posts it; the
	 * caller unclaims it (ReceiveQueue::unclaim_recv) if posting fails. */
	OpRecord &claim_bounce(ReceiveQueue &in, uint8_t *bounce, ibv_recv_wr &wr, ibv_sge &sge) noexcept;

	/* A message landed in `buffer` (its slot retired by WorkQueue::
	 * retire), under the CQ's lock: delivered to the first receive it
	 * matches and the buffer reposted, or kept. False for bytes without
	 * nd's frame: the connection ends. */
	bool on_message(const ibv_wc &wc, uint8_t *buffer, CompletionSink &sink) noexcept override;
	/* A buffer was flushed or failed: the connection is over, and every
	 * waiting receive completes with FI_ECANCELED, as one in the adapter
	 * would. Under the CQ's lock. */
	void on_end(CompletionSink &sink) noexcept override;

	/* fi_recv/fi_trecv: completes at once against an unexpected message,
	 * or waits. -FI_EAGAIN when `posted_limit` receives wait already or
	 * the CQ has no room for the completion. */
	ssize_t post(const FramedRecv &recv, CompletionQueue &cq);
	/* fi_cancel: a waiting receive completes with FI_ECANCELED. */
	ssize_t cancel(void *context, CompletionQueue &cq);
	/* The endpoint closes: every waiting receive completes with
	 * FI_ECANCELED; unexpected messages are dropped. */
	void cancel_all(CompletionQueue &cq) noexcept;

private:
	/* Copies a message into a receive and queues its completion (an
	 * error entry when truncated). Under the CQ's lock. */
	void deliver(const FramedRecv &recv, const frame::Header &header, const uint8_t *payload,
		     size_t length, CompletionSink &sink) noexcept;
	/* Gives a buffer back to the adapter. Under the CQ's lock. */
	void repost(uint8_t *bounce) noexcept;
};

/* A receive queue's framing, where it has one (WorkQueue::framing): a
 * framed endpoint's is always a Framing. */
inline Framing *framing_of(const ReceiveQueue &queue) noexcept
{
	return static_cast<Framing *>(queue.framing());
}

} // namespace nd

#endif /* ND_FRAMING_H */
