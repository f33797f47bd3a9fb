/* Unit tests: completing allocates nothing. The CQ's completion path
 * (CompletionQueue::complete -> WorkQueue::retire -> multi-receive buffers
 * and framed endpoints' matching) is fed recorded work completions on the
 * host, with every operator new of the process counted while it runs:
 * successes, failures, flushes, counters, a multi-receive buffer, and a
 * framed endpoint's matched, unexpected, truncated, unframed and flushed
 * messages. The rings it fills were sized before; so were the framing's.
 * And the ring itself (CompletionRing, nd_cq.h): its order across wrap and
 * growth, and the memory it touches. */
#include <criterion/criterion.h>

#include "nd_cq.h"
#include "nd_device.h"
#include "nd_framing.h"
#include "nd_multi_recv.h"
#include "nd_wq.h"
#include "wq_fixture.h"

#include <rdma/fabric.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include <unistd.h>

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ND_TEST_TSAN 1
#include <sanitizer/allocator_interface.h>
#endif
#endif

/* ---- every allocation of the process, counted while `counting` ---- */

namespace {
thread_local bool counting = false;
std::atomic<unsigned> allocations{0};

#ifdef ND_TEST_TSAN
/* ThreadSanitizer's runtime defines every operator new itself, so they
 * cannot be replaced here; its allocator reports each allocation to this
 * hook instead (malloc's too, which counts more, not less). */
void count_allocation(const volatile void *, std::size_t)
{
	if (counting)
		allocations.fetch_add(1, std::memory_order_relaxed);
}
void ignore_free(const volatile void *) {}
/* Both hooks, or the runtime installs neither. */
const bool hook_installed = __sanitizer_install_malloc_and_free_hooks(count_allocation, ignore_free) != 0;
} // namespace
#else
void *counted_alloc(std::size_t size)
{
	if (counting)
		allocations.fetch_add(1, std::memory_order_relaxed);
	if (void *p = std::malloc(size ? size : 1))
		return p;
	throw std::bad_alloc();
}

void *counted_aligned_alloc(std::size_t size, std::align_val_t align)
{
	if (counting)
		allocations.fetch_add(1, std::memory_order_relaxed);
	const std::size_t a = static_cast<std::size_t>(align);
	if (void *p = std::aligned_alloc(a, (size + a - 1) / a * a))
		return p;
	throw std::bad_alloc();
}
} // namespace


void *operator new(std::size_t size) { return counted_alloc(size); }
void *operator new[](std::size_t size) { return counted_alloc(size); }
void *operator new(std::size_t size, const std::nothrow_t &) noexcept
{
	try {
		return counted_alloc(size);
	} catch (...) {
		return nullptr;
	}
}
void *operator new[](std::size_t size, const std::nothrow_t &) noexcept
{
	return operator new(size, std::nothrow);
}
void *operator new(std::size_t size, std::align_val_t align) { return counted_aligned_alloc(size, align); }
void *operator new[](std::size_t size, std::align_val_t align) { return counted_aligned_alloc(size, align); }
void operator delete(void *p) noexcept { std::free(p); }
void operator delete[](void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }
void operator delete[](void *p, std::size_t) noexcept { std::free(p); }
void operator delete(void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void *p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#endif

using namespace nd;

/* The CQ's state is private (nd_cq.h); this is the one view of it the host
 * tests have: a CQ without a device, what completes into it, and its two
 * rings. */
namespace nd {
struct CompletionQueueTest {
	/* A CQ as fi_cq_open leaves it, without a device: its rings sized for
	 * `capacity` outstanding requests. complete() needs nothing else. */
	static std::unique_ptr<CompletionQueue> make(int capacity)
	{
		auto cq = std::make_unique<CompletionQueue>();
		cq->domain = nullptr;
		cq->format = FI_CQ_FORMAT_TAGGED;
		cq->internal = false;
		cq->waitable = false;
		cq->vector = 0;
		cq->capacity = capacity;
		cq->reserved = capacity;
		cq->size_rings(capacity);
		return cq;
	}
	/* CompletionQueue::complete runs under the CQ's lock, as its read
	 * holds it (debug builds check). */
	static bool complete(CompletionQueue &cq, ibv_wc wc, CqEntry *out)
	{
		std::lock_guard<OptionalLock> hold(cq.lock);
		return cq.complete(wc, out);
	}
	static CompletionRing<CqEntry> &ready(CompletionQueue &cq) { return cq.ready; }
	static CompletionRing<CqError> &errors(CompletionQueue &cq) { return cq.errors; }
	/* What fi_enable does to the rings (size_rings). */
	static void size_rings(CompletionQueue &cq, int total) { cq.size_rings(total); }
};
} // namespace nd
using Probe = nd::CompletionQueueTest;

template <typename Cq>
static bool complete_locked(Cq &cq, ibv_wc wc, CqEntry *out)
{
	return Probe::complete(*cq, wc, out);
}
using nd::test::completion_of;
using nd::test::post;

namespace {

/* Counts the allocations made while it lives. */
struct AllocationCount {
	unsigned before;
	AllocationCount() : before(allocations.load())
	{
		counting = true;
	}
	~AllocationCount() { counting = false; }
	unsigned made() const { return allocations.load() - before; }
};

void *volatile escaped; /* what a test keeps, so that no allocation is elided */
int ctx_storage[64];
void *ctx(int i) { return &ctx_storage[i]; }

std::unique_ptr<CompletionQueue> make_cq(int capacity)
{
	return Probe::make(capacity);
}

/* A queue pair on the host: ibv_post_recv calls context->ops.post_recv,
 * which records the buffers given back to the "adapter". */
std::vector<uint64_t> *reposted_log;
int record_post_recv(ibv_qp *, ibv_recv_wr *wr, ibv_recv_wr **) noexcept
{
	for (; wr; wr = wr->next)
		reposted_log->push_back(wr->sg_list[0].addr);
	return 0;
}

struct HostQp {
	ibv_context context{};
	ibv_qp qp{};
	HostQp()
	{
		context.ops.post_recv = record_post_recv;
		qp.context = &context;
	}
};

/* A framed receive queue with `count` buffers in the "adapter". */
struct FramedQueue {
	ReceiveQueue queue{8};
	Framing *framing = nullptr;
	HostQp qp;
	std::vector<OpRecord *> in_adapter;
	std::vector<uint64_t> reposted;
	Link link;
	CounterWords recv_counted;

	explicit FramedQueue(uint32_t count)
	{
		int err = -1;
		std::unique_ptr<Framing> made = Framing::make(nullptr, count, 256, &err);
		cr_assert(made && err == 0);
		framing = made.get();
		framing->queue = &queue;
		framing->posted_limit = 8;
		framing->recv_counter = CounterCells{&recv_counted};
		framing->qp.store(&qp.qp);
		reposted.reserve(64);
		reposted_log = &reposted;
		RetireTargets targets;
		targets.link = &link;
		queue.set_targets(targets);
		link.on(Link::Event::ready);
		for (uint32_t i = 0; i < count; i++)
			in_adapter.push_back(&bounce(framing->slot(i)));
		queue.set_framing(std::move(made));
	}
	OpRecord &bounce(uint8_t *buffer)
	{
		ibv_recv_wr wr;
		ibv_sge sge;
		return framing->claim_bounce(queue, buffer, wr, sge);
	}
	/* The adapter fills the buffer of record `r` with a framed message. */
	ibv_wc message(const OpRecord &r, frame::Kind kind, uint64_t tag, const void *bytes, uint32_t length)
	{
		const frame::Header header = frame::make_header(kind, tag, false, 0);
		uint8_t *buffer = static_cast<uint8_t *>(r.context);
		std::memcpy(buffer, &header, sizeof(header));
		std::memcpy(buffer + sizeof(header), bytes, length);
		return completion_of(r, IBV_WC_SUCCESS, IBV_WC_RECV, static_cast<uint32_t>(sizeof(header) + length));
	}
};

FramedRecv tagged_receive(void *context, void *buf, size_t len, uint64_t tag)
{
	FramedRecv recv{};
	recv.context = context;
	recv.iov[0] = iovec{buf, len};
	recv.count = 1;
	recv.capacity = len;
	recv.tagged = true;
	recv.tag = tag;
	recv.ignore = 0;
	recv.report = true;
	return recv;
}

} // namespace

Test(completion_path, the_allocation_count_sees_an_allocation)
{
	AllocationCount count;
	std::unique_ptr<int> made = std::make_unique<int>(1);
	escaped = made.get(); /* kept: the allocation cannot be elided */
	cr_assert_eq(count.made(), 1u, "the counter this file's tests rely on counts");
}

Test(completion_path, successes_failures_flushes_and_counters_allocate_nothing)
{
	auto cq = make_cq(16);
	SendQueue sends(8);
	CounterWords counted;
	Link link;
	link.on(Link::Event::ready);
	RetireTargets targets;
	targets.counters[static_cast<size_t>(CounterKind::send)] = CounterCells{&counted};
	targets.link = &link;
	sends.set_targets(targets);
	OpRecord &a = post(sends, ctx(1), FI_SEND | FI_MSG);
	OpRecord &b = post(sends, ctx(2), FI_SEND | FI_MSG);
	OpRecord &c = post(sends, ctx(3), FI_SEND | FI_MSG, false);
	OpRecord &d = post(sends, ctx(4), FI_SEND | FI_MSG);

	CqEntry entries[4];
	bool reported[4];
	{
		AllocationCount count;
		reported[0] = complete_locked(cq, completion_of(a, IBV_WC_SUCCESS, IBV_WC_SEND), &entries[0]);
		reported[1] = complete_locked(cq, completion_of(b, IBV_WC_REM_ACCESS_ERR, IBV_WC_SEND), &entries[1]);
		reported[2] = complete_locked(cq, completion_of(c, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND), &entries[2]);
		reported[3] = complete_locked(cq, completion_of(d, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND), &entries[3]);
		cr_assert_eq(count.made(), 0u, "completing allocated %u times", count.made());
	}
	cr_assert(reported[0]);
	cr_assert_eq(entries[0].op_context, ctx(1));
	cr_assert_eq(entries[0].flags, static_cast<uint64_t>(FI_SEND | FI_MSG));
	cr_assert_not(reported[1] || reported[2] || reported[3], "errors go to the error ring");
	cr_assert_eq(Probe::errors(*cq).size(), 2u, "the failure and the flush the application asked about");
	cr_assert_eq(Probe::errors(*cq).front().entry.op_context, ctx(2));
	cr_assert_eq(Probe::errors(*cq).front().entry.err, FI_EACCES);
	cr_assert_eq(counted.success.load(), 1u);
	cr_assert_eq(counted.errors.load(), 3u);
	cr_assert_eq(link.state(), LinkState::broken);
	cr_assert_eq(sends.outstanding(), 0u);
}

/* A receive-credit write that a closing peer's reset fails (soft-iWARP:
 * a local QP error, not a flush) is nd's own request: no entry, which
 * would carry no context. An unsignaled request of the application's that
 * fails for real still has one. */
Test(completion_path, a_failure_of_nd_s_own_request_reaches_no_entry)
{
	auto cq = make_cq(16);
	SendQueue sends(8);
	Link link;
	link.on(Link::Event::ready);
	RetireTargets targets;
	targets.link = &link;
	sends.set_targets(targets);
	OpRecord &credit_write = post(sends, nullptr, 0, false);
	OpRecord &inject = post(sends, nullptr, FI_SEND | FI_MSG, false);
	CqEntry entry;
	cr_assert_not(complete_locked(cq, completion_of(credit_write, IBV_WC_LOC_QP_OP_ERR, IBV_WC_RDMA_WRITE), &entry));
	cr_assert_eq(Probe::errors(*cq).size(), 0u, "nd's own request's failure is not the application's");
	cr_assert_eq(link.state(), LinkState::broken, "the link records it");
	cr_assert_not(complete_locked(cq, completion_of(inject, IBV_WC_LOC_QP_OP_ERR, IBV_WC_SEND), &entry));
	cr_assert_eq(Probe::errors(*cq).size(), 1u, "the application's request's failure is reported");
	cr_assert_eq(Probe::errors(*cq).front().entry.flags, static_cast<uint64_t>(FI_SEND | FI_MSG));
	cr_assert_eq(Probe::errors(*cq).front().entry.err, FI_EIO);
	cr_assert_eq(sends.outstanding(), 0u);
}

Test(completion_path, a_multi_receive_buffer_allocates_nothing)
{
	auto cq = make_cq(16);
	ReceiveQueue receives(8);
	receives.set_multi(std::make_unique<MultiRecv>(16));
	receives.multi()->post_wr = [](MultiRecv &, ibv_recv_wr &) noexcept { return 0; };
	receives.multi()->ready = true;
	uint8_t buffer[100];
	OpRecord &record = receives.claim_recv(ctx(5), FI_RECV | FI_MSG | kPlacedByNd, sizeof(buffer), true);
	ibv_sge sge{reinterpret_cast<uintptr_t>(buffer), sizeof(buffer), 7};
	cr_assert_eq(receives.multi()->submit(&record, &sge, 1, true), 0);

	CqEntry first, last;
	{
		AllocationCount count;
		cr_assert(complete_locked(cq, completion_of(record, IBV_WC_SUCCESS, IBV_WC_RECV, 40), &first));
		cr_assert(complete_locked(cq, completion_of(record, IBV_WC_SUCCESS, IBV_WC_RECV, 50), &last));
		cr_assert_eq(count.made(), 0u, "completing allocated %u times", count.made());
	}
	cr_assert_eq(first.buf, buffer);
	cr_assert_eq(first.flags, static_cast<uint64_t>(FI_RECV | FI_MSG), "not released yet");
	cr_assert_eq(last.buf, buffer + 40);
	cr_assert_eq(last.flags, static_cast<uint64_t>(FI_RECV | FI_MSG | FI_MULTI_RECV), "released");
}

Test(completion_path, framed_messages_matched_kept_truncated_and_ended_allocate_nothing)
{
	auto cq = make_cq(16);
	FramedQueue f(4);
	uint8_t small[4], big[64];
	cr_assert_eq(f.framing->post(tagged_receive(ctx(10), big, sizeof(big), 0x10), *cq), 0);
	cr_assert_eq(f.framing->post(tagged_receive(ctx(11), small, sizeof(small), 0x11), *cq), 0);
	cr_assert_eq(f.framing->post(tagged_receive(ctx(12), big, sizeof(big), 0x12), *cq), 0);
	const char hello[] = "hello, tagged";
	const char longer[] = "longer than four";
	CqEntry entry;
	bool reported[4];
	{
		AllocationCount count;
		/* Matched: copied into its receive, the buffer given back. */
		reported[0] = complete_locked(cq, f.message(*f.in_adapter[0], frame::Kind::tagged, 0x10, hello, sizeof(hello)), &entry);
		/* Unexpected: no receive for tag 0x99; copied aside. */
		reported[1] = complete_locked(cq, f.message(*f.in_adapter[1], frame::Kind::tagged, 0x99, hello, 5), &entry);
		/* Truncated: an FI_ETRUNC error entry with the bytes that fit. */
		reported[2] = complete_locked(cq, f.message(*f.in_adapter[2], frame::Kind::tagged, 0x11, longer, sizeof(longer)), &entry);
		cr_assert_eq(count.made(), 0u, "completing allocated %u times", count.made());
	}
	cr_assert_not(reported[0] || reported[1] || reported[2], "framed entries go through the sink");
	cr_assert_eq(Probe::ready(*cq).size(), 1u);
	cr_assert_eq(Probe::ready(*cq).front().op_context, ctx(10));
	cr_assert_eq(Probe::ready(*cq).front().tag, 0x10u);
	cr_assert_eq(Probe::ready(*cq).front().len, sizeof(hello));
	cr_assert_eq(std::memcmp(big, hello, sizeof(hello)), 0, "the bytes arrived");
	cr_assert_eq(Probe::errors(*cq).size(), 1u);
	cr_assert_eq(Probe::errors(*cq).front().entry.err, FI_ETRUNC);
	cr_assert_eq(Probe::errors(*cq).front().entry.olen, sizeof(longer) - sizeof(small));
	cr_assert_eq(std::memcmp(small, longer, sizeof(small)), 0);
	cr_assert_eq(f.reposted.size(), 3u, "every buffer is back in the adapter");
	cr_assert_eq(f.framing->unexpected.size(), 1u);
	cr_assert_eq(f.recv_counted.success.load(), 1u);
	cr_assert_eq(f.recv_counted.errors.load(), 1u);

	/* A receive posted for the waiting message completes at once. */
	uint8_t late[16] = {};
	{
		AllocationCount count;
		cr_assert_eq(f.framing->post(tagged_receive(ctx(13), late, sizeof(late), 0x99), *cq), 0);
		cr_assert_eq(count.made(), 0u, "completing at once allocated %u times", count.made());
	}
	cr_assert_eq(Probe::ready(*cq).size(), 2u);
	cr_assert_eq(std::memcmp(late, hello, 5), 0);
	cr_assert_eq(f.framing->unexpected.size(), 0u);
	cr_assert_eq(f.reposted.size(), 3u, "a copied message has no buffer to give back");

	/* A message without the frame ends the connection: the link breaks
	 * and the receive still waiting (0x12) is cancelled. */
	{
		AllocationCount count;
		ibv_wc wc = completion_of(*f.in_adapter[3], IBV_WC_SUCCESS, IBV_WC_RECV, 3);
		std::memcpy(f.in_adapter[3]->context, "bad", 3);
		cr_assert_not(complete_locked(cq, wc, &entry));
		cr_assert_eq(count.made(), 0u, "ending the connection allocated %u times", count.made());
	}
	cr_assert_eq(f.link.state(), LinkState::broken);
	cr_assert_eq(Probe::errors(*cq).size(), 2u);
	Probe::errors(*cq).pop_front();
	cr_assert_eq(Probe::errors(*cq).front().entry.op_context, ctx(12));
	cr_assert_eq(Probe::errors(*cq).front().entry.err, FI_ECANCELED);
	cr_assert(f.framing->posted.empty());
}

Test(completion_path, each_enable_keeps_room_for_every_error_still_to_come)
{
	auto cq = make_cq(4);
	cr_assert_geq(Probe::errors(*cq).room(), 8u, "twice the CQ's capacity");
	SendQueue sends(8);
	CqEntry entry;
	for (int i = 0; i < 6; i++) {
		OpRecord &r = post(sends, ctx(i), FI_SEND | FI_MSG);
		AllocationCount count;
		cr_assert_not(complete_locked(cq, completion_of(r, IBV_WC_REM_ACCESS_ERR, IBV_WC_SEND), &entry));
		cr_assert_eq(count.made(), 0u);
	}
	cr_assert_eq(Probe::errors(*cq).size(), 6u, "none dropped");
	/* The next fi_enable (reserve) keeps the unread ones and room for
	 * twice the new capacity beside them. */
	Probe::size_rings(*cq, 8);
	cr_assert_geq(Probe::errors(*cq).room(), 16u);
	cr_assert_eq(Probe::errors(*cq).size(), 6u);
	cr_assert_eq(Probe::errors(*cq).front().entry.op_context, ctx(0), "in order");
}

Test(completion_path, unexpected_messages_past_the_arena_wait_in_their_buffers)
{
	UnexpectedMessages store;
	store.make(64, 2); /* room for two 24-byte copies and two buffers */
	uint8_t buffers[4][32];
	uint8_t bytes[24];
	const frame::Header header = frame::make_header(frame::Kind::tagged, 1, false, 0);
	bool copied[4];
	{
		AllocationCount count;
		for (int i = 0; i < 4; i++) {
			std::memset(bytes, i + 1, sizeof(bytes));
			copied[i] = store.keep(header, buffers[i], bytes, sizeof(bytes));
		}
		cr_assert_eq(count.made(), 0u);
	}
	cr_assert(copied[0] && copied[1], "copied while the arena has room");
	cr_assert_not(copied[2] || copied[3], "then kept in their buffers");
	cr_assert_eq(store.size(), 4u);
	cr_assert_eq(store[2].buffer, buffers[2]);
	cr_assert_eq(store[0].payload[0], 1);
	cr_assert_eq(store[1].payload[23], 2);
	/* The newest copy taken first: the oldest still pins the arena. */
	store.take(1);
	std::memset(bytes, 9, sizeof(bytes));
	cr_assert_not(store.keep(header, buffers[1], bytes, 24), "a ring: no room behind the oldest copy");
	/* The oldest taken: its bytes serve the next copy. */
	store.take(0);
	cr_assert_eq(store[0].buffer, buffers[2], "arrival order is kept");
	cr_assert(store.keep(header, buffers[0], bytes, 24), "room where the oldest was");
	cr_assert_eq(store.size(), 4u);
	cr_assert_eq(store[3].payload[0], 9);
	cr_assert_null(store[3].buffer);
	store.clear();
	cr_assert_eq(store.size(), 0u);
}

/* Which verbs CQ an endpoint joins (takes_endpoint), at Soft-RoCE's largest
 * CQ: by depths while they fit, so that every ring can grow to its depth;
 * past that while half the CQ is free for the rings there to grow into;
 * never past the half by reservations alone. */
Test(completion_path, a_verbs_cq_takes_endpoints_by_depth_then_by_half_its_room)
{
	constexpr int kMaxCqe = 32767;
	constexpr int kCount = 2, kPromise = 384 + 1 + 384; /* rings of one, the default depths */
	nd::VerbsCqSlot slot;
	int taken = 0;
	while (nd::takes_endpoint(slot, kCount, kPromise, kMaxCqe)) {
		slot.reserved += kCount;
		slot.promised += kPromise;
		taken++;
	}
	/* 42 by depth, then until the reservations reach half of 32,767. */
	cr_assert_eq(taken, kMaxCqe / 2 / kCount, "endpoints on one verbs CQ: %d", taken);
	cr_assert_leq(slot.reserved, kMaxCqe / 2);

	/* Endpoints that reserve their whole depth (16,001 each): two by depth,
	 * and a third is past both. */
	nd::VerbsCqSlot whole;
	constexpr int kWhole = 8000 + 1 + 8000;
	for (int i = 0; i < 2; i++) {
		cr_assert(nd::takes_endpoint(whole, kWhole, kWhole, kMaxCqe), "endpoint %d", i);
		whole.reserved += kWhole;
		whole.promised += kWhole;
	}
	cr_assert_not(nd::takes_endpoint(whole, kWhole, kWhole, kMaxCqe));
	/* An empty verbs CQ takes any endpoint that fits the device's CQ. */
	cr_assert(nd::takes_endpoint(nd::VerbsCqSlot{}, kMaxCqe, kMaxCqe, kMaxCqe));
}

/* ---- the CQ's completion ring ---- */

Test(completion_ring, an_emptied_ring_starts_again_at_its_first_slot)
{
	/* A CQ reserves a ring for every request its endpoints may have
	 * outstanding; the pages it touches must follow what is queued at
	 * once, not how many entries have passed through. */
	CompletionRing<int> ring;
	ring.reserve(1000);
	ring.push_back(1);
	const int *first_slot = &ring.front();
	for (int i = 0; i < 5000; i++) {
		ring.pop_front();
		ring.push_back(i);
		cr_assert_eq(&ring.front(), first_slot, "entry %d went to another slot", i);
	}
	ring.push_back(-1);
	ring.pop_front();
	cr_assert_eq(&ring.front(), first_slot + 1, "a ring still holding entries goes on");
}

Test(completion_ring, keeps_order_across_wrap_and_growth)
{
	CompletionRing<int> ring;
	cr_assert_eq(ring.room(), 0u, "no storage until reserved");
	ring.reserve(3);
	cr_assert_eq(ring.room(), 3u);
	ring.push_back(-1);
	for (int round = 0; round < 10; round++) { /* never empty: wraps many times */
		ring.push_back(round);
		ring.push_back(round + 100);
		cr_assert_eq(ring.front(), round - 1 < 0 ? -1 : round - 1 + 100);
		ring.pop_front();
		cr_assert_eq(ring.front(), round);
		ring.pop_front();
		cr_assert_eq(ring.size(), 1u);
	}
	cr_assert_eq(ring.front(), 109);
	ring.pop_front();
	cr_assert(ring.empty());
	ring.push_back(1);
	ring.push_back(2);
	ring.push_back(3);
	cr_assert_eq(ring.room(), 0u);
	ring.reserve(2); /* never shrinks */
	cr_assert_eq(ring.size(), 3u);
	ring.pop_front();
	ring.push_back(4); /* the queue now starts mid-storage and wraps */
	ring.reserve(8);
	cr_assert_eq(ring.room(), 5u);
	for (int expected : {2, 3, 4}) {
		cr_assert_eq(ring.front(), expected, "growth keeps the order");
		ring.pop_front();
	}
	cr_assert(ring.empty());
}

Test(completion_ring, a_large_ring_is_a_mapping_and_keeps_its_entries_when_it_becomes_one)
{
	/* Rings that doubled in the heap left holes there that endpoints'
	 * allocations filled and touched: from RingStorage::kMappedFrom on,
	 * the slots are a mapping of their own. */
	CompletionRing<uint64_t> ring;
	constexpr size_t small = 16;
	ring.reserve(small);
	cr_assert_not(ring.mapped(), "a small ring stays in the heap");
	for (uint64_t i = 0; i < small; i++)
		ring.push_back(i);
	ring.pop_front();
	ring.push_back(small); /* wrapped: the first slot holds the last entry */
	constexpr size_t large = RingStorage<uint64_t>::kMappedFrom / sizeof(uint64_t);
	ring.reserve(large);
	cr_assert(ring.mapped());
	cr_assert_eq(ring.size(), small);
	cr_assert_eq(ring.room(), large - small);
	for (uint64_t i = 1; i <= small; i++) {
		cr_assert_eq(ring.front(), i, "entry %lu after the ring was mapped", static_cast<unsigned long>(i));
		ring.pop_front();
	}
	cr_assert(ring.empty());
	for (uint64_t i = 0; i < large; i++)
		ring.push_back(i * 3);
	cr_assert_eq(ring.room(), 0u);
	for (uint64_t i = 0; i < large; i++) {
		cr_assert_eq(ring.front(), i * 3);
		ring.pop_front();
	}
}

/* The stall watch gives a queue that stands still the timeout plus a
 * second per MB outstanding; while the device receives not-ready NAKs
 * (a receiver that is late, not gone), 30 timeouts plus the same. */
Test(stall_watch, a_receiver_that_answers_not_ready_is_waited_for_longer)
{
	using namespace std::chrono;
	const uint64_t six_mb = 6'300'000;
	cr_assert_not(StallWatch::lost(seconds(19), 20, 0, false), "within the timeout");
	cr_assert(StallWatch::lost(seconds(20), 20, 0, false), "a small request: the timeout alone");
	cr_assert_not(StallWatch::lost(milliseconds(26'299), 20, six_mb, false), "6.3 MB: 6.3 s more at 1 MB/s");
	cr_assert(StallWatch::lost(milliseconds(26'300), 20, six_mb, false));
	cr_assert_not(StallWatch::lost(seconds(599), 20, 0, true), "NAKs coming: 30 timeouts");
	cr_assert(StallWatch::lost(seconds(600), 20, 0, true));
	cr_assert_not(StallWatch::lost(milliseconds(606'299), 20, six_mb, true), "30 timeouts, 6.3 s more");
	cr_assert(StallWatch::lost(milliseconds(606'300), 20, six_mb, true));
	cr_assert(StallWatch::lost(seconds(3600), 3600, 0, false), "the largest timeout");
	cr_assert_not(StallWatch::lost(seconds(3600), 3600, 0, true), "30 of the largest do not overflow");
}

/* NAKs are coming while the count changed within 2 s; the first reading
 * gives the benefit of the doubt, an unchanged one does not. */
Test(stall_watch, not_ready_naks_are_coming_while_their_count_moves)
{
	using namespace std::chrono;
	StallWatch::NakCount n;
	const steady_clock::time_point t0{seconds(1000)};
	cr_assert(n.coming(500, t0), "first reading: taken as a change now");
	cr_assert(n.coming(500, t0 + seconds(1)), "unchanged for 1 s: still within 2 s of the change");
	cr_assert_not(n.coming(500, t0 + seconds(2)), "unchanged for 2 s: none come");
	cr_assert(n.coming(501, t0 + seconds(3)), "moved");
	cr_assert_not(n.coming(501, t0 + seconds(60)), "read again long after, unchanged");
	cr_assert(n.coming(9000, t0 + seconds(61)), "read again long after, changed");
}

/* Where the device keeps no count (no such device here), the path is empty
 * and the watch waits one timeout. */
Test(stall_watch, a_device_without_a_nak_count_has_no_path)
{
	cr_assert(not_ready_naks_path("nd-no-such-device").empty());
	uint64_t value = 7;
	cr_assert_not(read_sysfs_counter("/nonexistent/rcvd_rnr_err", &value));
	cr_assert_eq(value, 7u, "untouched when unread");
	char path[] = "/tmp/nd-naks-XXXXXX";
	const int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	const char text[] = "18446744073709551000\n"; /* sysfs counters are u64 */
	cr_assert_eq(write(fd, text, sizeof text - 1), static_cast<ssize_t>(sizeof text - 1));
	close(fd);
	cr_assert(read_sysfs_counter(path, &value));
	cr_assert_eq(value, 18446744073709551000ull);
	unlink(path);
}
