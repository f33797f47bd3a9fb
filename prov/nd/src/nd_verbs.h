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

} // namespace nd

#endif /* ND_VERBS_H */
