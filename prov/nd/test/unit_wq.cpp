/* Unit tests: the work queue's retirement rules (nd_wq.h), fed recorded work
 * completions as the connection state machine is fed recorded CM events,
 * and its send queue's posting protocol. (Multi-receive buffers on a queue:
 * unit_multi_recv.cpp; the CQ's completion ring: unit_completion.cpp.) */
#include <criterion/criterion.h>

#include "nd_wq.h"
#include "wq_fixture.h"

#include <rdma/fabric.h>

#include <arpa/inet.h>

#include <cstdint>
#include <memory>
#include <vector>

using namespace nd;
using nd::test::Chain;
using nd::test::completion_of;
using nd::test::retire_copy;
using nd::test::post;

namespace {

constexpr uint32_t kSendFlags = FI_SEND | FI_MSG;
constexpr uint32_t kWriteFlags = FI_RMA | FI_WRITE;
constexpr uint32_t kReadFlags = FI_RMA | FI_READ;
constexpr uint32_t kRecvFlags = FI_RECV | FI_MSG;

void *ctx(uintptr_t n) { return reinterpret_cast<void *>(n); }

struct Cells : CounterWords {
	CounterCells cells() { return {this}; }
};

} // namespace

Test(work_queue, a_signaled_completion_retires_the_unsignaled_run_before_it)
{
	SendQueue queue(8);
	post(queue, ctx(1), kSendFlags, false);
	post(queue, ctx(2), kWriteFlags, false);
	post(queue, ctx(3), kSendFlags, false);
	const OpRecord &last = post(queue, ctx(4), kSendFlags);
	cr_assert_eq(queue.outstanding(), 4u);
	const Retired done = retire_copy(completion_of(last));
	cr_assert_eq(queue.outstanding(), 0u, "the three unsignaled requests retire with it");
	cr_assert_eq(done.context, ctx(4));
	cr_assert_eq(done.flags, kSendFlags);
	cr_assert(done.report);
}

Test(work_queue, a_request_without_a_cq_entry_retires_silently)
{
	SendQueue queue(4);
	const OpRecord &r = post(queue, ctx(7), kWriteFlags, false);
	const Retired done = retire_copy(completion_of(r));
	cr_assert_not(done.report);
	cr_assert_eq(queue.outstanding(), 0u);
}

Test(work_queue, reads_in_flight_are_retired_by_marks)
{
	SendQueue queue(16);
	post(queue, ctx(1), kReadFlags, false);
	post(queue, ctx(2), kReadFlags, false);
	const OpRecord &third = post(queue, ctx(3), kReadFlags);
	post(queue, ctx(4), kSendFlags, false);
	const OpRecord &fifth = post(queue, ctx(5), kReadFlags);
	cr_assert_eq(queue.reads_in_flight(), 4u);
	retire_copy(completion_of(third, IBV_WC_SUCCESS, IBV_WC_RDMA_READ));
	cr_assert_eq(queue.reads_in_flight(), 1u, "three reads retired by one completion");
	cr_assert_eq(queue.outstanding(), 2u);
	retire_copy(completion_of(fifth, IBV_WC_SUCCESS, IBV_WC_RDMA_READ));
	cr_assert_eq(queue.reads_in_flight(), 0u);
	cr_assert_eq(queue.outstanding(), 0u);
}

Test(work_queue, the_ring_wraps)
{
	SendQueue queue(3); /* a ring of 4 slots */
	cr_assert_eq(queue.ring_size(), 4u);
	for (uintptr_t i = 1; i <= 50; i++) {
		post(queue, ctx(i), kSendFlags, false);
		const OpRecord &r = post(queue, ctx(i + 1000), kSendFlags);
		cr_assert(queue.full() == false || queue.depth() <= 2);
		const Retired done = retire_copy(completion_of(r));
		cr_assert_eq(done.context, ctx(i + 1000));
		cr_assert_eq(queue.outstanding(), 0u);
	}
	cr_assert_eq(queue.posted(), 100u);
}

/* A ring that starts with room for one request grows when it fills; the
 * requests posted before stay where the adapter knows them, and one
 * completion retires the unsignaled run across the rings. */
Test(work_queue, a_small_ring_grows_and_keeps_its_records)
{
	ReceiveQueue queue(384, 1);
	cr_assert_eq(queue.limit(), 1u);
	cr_assert_eq(queue.ring_size(), 2u);
	OpRecord *posted[100];
	for (uintptr_t i = 0; i < 100; i++) {
		if (queue.full()) {
			const uint32_t more = queue.growth();
			cr_assert_gt(more, 0u);
			const uint32_t limit = queue.limit();
			cr_assert(queue.grow());
			cr_assert_eq(queue.limit(), limit + more);
			cr_assert_eq(queue.ring_size(), 2 * (limit + 1), "ring of %u for limit %u", queue.ring_size(), limit);
		}
		posted[i] = &post(queue, ctx(i + 1), kSendFlags, i == 99);
	}
	cr_assert_eq(queue.limit(), 127u, "limit %u", queue.limit());
	cr_assert_eq(queue.old_ring_count(), 6u); /* of 2, 4, ..., 64 slots, each still holding requests */
	for (uintptr_t i = 0; i < 100; i++) {
		cr_assert_eq(posted[i]->context, ctx(i + 1), "request %lu moved", (unsigned long)i);
		cr_assert_eq(&queue.record_at(i), posted[i]);
	}
	/* The signaled last one retires all 100, whichever ring they are in. */
	const Retired done = retire_copy(completion_of(*posted[99]));
	cr_assert_eq(done.context, ctx(100));
	cr_assert_eq(queue.outstanding(), 0u);
	/* The next growth drops the rings whose requests all retired. */
	for (uintptr_t i = 0; i < 127; i++)
		post(queue, ctx(i), kSendFlags, false);
	cr_assert(queue.full());
	cr_assert(queue.grow());
	cr_assert_eq(queue.old_ring_count(), 1u, "%zu old rings", queue.old_ring_count());
	cr_assert_eq(queue.limit(), 255u);
}

/* A send ring's unsignaled runs fill it whatever is in flight: leaving
 * its inline slots, it goes straight to its working size, then doubles. */
Test(work_queue, a_send_ring_leaves_its_inline_slots_for_its_working_size)
{
	SendQueue queue(384, 0, 1);
	cr_assert(queue.ring_is_inline());
	post(queue, ctx(1), kSendFlags, false);
	cr_assert(queue.full());
	cr_assert(queue.grow());
	cr_assert_eq(queue.ring_size(), kWorkingRingSlots);
	cr_assert_eq(queue.limit(), kWorkingRingSlots - 1);
	cr_assert_eq(queue.record_at(0).context, ctx(1), "the first request stays where it was posted");
	cr_assert(queue.grow());
	cr_assert_eq(queue.ring_size(), 2 * kWorkingRingSlots);
	/* A depth below the working size: the ring for the whole depth. */
	SendQueue shallow(20, 0, 1);
	cr_assert(shallow.grow());
	cr_assert_eq(shallow.limit(), 20u);
	cr_assert_eq(shallow.growth(), 0u);
}

Test(work_queue, growth_stops_at_the_depth)
{
	ReceiveQueue queue(5, 1);
	while (queue.growth())
		cr_assert(queue.grow());
	cr_assert_eq(queue.limit(), 5u);
	cr_assert_not(queue.grow());
	/* With slots of the provider's own, the application's stay within its depth. */
	SendQueue with_internal(6, 2, 1);
	cr_assert_eq(with_internal.limit(), 1u); /* 4 slots: 2 internal, 1 for the close marker */
	while (with_internal.growth())
		cr_assert(with_internal.grow());
	cr_assert_eq(with_internal.limit(), 6u);
	cr_assert_gt(with_internal.ring_size(), 6u + 2u);
}

/* A request that failed to post gives its slot back across a growth. */
Test(work_queue, uncommit_across_a_growth)
{
	SendQueue queue(64, 0, 1);
	post(queue, ctx(1), kSendFlags, false);
	cr_assert(queue.grow());
	OpRecord &second = post(queue, ctx(2), kSendFlags, false);
	Chain both{&queue.record_at(0), &second};
	queue.unclaim(both.at(0));
	cr_assert_eq(queue.posted(), 0u);
	OpRecord &again = post(queue, ctx(3), kSendFlags);
	cr_assert_eq(&queue.record_at(0), &again);
	(void)second;
	const Retired done = retire_copy(completion_of(again));
	cr_assert_eq(done.context, ctx(3));
	cr_assert_eq(queue.outstanding(), 0u);
}

Test(work_queue, a_full_queue_says_so)
{
	SendQueue queue(2);
	post(queue, ctx(1), kSendFlags);
	cr_assert_not(queue.full());
	post(queue, ctx(2), kSendFlags);
	cr_assert(queue.full());
}

Test(work_queue, a_flush_is_not_a_broken_link)
{
	Link link;
	link.on(Link::Event::flushed); /* down */
	ReceiveQueue queue(4);
	RetireTargets targets;
	targets.link = &link;
	queue.set_targets(targets);
	cr_assert_not(queue.counted());
	const OpRecord &r = post(queue, ctx(9), kRecvFlags);
	const Retired done = retire_copy(completion_of(r, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV));
	cr_assert_eq(done.context, ctx(9));
	cr_assert(done.report, "the CQ reports it FI_ECANCELED");
	cr_assert_eq(link.state(), LinkState::down);
	cr_assert_eq(queue.outstanding(), 0u);
}

Test(link, its_state_and_the_slow_transmit_bits_share_a_word_without_mixing)
{
	Link link;
	cr_assert_eq(link.state(), LinkState::idle);
	cr_assert_not(link.open_with(0), "idle is not open");
	cr_assert_not(link.ended());
	link.on(Link::Event::ready);
	cr_assert(link.open_with(0), "up with no slow bit is open");
	link.set_slow_tx(5);
	cr_assert_not(link.open_with(0), "a slow bit closes the fast path");
	cr_assert_eq(link.state(), LinkState::up);
	cr_assert_eq(link.slow_tx(), 5);
	cr_assert(link.on(Link::Event::flushed));
	cr_assert_eq(link.state(), LinkState::down);
	cr_assert_eq(link.slow_tx(), 5, "an event keeps the slow bits");
	cr_assert(link.ended());
	cr_assert_not(link.on(Link::Event::stream_ended), "only up ends a stream");
	cr_assert(link.on(Link::Event::failed));
	cr_assert_not(link.on(Link::Event::failed), "broken once");
	cr_assert_not(link.on(Link::Event::flushed), "a broken link stays broken");
	cr_assert_eq(link.state(), LinkState::broken);
	link.set_slow_tx(0);
	cr_assert_eq(link.state(), LinkState::broken, "the slow bits keep the state");
	cr_assert_not(link.open_with(0));
	link.on(Link::Event::ready);
	cr_assert(link.open_with(0));
}

Test(work_queue, a_real_failure_breaks_the_link)
{
	Link link;
	link.on(Link::Event::ready);
	SendQueue queue(4);
	RetireTargets targets;
	targets.link = &link;
	queue.set_targets(targets);
	post(queue, ctx(1), kSendFlags, false);
	const OpRecord &r = post(queue, ctx(2), kWriteFlags, false);
	const Retired done = retire_copy(completion_of(r, IBV_WC_REM_ACCESS_ERR, IBV_WC_RDMA_WRITE));
	cr_assert_eq(link.state(), LinkState::broken);
	cr_assert_eq(done.context, ctx(2));
	cr_assert_eq(done.flags, kWriteFlags);
	cr_assert_eq(queue.outstanding(), 0u);
}

Test(work_queue, counters_count_their_own_kind_only)
{
	Cells sends, writes;
	SendQueue queue(8);
	RetireTargets targets;
	targets.counters[static_cast<size_t>(CounterKind::send)] = sends.cells();
	targets.counters[static_cast<size_t>(CounterKind::write)] = writes.cells();
	queue.set_targets(targets);
	cr_assert(queue.counted());
	retire_copy(completion_of(post(queue, ctx(1), kSendFlags)));
	retire_copy(completion_of(post(queue, ctx(2), kSendFlags)));
	retire_copy(completion_of(post(queue, ctx(3), kWriteFlags), IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE));
	retire_copy(completion_of(post(queue, ctx(4), kReadFlags), IBV_WC_SUCCESS, IBV_WC_RDMA_READ));
	retire_copy(completion_of(post(queue, ctx(5), kWriteFlags), IBV_WC_REM_ACCESS_ERR, IBV_WC_RDMA_WRITE));
	retire_copy(completion_of(post(queue, ctx(6), kSendFlags), IBV_WC_WR_FLUSH_ERR));
	cr_assert_eq(sends.success.load(), 2u);
	cr_assert_eq(sends.errors.load(), 1u, "a flushed send is an error for its counter");
	cr_assert_eq(writes.success.load(), 1u);
	cr_assert_eq(writes.errors.load(), 1u);
	cr_assert_eq(queue.outstanding(), 0u, "a read with no counter retires all the same");
}

Test(work_queue, a_receive_counter_counts_receives)
{
	Cells receives;
	ReceiveQueue queue(4);
	RetireTargets targets;
	targets.counters[static_cast<size_t>(CounterKind::recv)] = receives.cells();
	queue.set_targets(targets);
	retire_copy(completion_of(post(queue, ctx(1), kRecvFlags), IBV_WC_SUCCESS, IBV_WC_RECV));
	retire_copy(completion_of(post(queue, ctx(2), kRecvFlags), IBV_WC_LOC_LEN_ERR, IBV_WC_RECV));
	cr_assert_eq(receives.success.load(), 1u);
	cr_assert_eq(receives.errors.load(), 1u);
}

Test(work_queue, no_targets_means_no_counting)
{
	SendQueue queue(4);
	queue.set_targets(RetireTargets{});
	cr_assert_not(queue.counted());
	const OpRecord &r = post(queue, ctx(1), kSendFlags);
	retire_copy(completion_of(r, IBV_WC_RETRY_EXC_ERR)); /* no link to break: no crash */
	cr_assert_eq(queue.outstanding(), 0u);
}

/* A queue of thousands keeps its counters, hooks' table and link in few
 * words: the counters only where one is bound. */
static int hook_calls;
static void count_peer_lost(void *owner)
{
	cr_assert_eq(owner, ctx(77));
	hook_calls++;
}

Test(work_queue, a_queue_without_counters_makes_no_extras_and_hooks_go_through_one_table)
{
	static constexpr QueueHooks hooks{count_peer_lost, nullptr, nullptr};
	Link link;
	link.on(Link::Event::ready);
	SendQueue queue(4);
	RetireTargets targets;
	targets.link = &link;
	targets.hooks = &hooks;
	targets.owner = ctx(77);
	queue.set_targets(targets);
	cr_assert_not(queue.has_extras(), "no counter bound: nothing made on the side");
	cr_assert(queue.retires_inline(), "a hook for lost peers keeps the inline path");
	hook_calls = 0;
	retire_copy(completion_of(post(queue, ctx(1), kSendFlags), IBV_WC_RETRY_EXC_ERR));
	cr_assert_eq(hook_calls, 1, "retries exhausted: the endpoint is told, once");
	cr_assert_eq(link.state(), LinkState::broken);
}

/* iWARP's credits: a send queue with a room hook retires its successes
 * on a small path of their own, and tells the hook once the slots are
 * free (the credit write the hook sends takes one). */
namespace {
SendQueue *room_queue;
uint64_t room_seen;
void note_room(void *) noexcept
{
	room_seen = room_queue->outstanding();
}
} // namespace

Test(work_queue, a_send_queue_with_a_room_hook_tells_it_after_retiring)
{
	static constexpr QueueHooks hooks{nullptr, note_room, nullptr};
	SendQueue queue(4);
	RetireTargets targets;
	targets.hooks = &hooks;
	targets.owner = ctx(5);
	queue.set_targets(targets);
	cr_assert_not(queue.retires_inline());
	cr_assert(queue.retire_path() == WorkQueue::RetirePath::other, "a room hook on a queue whose reads complete in order");
	targets.reads_complete_late = true;
	queue.set_targets(targets);
	cr_assert(queue.retire_path() == WorkQueue::RetirePath::iwarp_send);
	room_queue = &queue;
	room_seen = 99;
	post(queue, ctx(1), kSendFlags, false);
	OpRecord &second = post(queue, ctx(2), kSendFlags);
	post(queue, ctx(3), kSendFlags);
	const Retired done = retire_copy(completion_of(second));
	cr_assert_eq(done.context, ctx(2));
	cr_assert(done.report);
	cr_assert_eq(room_seen, 1u, "told with the first two retired, the third outstanding");
}

/*
 * iWARP's send queue (RetireTargets::reads_complete_late): soft-iWARP
 * completes a send or write once transmitted, ahead of a read before it
 * that waits for its response. A completion with a read before it still
 * out is reported, but retires nothing until the read's completion, which
 * retires through it; in posting order a completion retires the read's
 * slot with it (what a RoCE queue does, below).
 */
namespace {

void no_room(void *) noexcept {}

/* An iWARP send queue's targets: with a room hook (an endpoint with
 * receive credits), it retires on the inline path, else on the other. */
SendQueue &late_reads(SendQueue &queue, bool room = true)
{
	static constexpr QueueHooks hooks{nullptr, no_room, nullptr};
	RetireTargets targets;
	targets.reads_complete_late = true;
	if (room)
		targets.hooks = &hooks;
	queue.set_targets(targets);
	cr_assert(queue.retire_path() == (room ? WorkQueue::RetirePath::iwarp_send : WorkQueue::RetirePath::other));
	return queue;
}

} // namespace

Test(work_queue, on_iwarp_a_completion_ahead_of_a_read_waits_for_the_read_to_retire)
{
	SendQueue queue(16);
	late_reads(queue);
	queue.set_signal_interval(100);
	OpRecord &read0 = post(queue, ctx(1), kReadFlags, true, true);
	OpRecord &write1 = post(queue, ctx(2), kWriteFlags, true, true);
	post(queue, ctx(3), kSendFlags, false); /* unsignaled */
	OpRecord &send3 = post(queue, ctx(4), kSendFlags, true, true);
	OpRecord &read4 = post(queue, ctx(5), kReadFlags, true, true);
	OpRecord &write5 = post(queue, ctx(6), kWriteFlags, true, true);
	cr_assert(read0.is_read() && !write1.is_read());

	Retired done = retire_copy(completion_of(write1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE));
	cr_assert_eq(done.context, ctx(2), "reported at once");
	cr_assert_eq(queue.outstanding(), 6u, "nothing retires ahead of the read");
	cr_assert_eq(queue.reads_in_flight(), 2u);
	cr_assert_eq(retire_copy(completion_of(send3)).context, ctx(4));
	cr_assert_eq(queue.outstanding(), 6u);

	done = retire_copy(completion_of(read0, IBV_WC_SUCCESS, IBV_WC_RDMA_READ));
	cr_assert_eq(done.context, ctx(1));
	cr_assert_eq(queue.outstanding(), 2u, "the read retires through the requests that completed early");
	cr_assert_eq(queue.reads_in_flight(), 1u);

	cr_assert_eq(retire_copy(completion_of(write5, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE)).context, ctx(6));
	cr_assert_eq(queue.outstanding(), 2u);
	cr_assert_eq(retire_copy(completion_of(read4, IBV_WC_SUCCESS, IBV_WC_RDMA_READ)).context, ctx(5));
	cr_assert_eq(queue.outstanding(), 0u);
	cr_assert_eq(queue.reads_in_flight(), 0u);
}

Test(work_queue, on_iwarp_a_read_flushed_after_a_later_write_completed_retires_both)
{
	SendQueue queue(16);
	late_reads(queue, false);
	queue.set_signal_interval(100);
	OpRecord &read0 = post(queue, ctx(1), kReadFlags, true, true);
	OpRecord &write1 = post(queue, ctx(2), kWriteFlags, true, true);
	retire_copy(completion_of(write1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE));
	cr_assert_eq(queue.outstanding(), 2u);
	const Retired done = retire_copy(completion_of(read0, IBV_WC_WR_FLUSH_ERR, IBV_WC_RDMA_READ));
	cr_assert_eq(done.context, ctx(1));
	cr_assert_eq(queue.outstanding(), 0u);
	cr_assert_eq(queue.reads_in_flight(), 0u);
}

Test(work_queue, elsewhere_a_completion_retires_every_slot_before_it)
{
	SendQueue queue(16);
	queue.set_signal_interval(100);
	post(queue, ctx(1), kReadFlags, true, true);
	OpRecord &write1 = post(queue, ctx(2), kWriteFlags, true, true);
	retire_copy(completion_of(write1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE));
	cr_assert_eq(queue.outstanding(), 0u, "RC order: the read before it is done");
}

namespace {

/* soft-iWARP's order, many times over a ring that wraps and grows: reads
 * complete in order among themselves, the rest in order among themselves,
 * each read any time after the requests before it. Every completion
 * reports its own context exactly once, and a slot retires only once its
 * request and every one before it completed (so no slot still in flight
 * is claimed again, which reported contexts twice: docs/mpi.md). `room`:
 * the inline retire path (an endpoint with receive credits), else the
 * other. */
void reads_completing_late(bool room)
{
	SendQueue queue(64, 0, 4);
	late_reads(queue, room);
	queue.set_signal_interval(4);
	/* By request number: what it is, and whether it has completed (an
	 * unsignaled one with the signaled one after it). */
	std::vector<OpRecord *> records;
	std::vector<uint8_t> is_read, signaled, completed;
	uint64_t reported = 0, early = 0;
	uint32_t rng = 12345;
	const auto next_random = [&rng] {
		rng = rng * 1103515245u + 12345u;
		return (rng >> 16) & 0x7fff;
	};
	/* The first signaled request of a stream not yet completed. */
	const auto first_open = [&](bool read) {
		size_t i = 0;
		while (i < records.size() && (completed[i] || !signaled[i] || is_read[i] != read))
			i++;
		return i;
	};
	for (int step = 0; step < 20000; step++) {
		/* Half the steps post, an eighth may complete a read. */
		const unsigned what = next_random() % 8;
		if (what < 4 && queue.full() && queue.growth())
			cr_assert(queue.grow());
		if (what < 4 && !queue.full()) {
			const bool read = next_random() % 3 == 0;
			const SendClaim request{ctx(records.size() + 1), read ? kReadFlags : kWriteFlags, 8, true, false};
			OpRecord *record = read ? queue.claim<SendKind::read>(request, 1).record
						: queue.claim<SendKind::send_or_write>(request).record;
			records.push_back(record);
			is_read.push_back(read);
			signaled.push_back(record->signaled());
			completed.push_back(0);
			cr_assert(!read || record->signaled(), "every read is signaled");
			continue;
		}
		/* A read completes once every request before it has (they were
		 * sent first); any other once the others before it have. */
		const size_t read = first_open(true), other = first_open(false);
		bool read_may = read < records.size();
		for (size_t i = 0; read_may && i < read; i++)
			read_may = completed[i] || !signaled[i];
		const bool other_may = other < records.size();
		size_t seq;
		if (read_may && (!other_may || what == 4))
			seq = read;
		else if (other_may)
			seq = other;
		else
			continue;
		early += !is_read[seq] && read < seq;
		const Retired done = retire_copy(
			completion_of(*records[seq], IBV_WC_SUCCESS, is_read[seq] ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE));
		cr_assert_eq(done.context, ctx(seq + 1), "step %d: request %zu reported as %p", step, seq,
			     done.context);
		reported++;
		completed[seq] = 1;
		for (size_t i = seq; i-- > 0 && !completed[i] && !signaled[i];)
			completed[i] = 1;
		size_t open = 0;
		while (open < records.size() && completed[open])
			open++;
		cr_assert_geq(queue.outstanding(), records.size() - open,
			      "step %d: %lu slots held, but requests from %zu on (%zu) have not completed", step,
			      static_cast<unsigned long>(queue.outstanding()), open, records.size() - open);
	}
	cr_assert_gt(reported, 1500u, "%lu completions", static_cast<unsigned long>(reported));
	cr_assert_gt(early, 50u, "%lu completions ahead of a read", static_cast<unsigned long>(early));
}

} // namespace

Test(work_queue, on_iwarp_reads_completing_late_never_free_a_slot_in_flight)
{
	for (const bool room : {true, false})
		reads_completing_late(room);
}

Test(work_queue, an_orphan_stops_counting)
{
	Cells sends;
	SendQueue queue(4);
	RetireTargets targets;
	targets.counters[static_cast<size_t>(CounterKind::send)] = sends.cells();
	queue.set_targets(targets);
	cr_assert(queue.has_extras());
	retire_copy(completion_of(post(queue, ctx(1), kSendFlags)));
	queue.clear_targets();
	cr_assert_not(queue.counted());
	cr_assert_not(static_cast<bool>(queue.counter(CounterKind::send)));
	retire_copy(completion_of(post(queue, ctx(2), kSendFlags)));
	cr_assert_eq(sends.success.load(), 1u, "the orphan's completion counts nothing");
}

Test(work_queue, a_shared_send_budget_spans_its_queues)
{
	auto budget = std::make_shared<SendBudget>(3);
	SendQueue a(8), b(8);
	a.set_budget(budget);
	b.set_budget(budget);
	post(a, ctx(1), kSendFlags);
	OpRecord &a2 = post(a, ctx(2), kSendFlags);
	cr_assert_not(b.no_room(), "one request left in the budget");
	OpRecord &b1 = post(b, ctx(3), kSendFlags);
	cr_assert(a.no_room() && b.no_room(), "three in flight across both queues");
	cr_assert_not(a.full(), "each ring has room of its own");
	cr_assert_eq(budget->left(), 0u);

	retire_copy(completion_of(a2));	/* retires a's first request too */
	cr_assert_eq(budget->left(), 2u);
	cr_assert_not(b.no_room());
	Chain failed{&post(b, ctx(4), kSendFlags)};
	b.unclaim(failed.at(0));		/* posting it failed */
	cr_assert_eq(budget->left(), 2u);
	retire_copy(completion_of(b1, IBV_WC_WR_FLUSH_ERR));
	cr_assert_eq(budget->left(), 3u, "a flushed request gives its share back");
	{
		SendQueue orphan(4);
		orphan.set_budget(budget);
		post(orphan, ctx(5), kSendFlags);
		post(orphan, ctx(6), kSendFlags);
		cr_assert_eq(budget->left(), 1u);
	}
	cr_assert_eq(budget->left(), 3u, "a queue destroyed with requests in flight gives them back");
}

Test(work_queue, a_shared_receive_pool_takes_slots_back_in_any_order)
{
	OptionalLock lock{LockRank::shared_rx};
	SharedReceivePool queue(3);
	queue.set_pool_lock(&lock);
	cr_assert_eq(queue.free_slots(), 3u);
	OpRecord *taken[3];
	for (int i = 0; i < 3; i++) {
		taken[i] = queue.claim_slot(ctx(static_cast<uintptr_t>(i + 1)), kRecvFlags, 8, true);
		cr_assert_not_null(taken[i]);
	}
	cr_assert_eq(queue.free_slots(), 0u);
	cr_assert_null(queue.claim_slot(ctx(9), kRecvFlags, 8, true), "an empty pool gives nothing");
	const Retired second = retire_copy(completion_of(*taken[1], IBV_WC_SUCCESS, IBV_WC_RECV));
	cr_assert_eq(second.context, ctx(2));
	cr_assert_eq(queue.free_slots(), 1u);
	cr_assert_eq(queue.claim_slot(ctx(4), kRecvFlags, 8, true), taken[1], "the slot given back is taken next");
	queue.unclaim_slot(*taken[1]);
	retire_copy(completion_of(*taken[2], IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV));
	retire_copy(completion_of(*taken[0], IBV_WC_LOC_LEN_ERR, IBV_WC_RECV));
	cr_assert_eq(queue.free_slots(), 3u, "every slot back, whatever the status");
}

Test(work_queue, counter_kind_follows_the_cq_flags)
{
	cr_assert_eq(counter_kind(kSendFlags), CounterKind::send);
	cr_assert_eq(counter_kind(kRecvFlags), CounterKind::recv);
	cr_assert_eq(counter_kind(kReadFlags), CounterKind::read);
	cr_assert_eq(counter_kind(kWriteFlags), CounterKind::write);
	cr_assert_eq(counter_kind(FI_RMA | FI_REMOTE_WRITE), CounterKind::none);
}

/* The send queue's posting protocol (SendQueue::claim), which every send,
 * inject, RMA request, credit write and the drain marker go through. */

/* Whatever kind of request is signaled, its completion retires the reads
 * before it, so the count of unsignaled reads starts again: the read that
 * reaches the negotiated limit then always has a signaled request behind
 * it to wait for. The inject path's own instantiation is among them. */
Test(send_protocol, every_signaled_request_restarts_the_unsignaled_reads)
{
	SendQueue queue(64);
	queue.set_signal_interval(100);
	const SendClaim read{ctx(1), FI_RMA | FI_READ, 8, false, false};
	const SendClaim counted_inject{nullptr, FI_SEND | FI_MSG, 8, false, true};
	Claimed c = queue.claim<SendKind::read>(read, 4);
	cr_assert_eq(c.send_flags & IBV_SEND_SIGNALED, 0u);
	cr_assert_eq(queue.poster_view().unsignaled_reads, 1u);
	/* An inject a counter counts (post_inline_slow signals it). */
	c = queue.claim<SendKind::send_or_write, false>(counted_inject, 1, 0);
	cr_assert_neq(c.send_flags & IBV_SEND_SIGNALED, 0u);
	cr_assert_eq(queue.poster_view().unsignaled_reads, 0u, "a signaled inject retires the reads before it");
	cr_assert_eq(queue.poster_view().unsignaled, 0u);
	/* A send that wants its completion. */
	queue.claim<SendKind::read>(read, 4);
	queue.claim<SendKind::send_or_write>(SendClaim{ctx(2), FI_SEND | FI_MSG, 8, true, true});
	cr_assert_eq(queue.poster_view().unsignaled_reads, 0u);
	/* A credit write at its interval (1: a shared context's). */
	queue.claim<SendKind::read>(read, 4);
	queue.set_signal_interval(1);
	queue.claim<SendKind::internal>(SendClaim{nullptr, 0, 8, false, false});
	cr_assert_eq(queue.poster_view().unsignaled_reads, 0u);
	queue.set_signal_interval(100);
	/* Every read_every-th read signals itself. */
	for (int i = 0; i < 3; i++)
		cr_assert_eq(queue.claim<SendKind::read>(read, 4).send_flags & IBV_SEND_SIGNALED, 0u);
	cr_assert_neq(queue.claim<SendKind::read>(read, 4).send_flags & IBV_SEND_SIGNALED, 0u);
	cr_assert_eq(queue.poster_view().unsignaled_reads, 0u);
}

/* Every interval-th request is signaled, counted from the last signaled
 * one: a request that signals itself restarts the count, and an interval
 * set anew (the ring grew) counts from there too. */
Test(send_protocol, every_interval_th_request_is_signaled_from_the_last_signaled)
{
	SendQueue queue(64);
	queue.set_signal_interval(4);
	const SendClaim write{nullptr, FI_RMA | FI_WRITE, 8, false, false};
	auto signaled = [&](const SendClaim &request) {
		return (queue.claim<SendKind::send_or_write>(request).send_flags & IBV_SEND_SIGNALED) != 0;
	};
	for (int i = 0; i < 3; i++)
		cr_assert_not(signaled(write), "request %d", i);
	cr_assert(signaled(write), "the 4th");
	cr_assert_eq(queue.last_signaled_end(), 4u);
	cr_assert_not(signaled(write));
	cr_assert(signaled(SendClaim{ctx(1), FI_SEND | FI_MSG, 8, true, true}), "a reported send signals itself");
	cr_assert_eq(queue.last_signaled_end(), 6u);
	for (int i = 0; i < 3; i++)
		cr_assert_not(signaled(write), "request %d after the reported one", i);
	queue.set_signal_interval(2);
	cr_assert_eq(queue.last_signaled_end(), 6u, "a new interval keeps the last signaled request");
	cr_assert(signaled(write), "the new interval counts from the last signaled request");
	cr_assert_not(signaled(write));
	cr_assert(signaled(write));
	queue.set_signal_interval(0);
	cr_assert(signaled(write), "an interval of 0 is 1: every request");
	queue.set_signal_interval(1u << 20);
	cr_assert_eq(queue.last_signaled_end(), 13u);
	for (int i = 0; i < 50; i++)
		cr_assert_not(signaled(write), "a wide interval, request %d", i);
}

/* A write after reads carries the fence once; the provider's own writes
 * neither carry it nor use it up for the application's next one. */
Test(send_protocol, the_fence_after_reads_is_the_applications_alone)
{
	SendQueue queue(64);
	queue.set_signal_interval(100);
	const SendClaim write{nullptr, FI_RMA | FI_WRITE, 8, false, false};
	cr_assert_eq(queue.claim<SendKind::send_or_write>(write, 1, IBV_SEND_FENCE).send_flags, 0u, "no read before it");
	cr_assert_not(queue.reads_unfenced());
	queue.claim<SendKind::read>(SendClaim{ctx(1), FI_RMA | FI_READ, 8, false, false}, 8);
	cr_assert(queue.reads_unfenced(), "the endpoint's fast paths are left until a fence (SlowTx::fence)");
	cr_assert_eq(queue.claim<SendKind::internal>(SendClaim{nullptr, 0, 8, false, false}).send_flags, 0u);
	cr_assert(queue.reads_unfenced(), "the provider's own write fences nothing");
	const Claimed inject = queue.claim<SendKind::send_or_write, false>(write, 1, IBV_SEND_FENCE);
	cr_assert_eq(inject.send_flags, IBV_SEND_FENCE);
	cr_assert_not(queue.reads_unfenced());
	cr_assert_eq(queue.claim<SendKind::send_or_write>(write, 1, IBV_SEND_FENCE).send_flags, 0u, "fenced once");
}

/* The record says what the completion reports, and a read's mark covers
 * itself: its completion, or a later one's, gives its read budget back. */
Test(send_protocol, a_claimed_record_reports_and_retires_what_it_was_given)
{
	SendQueue queue(64);
	const Claimed read = queue.claim<SendKind::read>(SendClaim{ctx(7), FI_RMA | FI_READ, 64, true, true}, 8);
	cr_assert_eq(read.record->context, ctx(7));
	cr_assert_eq(read.record->flags, static_cast<uint32_t>(FI_RMA | FI_READ));
	cr_assert_eq(read.record->len, 64u);
	cr_assert(read.record->report());
	cr_assert_eq(read.record->read_mark, 1u);
	cr_assert_eq(queue.reads_in_flight(), 1u);
	cr_assert_eq(queue.poster_view().signaled_head, 1u);
	cr_assert(queue.signaled_outstanding());
	const Retired done = retire_copy(completion_of(*read.record, IBV_WC_SUCCESS, IBV_WC_RDMA_READ));
	cr_assert_eq(done.context, ctx(7));
	cr_assert_eq(queue.reads_in_flight(), 0u);
	cr_assert_not(queue.signaled_outstanding());
}

/* After soft-iWARP's flush (Domain::synchronous_flush): an unsignaled run
 * that no completion will ever retire goes at once; a signaled request or
 * a read still out keeps the queue waiting, since its completion may come. */
Test(send_protocol, after_a_synchronous_flush_only_an_unsignaled_run_without_reads_retires_by_itself)
{
	SendQueue queue(64);
	queue.set_signal_interval(100);
	const SendClaim write{nullptr, FI_RMA | FI_WRITE, 8, false, false};
	for (int i = 0; i < 5; i++)
		queue.claim<SendKind::send_or_write>(write);
	cr_assert_not(queue.signaled_outstanding());
	cr_assert(queue.retire_completed_unsignaled());
	cr_assert_eq(queue.outstanding(), 0u);

	/* A signaled request out: its completion (flushed or not) retires the run. */
	queue.claim<SendKind::send_or_write>(write);
	queue.claim<SendKind::send_or_write>(SendClaim{ctx(1), FI_SEND | FI_MSG, 8, true, true});
	queue.claim<SendKind::send_or_write>(write);
	cr_assert_not(queue.retire_completed_unsignaled());
	cr_assert_eq(queue.outstanding(), 3u, "nothing retired while a signaled request is out");

	/* An unsignaled read out: its response may still come. */
	SendQueue reads(64);
	reads.set_signal_interval(100);
	reads.claim<SendKind::read>(SendClaim{nullptr, FI_RMA | FI_READ, 8, false, false}, 8);
	reads.claim<SendKind::send_or_write>(write);
	cr_assert_eq(reads.reads_in_flight(), 1u);
	cr_assert_not(reads.retire_completed_unsignaled());
	cr_assert_eq(reads.outstanding(), 2u);
}

/*
 * The undo: a chain whose third request fails to post (ibv_post_send names
 * it) leaves the queue as if only the first two had been claimed. A twin
 * queue that claimed the same requests but never the failed ones is the
 * reference: every counter a claim moves (poster_view) must match, and so
 * must what the next claims decide, signaled and fenced, and the budget.
 * The chain holds what moves them all: a read, signaled requests (one by
 * its report, one by the read interval), a fenced write, a provider's own
 * write, across the send interval.
 */
namespace {

struct Step {
	SendKind kind;
	SendClaim request;
};

constexpr uint32_t kUndoInterval = 5;

Claimed claim_step(SendQueue &queue, const Step &step)
{
	constexpr uint32_t kReadEvery = 3;
	switch (step.kind) {
	case SendKind::read:
		return queue.claim<SendKind::read>(step.request, kReadEvery);
	case SendKind::internal:
		return queue.claim<SendKind::internal>(step.request);
	case SendKind::send_or_write:
		break;
	}
	return queue.claim<SendKind::send_or_write>(step.request, 1, IBV_SEND_FENCE);
}

ibv_send_wr wr_of(const Step &step, const Claimed &claimed)
{
	ibv_send_wr wr{};
	wr.wr_id = reinterpret_cast<uintptr_t>(claimed.record);
	wr.opcode = step.kind == SendKind::read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
	wr.send_flags = claimed.send_flags;
	return wr;
}

} // namespace

Test(send_protocol, a_chain_that_fails_at_its_third_request_is_undone_whole)
{
	const SendClaim read{ctx(1), FI_RMA | FI_READ, 8, false, false};
	const SendClaim write{ctx(2), FI_RMA | FI_WRITE, 8, false, false};
	const SendClaim reported{ctx(3), FI_SEND | FI_MSG, 8, true, true};
	const SendClaim own{nullptr, 0, 8, false, false};
	const std::vector<Step> before = {{SendKind::send_or_write, write}, {SendKind::read, read}, {SendKind::send_or_write, reported},
					  {SendKind::read, read}, {SendKind::send_or_write, write}, {SendKind::read, read}};
	const std::vector<Step> chain = {{SendKind::read, read},	  {SendKind::internal, own},
					 {SendKind::send_or_write, write},	  /* fails here: fenced after the reads */
					 {SendKind::read, read},	  {SendKind::send_or_write, reported},
					 {SendKind::read, read},	  {SendKind::send_or_write, write}};
	const std::vector<Step> after = {{SendKind::send_or_write, write}, {SendKind::read, read}, {SendKind::read, read},
					 {SendKind::send_or_write, write}, {SendKind::read, read}, {SendKind::internal, own},
					 {SendKind::send_or_write, write}, {SendKind::send_or_write, write}, {SendKind::read, read}};
	/* Where the history starts: fresh, after requests retired, and after
	 * the ring grew with requests outstanding. */
	for (int start = 0; start < 3; start++) {
		auto budget = std::make_shared<SendBudget>(64);
		SendQueue undone(64, 0, 4), twin(64, 0, 4);
		undone.set_budget(budget);
		twin.set_budget(std::make_shared<SendBudget>(64));
		undone.set_signal_interval(kUndoInterval);
		twin.set_signal_interval(kUndoInterval);
		for (SendQueue *queue : {&undone, &twin}) {
			for (const Step &step : before) {
				if (queue->full())
					cr_assert(queue->grow());
				const Claimed c = claim_step(*queue, step);
				if (start == 1 && (c.send_flags & IBV_SEND_SIGNALED))
					retire_copy(completion_of(*c.record)); /* retires what came before too */
			}
			if (start == 2)
				cr_assert(queue->grow());
		}
		std::vector<ibv_send_wr> wr;
		wr.reserve(chain.size());
		for (size_t i = 0; i < chain.size(); i++) {
			if (undone.full())
				cr_assert(undone.grow());
			wr.push_back(wr_of(chain[i], claim_step(undone, chain[i])));
			if (i < 2) {
				if (twin.full())
					cr_assert(twin.grow());
				claim_step(twin, chain[i]);
			}
		}
		for (size_t i = 0; i + 1 < wr.size(); i++)
			wr[i].next = &wr[i + 1];
		cr_assert_neq(wr[2].send_flags & IBV_SEND_FENCE, 0u, "the chain moves the fence mark");
		bool signaled_after = false;
		for (size_t i = 2; i < wr.size(); i++)
			signaled_after = signaled_after || (wr[i].send_flags & IBV_SEND_SIGNALED);
		cr_assert(signaled_after, "the chain signals after its failure");
		cr_assert_neq(undone.poster_view(), twin.poster_view());

		undone.unclaim(&wr[2]); /* ibv_post_send named the third */

		const SendQueue::PosterView u = undone.poster_view(), t = twin.poster_view();
		cr_assert(u == t,
			  "start %d: head %lu/%lu, signaled head %lu/%lu, unsignaled %u/%u, reads %u/%u, "
			  "unsignaled reads %u/%u, unfenced %d/%d",
			  start, u.head, t.head, u.signaled_head, t.signaled_head, u.unsignaled, t.unsignaled,
			  u.reads_posted, t.reads_posted, u.unsignaled_reads, t.unsignaled_reads, u.reads_unfenced,
			  t.reads_unfenced);
		cr_assert_eq(budget->left(), 64u - undone.outstanding(), "the budget gives back what was unclaimed");
		cr_assert_eq(undone.reads_in_flight(), twin.reads_in_flight());
		for (size_t i = 0; i < after.size(); i++) {
			for (SendQueue *queue : {&undone, &twin})
				if (queue->full())
					cr_assert(queue->grow());
			const Claimed a = claim_step(undone, after[i]), b = claim_step(twin, after[i]);
			cr_assert_eq(a.send_flags, b.send_flags, "start %d, claim %zu after the undo", start, i);
			cr_assert_eq(a.record->seq_and_report, b.record->seq_and_report);
			cr_assert_eq(a.record->read_mark, b.record->read_mark);
		}
	}
}

/* iWARP's remote CQ data (nd_credits.h): a receive's slot, written by the
 * peer before its message, makes the receive's completion read as one with
 * immediate data; the slot is cleared once read, and a slot written for
 * another receive is not taken; with a counter bound as without. */
Test(work_queue, a_receive_takes_the_remote_cq_data_in_its_slot)
{
	for (bool counted : {false, true}) {
		ReceiveQueue queue(4);
		const uint32_t slots = queue.ring_size();
		std::vector<uint64_t> data_slots(slots * kDataSlotWords, 0);
		Cells received;
		RetireTargets targets;
		targets.data_slots = data_slots.data();
		if (counted)
			targets.counters[static_cast<size_t>(CounterKind::recv)] = received.cells();
		queue.set_targets(targets);
		cr_assert_not(queue.retires_inline(), "RoCE's inline path never looks at slots");
		cr_assert_eq(queue.retire_path() == WorkQueue::RetirePath::with_slot, !counted);
		for (uint64_t k = 0; k < 3 * slots; k++) {
			OpRecord &r = post(queue, ctx(k + 1), kRecvFlags);
			uint64_t *slot = &data_slots[(k & (queue.ring_size() - 1)) * kDataSlotWords];
			const int what = static_cast<int>(k % 4); /* none, message, write, someone else's */
			if (what == 1)
				slot[0] = DataSlot::encode(DataSlotKind::message, k, 0xc0de0000u + static_cast<uint32_t>(k));
			else if (what == 2)
				slot[0] = DataSlot::encode(DataSlotKind::write, k, 0xfeed0000u + static_cast<uint32_t>(k));
			else if (what == 3)
				slot[0] = DataSlot::encode(DataSlotKind::message, k + 1, 1);
			slot[1] = 4096;
			ibv_wc wc = completion_of(r, IBV_WC_SUCCESS, IBV_WC_RECV, 16);
			const Retired done = WorkQueue::retire(wc); /* writes the data into wc */
			cr_assert_eq(done.context, ctx(k + 1));
			cr_assert_eq(done.flags, kRecvFlags);
			cr_assert_eq(slot[0], 0u, "receive %llu: the slot is cleared once read", (unsigned long long)k);
			if (what == 1 || what == 2) {
				cr_assert(wc.wc_flags & IBV_WC_WITH_IMM, "receive %llu carries data", (unsigned long long)k);
				cr_assert_eq(ntohl(wc.imm_data), (what == 1 ? 0xc0de0000u : 0xfeed0000u) + k);
				cr_assert_eq(wc.opcode, what == 1 ? IBV_WC_RECV : IBV_WC_RECV_RDMA_WITH_IMM);
				cr_assert_eq(wc.byte_len, what == 1 ? 16u : 4096u, "a write reports its length");
			} else {
				cr_assert_not(wc.wc_flags & IBV_WC_WITH_IMM, "receive %llu: no data of its own",
					      (unsigned long long)k);
				cr_assert_eq(wc.opcode, IBV_WC_RECV);
				cr_assert_eq(wc.byte_len, 16u);
			}
		}
		cr_assert_eq(queue.outstanding(), 0u);
		cr_assert_eq(received.success.load(), counted ? 3u * slots : 0u);
	}
}
