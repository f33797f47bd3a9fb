/* Unit tests: multi-receive buffers on a receive queue (nd_multi_recv.h),
 * fed recorded work completions: messages pack into one buffer until less
 * than its minimum is left, the buffer is released, and what waited behind
 * it goes to the device then, never before, since the device would fill it
 * out of order. (On a device: guest_multi_recv.cpp.) */
#include <criterion/criterion.h>

#include "nd_multi_recv.h"
#include "nd_wq.h"
#include "wq_fixture.h"

#include <rdma/fabric.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

using namespace nd;
using nd::test::completion_of;
using nd::test::retire_copy;

namespace {

constexpr uint32_t kRecvFlags = FI_RECV | FI_MSG;

void *ctx(uintptr_t n) { return reinterpret_cast<void *>(n); }

} // namespace

namespace {

/* What reached the "device": each work request's record and its one SGE. */
struct Posted {
	uintptr_t wr_id;
	uint64_t addr;
	uint32_t length;
};
std::vector<Posted> posted;

int record_post(MultiRecv &, ibv_recv_wr &wr) noexcept
{
	posted.push_back({wr.wr_id, wr.sg_list[0].addr, wr.sg_list[0].length});
	return 0;
}

/* Posts a receive as the endpoint does when the queue has a MultiRecv. */
OpRecord &post_recv(ReceiveQueue &queue, void *context, uint8_t *buf, uint32_t len, bool multi)
{
	OpRecord &record = queue.claim_recv(context, kRecvFlags | (multi ? kPlacedByNd : 0), len, true);
	ibv_sge sge{reinterpret_cast<uintptr_t>(buf), len, 7};
	cr_assert_eq(queue.multi()->submit(&record, &sge, 1, multi), 0);
	return record;
}

ibv_wc received(const OpRecord &record, uint32_t bytes, ibv_wc_status status = IBV_WC_SUCCESS)
{
	ibv_wc wc = completion_of(record, status, IBV_WC_RECV);
	wc.byte_len = bytes;
	return wc;
}

} // namespace

Test(multi_recv, messages_pack_into_one_buffer_until_it_is_released)
{
	posted.clear();
	ReceiveQueue queue(8);
	queue.set_multi(std::make_unique<MultiRecv>(16));
	queue.multi()->post_wr = record_post;
	queue.multi()->ready = true;
	uint8_t buffer[100], other[32];
	OpRecord &multi = post_recv(queue, ctx(1), buffer, sizeof(buffer), true);
	OpRecord &next = post_recv(queue, ctx(2), other, sizeof(other), false);
	cr_assert_eq(posted.size(), 1u, "nothing is posted behind a multi-receive buffer");
	cr_assert_eq(posted[0].length, 100u);

	Placement at;
	Retired first = retire_copy(received(multi, 40), &at);
	cr_assert_eq(first.context, ctx(1));
	cr_assert_eq(at.buf, buffer);
	cr_assert_not(first.flags & FI_MULTI_RECV);
	cr_assert_eq(queue.outstanding(), 2u, "the buffer keeps its slot");
	cr_assert_eq(posted.size(), 2u);
	cr_assert_eq(posted[1].wr_id, reinterpret_cast<uintptr_t>(&multi), "the rest, under the same record");
	cr_assert_eq(posted[1].addr, reinterpret_cast<uintptr_t>(buffer + 40));
	cr_assert_eq(posted[1].length, 60u);

	Retired last = retire_copy(received(multi, 50), &at);
	cr_assert_eq(at.buf, buffer + 40, "right after the first message");
	cr_assert(last.flags & FI_MULTI_RECV, "10 bytes left < 16: released");
	cr_assert_eq(queue.outstanding(), 1u);
	cr_assert_eq(posted.size(), 3u, "the receive behind it is posted now");
	cr_assert_eq(posted[2].wr_id, reinterpret_cast<uintptr_t>(&next));

	at.buf = nullptr;
	Retired plain = retire_copy(received(next, 8), &at);
	cr_assert_eq(plain.context, ctx(2));
	cr_assert_null(at.buf, "a plain receive places nothing");
	cr_assert_eq(queue.outstanding(), 0u);
}

Test(multi_recv, a_flush_releases_the_buffer_and_what_waited_behind_it_follows)
{
	posted.clear();
	ReceiveQueue queue(8);
	queue.set_multi(std::make_unique<MultiRecv>(0));
	queue.multi()->post_wr = record_post;
	queue.multi()->ready = false; /* before the connection: everything waits */
	uint8_t a[64], b[64], c[8];
	OpRecord &first = post_recv(queue, ctx(1), a, sizeof(a), true);
	OpRecord &second = post_recv(queue, ctx(2), b, sizeof(b), true);
	OpRecord &plain = post_recv(queue, ctx(3), c, sizeof(c), false);
	cr_assert(posted.empty());
	{
		std::lock_guard<Mutex> hold(queue.multi()->lock);
		queue.multi()->ready = true;
		queue.multi()->pump();
	}
	cr_assert_eq(posted.size(), 1u, "the first buffer only");

	Retired full = retire_copy(received(first, 64));
	cr_assert(full.flags & FI_MULTI_RECV, "with no minimum, released when full");
	cr_assert_eq(posted.size(), 2u, "then the second buffer, and only it");
	cr_assert_eq(posted[1].wr_id, reinterpret_cast<uintptr_t>(&second));

	Retired flushed = retire_copy(received(second, 0, IBV_WC_WR_FLUSH_ERR));
	cr_assert(flushed.flags & FI_MULTI_RECV, "a flush releases the buffer");
	cr_assert_eq(posted.size(), 3u, "and what waited goes to the queue pair, to be flushed too");
	cr_assert_eq(posted[2].wr_id, reinterpret_cast<uintptr_t>(&plain));
	retire_copy(received(plain, 0, IBV_WC_WR_FLUSH_ERR));
	cr_assert_eq(queue.outstanding(), 0u);
}
