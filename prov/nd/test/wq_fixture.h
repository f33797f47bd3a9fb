/*
 * wq_fixture.h: requests posted to a work queue and their work completions,
 * recorded on the host, as the unit tests of retirement and of the CQ's
 * completion path feed them.
 */
#ifndef ND_TEST_WQ_FIXTURE_H
#define ND_TEST_WQ_FIXTURE_H

#include "nd_wq.h"

#include <infiniband/verbs.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace nd::test {

/* Posts one request as the endpoint does, through the queue's protocol
 * (claim, claim_recv), never signaled by the interval: a read (counted) or
 * a send or write, signaled where `signal` says it must complete by
 * itself; or a receive. */
inline OpRecord &post(SendQueue &queue, void *context, uint32_t flags, bool report = true, bool signal = false)
{
	const SendClaim request{context, flags, 8, report, signal};
	if (flags & FI_READ)
		return *queue.claim<SendKind::read>(request, UINT32_MAX, UINT32_MAX).record;
	return *queue.claim<SendKind::send_or_write>(request, UINT32_MAX).record;
}
inline OpRecord &post(ReceiveQueue &queue, void *context, uint32_t flags, bool report = true)
{
	return queue.claim_recv(context, flags, 8, report);
}

/* The work requests of claimed send-queue records, chained, as a poster
 * built them (reads by their CQ flags). */
struct Chain {
	std::vector<ibv_send_wr> wr;
	explicit Chain(std::initializer_list<const OpRecord *> records) : wr(records.size())
	{
		size_t i = 0;
		for (const OpRecord *record : records) {
			ibv_send_wr &w = wr[i];
			w = ibv_send_wr{};
			w.wr_id = reinterpret_cast<uintptr_t>(record);
			w.opcode = (record->flags & FI_READ) ? IBV_WR_RDMA_READ : IBV_WR_SEND;
			w.send_flags = record->signaled() ? IBV_SEND_SIGNALED : 0;
			if (i)
				wr[i - 1].next = &w;
			++i;
		}
	}
	ibv_send_wr *at(size_t i) { return &wr[i]; }
};

inline ibv_wc completion_of(const OpRecord &record, ibv_wc_status status = IBV_WC_SUCCESS,
			    ibv_wc_opcode opcode = IBV_WC_SEND, uint32_t bytes = 0)
{
	ibv_wc wc{};
	wc.byte_len = bytes;
	wc.wr_id = reinterpret_cast<uintptr_t>(&record);
	wc.status = status;
	wc.opcode = opcode;
	return wc;
}

/* WorkQueue::retire of a copy: retire writes into the completion it is
 * given (iWARP's remote data), and a test's completion is often made in
 * the call. */
inline Retired retire_copy(ibv_wc wc, Placement *placement = nullptr)
{
	return WorkQueue::retire(wc, placement);
}

} // namespace nd::test

#endif /* ND_TEST_WQ_FIXTURE_H */
