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
 * completion; a message that matches nothing is copied aside (so that its
 * buffer goes straight back to the adapter) and waits for fi_trecv/fi_recv,
 * which then completes at once. This is the eager protocol of libfabric's
 * rxm and of every MPI, on one connection; both sides of a connection must
 * be framed (fi_nd(7)).
 *
 * A framed message is at most the endpoint's max_msg_size, which getinfo
 * sets to FI_ND_TAGGED_MSG_SIZE (a bounce buffer's payload); RDMA is not
 * framed. A receive whose buffer is too short completes in error with
 * FI_ETRUNC and the bytes that fit, as the man page of fi_msg says.
 *
 * Locking: a message is handled by the CQ read that finds its completion,
 * under the CQ's lock; the application posts and cancels under the same
 * CQ lock, then `lock`, in that order (the CQ needs its lock to queue the
 * completion of a receive that matches at once).
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
	 * `max_payload` bytes on `pd`; throws std::bad_alloc, returns an
	 * errno in *err (and nullptr) when the registration fails. */
	static std::unique_ptr<Framing> make(ibv_pd *pd, uint32_t count, size_t max_payload, int *err);

	uint32_t count;			/* bounce buffers */
	size_t slot_size;		/* header + max_payload */
	std::unique_ptr<uint8_t[]> slab;
	UniqueMr mr;
	/* Set once the queue pair exists; cleared when the endpoint closes,
	 * so that late completions repost nothing. */
	std::atomic<ibv_qp *> qp{nullptr};
	WorkQueue *queue = nullptr;	/* the receive queue that owns this */
	CounterCells recv_counter;	/* counts each receive completed */
	/* Told after a buffer is reposted (receive credits, nd_credits.h). */
	void (*reposted)(void *owner) noexcept = nullptr;
	/* Told when a message arrives without nd's frame (a peer that is not
	 * framed, or lies): the connection is ended, nothing delivered. */
	void (*unframed)(void *owner) noexcept = nullptr;
	void *owner = nullptr;
	uint32_t posted_limit;		/* application receives waiting at most */

	std::mutex lock;
	std::deque<FramedRecv> posted;	/* in posting order */
	struct Unexpected {
		frame::Header header;
		std::vector<uint8_t> payload;
	};
	std::deque<Unexpected> unexpected;	/* in arrival order */

	uint8_t *slot(uint32_t index) noexcept { return slab.get() + size_t{index} * slot_size; }

	/* Fills the ring slot and work request that post bounce buffer
	 * `bounce` (its address). */
	void fill_bounce(OpRecord &record, uint8_t *bounce, ibv_recv_wr &wr, ibv_sge &sge) noexcept;

	/* A work completion of the receive queue, under `cq`'s lock: retires
	 * the bounce buffer's slot, matches the message, reposts the buffer.
	 * True when *out is a success entry to report. */
	bool on_completion(const ibv_wc &wc, CqEntry *out, CompletionQueue &cq) noexcept override;

	/* fi_recv/fi_trecv: completes at once against an unexpected message,
	 * or waits. -FI_EAGAIN when `posted_limit` receives wait already or
	 * the CQ has no room for the completion. Takes the CQ's lock. */
	ssize_t post(const FramedRecv &recv, CompletionQueue &cq);
	/* fi_cancel: a waiting receive completes with FI_ECANCELED. */
	ssize_t cancel(void *context, CompletionQueue &cq);
	/* The endpoint closes: every waiting receive completes with
	 * FI_ECANCELED; unexpected messages are dropped. */
	void cancel_all(CompletionQueue &cq) noexcept;

private:
	/* The connection is over (a receive of nd's was flushed or failed):
	 * every waiting receive completes with FI_ECANCELED, as one in the
	 * adapter would. Under the CQ's lock (a completion being read). */
	void cancel_posted(CompletionQueue &cq) noexcept;
	/* Copies a message into a receive and builds its completion; false
	 * when it is an error entry (truncated), queued on `cq`. Under the
	 * CQ's lock. */
	bool deliver(const FramedRecv &recv, const frame::Header &header, const uint8_t *payload,
		     size_t length, CqEntry *out, CompletionQueue &cq) noexcept;
	void repost(uint8_t *bounce) noexcept;
};

} // namespace nd

#endif /* ND_FRAMING_H */
