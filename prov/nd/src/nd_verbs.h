/*
 * nd_verbs.h: RAII ownership of verbs and rdma_cm objects.
 *
 * Each handle is a std::unique_ptr with a deleter that calls the matching
 * destroy function, so that an object is released exactly once and on every
 * path. Declare members in creation order (context, PD, CQ, QP): C++
 * destroys in reverse, which is the order verbs requires.
 */
#ifndef ND_VERBS_H
#define ND_VERBS_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstdint>
#include <memory>

namespace nd {

template <typename T, auto Destroy>
struct VerbsDeleter {
	void operator()(T *object) const noexcept
	{
		if (object)
			(void)Destroy(object);
	}
};

template <typename T, auto Destroy>
using VerbsHandle = std::unique_ptr<T, VerbsDeleter<T, Destroy>>;

using UniquePd = VerbsHandle<ibv_pd, ibv_dealloc_pd>;
using UniqueCq = VerbsHandle<ibv_cq, ibv_destroy_cq>;
using UniqueQp = VerbsHandle<ibv_qp, ibv_destroy_qp>;
using UniqueContext = VerbsHandle<ibv_context, ibv_close_device>;
using UniqueEventChannel = VerbsHandle<rdma_event_channel, rdma_destroy_event_channel>;
using UniqueCmId = VerbsHandle<rdma_cm_id, rdma_destroy_id>;

/* The device list from ibv_get_device_list, freed with its function. */
struct DeviceListDeleter {
	void operator()(ibv_device **list) const noexcept { ibv_free_device_list(list); }
};
using UniqueDeviceList = std::unique_ptr<ibv_device *[], DeviceListDeleter>;

/* rdma_get_devices hands out librdmacm's own contexts (the ones rdma_cm ids
 * and their QPs use); rdma_free_devices returns them. */
struct CmDeviceListDeleter {
	void operator()(ibv_context **list) const noexcept { rdma_free_devices(list); }
};
using UniqueCmDeviceList = std::unique_ptr<ibv_context *[], CmDeviceListDeleter>;

/*
 * Posting and polling, as ThreadSanitizer must see them. A poster writes a
 * request's record and posts the request; the device completes it; a
 * reader (maybe on another thread) polls the completion and reads the
 * record. The device carries that happens-before (libibverbs' barriers
 * around the doorbell and the CQ ring), where ThreadSanitizer cannot see
 * it: in its build, every request posted releases its wr_id and every
 * completion polled acquires it. Other builds call libibverbs and nothing
 * else.
 */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ND_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) && !defined(ND_TSAN)
#define ND_TSAN 1
#endif
#ifdef ND_TSAN
extern "C" void __tsan_acquire(void *addr);
extern "C" void __tsan_release(void *addr);
template <typename WorkRequest>
inline void hand_to_device(const WorkRequest *wr) noexcept
{
	for (; wr; wr = wr->next)
		__tsan_release(reinterpret_cast<void *>(static_cast<uintptr_t>(wr->wr_id)));
}
inline void take_from_device(const ibv_wc *wc, int got) noexcept
{
	for (int i = 0; i < got; i++)
		__tsan_acquire(reinterpret_cast<void *>(static_cast<uintptr_t>(wc[i].wr_id)));
}
#else
template <typename WorkRequest>
inline void hand_to_device(const WorkRequest *) noexcept {}
inline void take_from_device(const ibv_wc *, int) noexcept {}
#endif

inline int post_send(ibv_qp *qp, ibv_send_wr *wr, ibv_send_wr **bad) noexcept
{
	hand_to_device(wr);
	return ibv_post_send(qp, wr, bad);
}
inline int post_recv(ibv_qp *qp, ibv_recv_wr *wr, ibv_recv_wr **bad) noexcept
{
	hand_to_device(wr);
	return ibv_post_recv(qp, wr, bad);
}
inline int post_srq_recv(ibv_srq *srq, ibv_recv_wr *wr, ibv_recv_wr **bad) noexcept
{
	hand_to_device(wr);
	return ibv_post_srq_recv(srq, wr, bad);
}
inline int poll_cq(ibv_cq *cq, int entries, ibv_wc *wc) noexcept
{
	const int got = ibv_poll_cq(cq, entries, wc);
	take_from_device(wc, got);
	return got;
}

} // namespace nd

#endif /* ND_VERBS_H */
