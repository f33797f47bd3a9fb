/* nd_multi_recv.cpp: FI_MULTI_RECV buffers; see nd_multi_recv.h. */
#include "nd_multi_recv.h"
#include "nd_verbs.h"

#include <cstring>

namespace nd {

int MultiRecv::post_to_device(MultiRecv &m, ibv_recv_wr &wr) noexcept
{
	ibv_recv_wr *bad = nullptr;
	if (m.srq)
		return post_srq_recv(m.srq, &wr, &bad);
	if (m.qp)
		return post_recv(m.qp, &wr, &bad);
	return ENODEV;
}

int MultiRecv::submit(OpRecord *record, const ibv_sge *sge, size_t count, bool multi)
{
	if (busy()) {
		held.push_back(Held{record, std::vector<ibv_sge>(sge, sge + count), multi});
		return 0;
	}
	return multi ? start(record, *sge) : post_plain(record, sge, count);
}

/* Posts a receive that is not a multi-receive buffer. */
int MultiRecv::post_plain(OpRecord *record, const ibv_sge *sge, size_t count)
{
	ibv_recv_wr wr{};
	wr.wr_id = reinterpret_cast<uintptr_t>(record);
	wr.sg_list = const_cast<ibv_sge *>(sge);
	wr.num_sge = static_cast<int>(count);
	return post_wr(*this, wr);
}

/* Makes `record` the active buffer and posts all of it. */
int MultiRecv::start(OpRecord *record, const ibv_sge &sge)
{
	active = record;
	base = reinterpret_cast<uint8_t *>(static_cast<uintptr_t>(sge.addr));
	size = sge.length;
	used = 0;
	lkey = sge.lkey;
	int rc = post_rest();
	if (rc)
		active = nullptr;
	return rc;
}

/* Posts the active buffer's free space, under its one record. */
int MultiRecv::post_rest() noexcept
{
	ibv_sge sge;
	sge.addr = reinterpret_cast<uintptr_t>(base + used);
	sge.length = static_cast<uint32_t>(size - used);
	sge.lkey = lkey;
	ibv_recv_wr wr{};
	wr.wr_id = reinterpret_cast<uintptr_t>(active);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return post_wr(*this, wr);
}

MultiRecv::Placed MultiRecv::complete(OpRecord &record, const ibv_wc &wc) noexcept
{
	assert_held(lock, "MultiRecv::complete");
	if (&record != active) {
		/* Only the active buffer has a request on the device. */
		ND_WARN(FI_LOG_CQ, "multi-receive: a completion for record %p, which is not the buffer being filled\n",
			static_cast<void *>(&record));
		return {nullptr, true};
	}
	Placed placed{base + used, false};
	if (wc.status == IBV_WC_SUCCESS) {
		used += wc.byte_len;
		if (size - used >= min_free && size > used) {
			int rc = post_rest();
			if (!rc)
				return placed;
			ND_WARN(FI_LOG_CQ, "multi-receive: reposting buffer %p: %s; it is released early\n",
				static_cast<void *>(base), std::strerror(rc));
		}
	}
	placed.released = true;
	active = nullptr;
	pump();
	return placed;
}

void MultiRecv::pump() noexcept
{
	assert_held(lock, "MultiRecv::pump");
	while (!active && ready && !held.empty()) {
		Held next = std::move(held.front());
		held.pop_front();
		const int rc = next.multi ? start(next.record, next.sge.front())
					  : post_plain(next.record, next.sge.data(), next.sge.size());
		if (rc)
			ND_WARN(FI_LOG_EP_DATA, "posting a receive that waited behind a multi-receive buffer: %s\n",
				std::strerror(rc));
	}
}

} // namespace nd
