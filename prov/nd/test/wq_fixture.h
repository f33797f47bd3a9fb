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

namespace nd::test {

/* Posts one request as the endpoint does: fills the next slot, counts a
 * read, marks the record with the reads posted so far, commits. */
inline OpRecord &post(WorkQueue &queue, void *context, uint32_t flags, bool report = true)
{
	OpRecord &record = queue.next();
	record.context = context;
	record.flags = flags;
	record.len = 8;
	record.set_report(report);
	if (flags & FI_READ)
		queue.reads_posted++;
	record.read_mark = queue.reads_posted;
	queue.count_budget();
	queue.commit();
	return record;
}

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
