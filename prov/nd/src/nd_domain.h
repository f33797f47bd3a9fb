/*
 * nd_domain.h: the domain (fid_domain): one RDMA device, opened through
 * librdmacm's own device context (the one its rdma_cm ids and their queue
 * pairs use), with one protection domain for everything opened under it.
 */
#ifndef ND_DOMAIN_H
#define ND_DOMAIN_H

#include "nd.h"
#include "nd_cm_data.h"
#include "nd_device.h"
#include "nd_mr_cache.h"
#include "nd_mw.h"
#include "nd_verbs.h"

#include <rdma/fi_domain.h>

#include <mutex>

namespace nd {

struct Fabric;

struct Domain {
	fid_domain domain;			/* first: from_fid<Domain> */
	Fabric *fabric;
	fi_info *info;				/* fi_dupinfo of what opened it */
	ibv_context *context;			/* librdmacm's; held by device_list */
	UniqueCmDeviceList device_list;
	UniquePd pd;
	/* nullptr when caching is off or no monitor runs; declared after pd:
	 * its registrations go first. */
	std::unique_ptr<RegistrationCache> mr_cache;
	/* Where peers reach cached registrations through (nd_mw.h): opened
	 * on the first region that peers may reach; declared after the cache,
	 * so that its windows go before the registrations they are bound to. */
	bool windows_capable;			/* the device has type 1 windows */
	/* Opened once (memory_windows), whether or not it worked: a domain
	 * whose windows failed to open is told once and goes on without. */
	Once windows_opened;
	std::unique_ptr<MemoryWindows> windows;
	ChildCount children;
	/* The adapter's maximum read limits (max_qp_rd_atom, _init_rd_atom). */
	cm::ReadLimits adapter_read_limits;
	/* What the application may send with connect, accept and reject. */
	CmDataLimits cm_limits;
	bool iwarp;
	/* soft-iWARP's: moving a queue pair to the error state completes
	 * every request still on it into the CQ before ibv_modify_qp returns,
	 * and a request posted afterwards never completes (it stays in the
	 * ring the library shares with the kernel). Endpoint::post_drain_marker
	 * decides by it. */
	bool synchronous_flush;
	/* The adapter's 64-bit fetch-and-add and compare-and-swap
	 * (nd_atomic.h); never on iWARP. */
	bool atomics;
	/* What the data path sizes and locks by. */
	int max_cqe;
	int max_srq_wr;
	uint32_t max_read_sge;			/* max_sge_rd: local buffers of one RDMA read */
	uint8_t min_rnr_timer;			/* FI_ND_MIN_RNR_TIMER, read at open */
	uint8_t rnr_retry;			/* FI_ND_RNR_RETRY, read at open */
	uint8_t retry_count;			/* FI_ND_RETRY_COUNT, read at open */
	int ack_timeout;			/* FI_ND_ACK_TIMEOUT; -1: rdma_cm's */
	/* Read at open too: reading every parameter at each connection cost
	 * 11 thousand instructions a call (a getenv scan each), two calls a
	 * connection. */
	int resolve_timeout_ms;			/* FI_ND_RESOLVE_TIMEOUT_MS */
	size_t tagged_msg_size;			/* FI_ND_TAGGED_MSG_SIZE */
	/* Seconds requests may stand still before nd ends their connection
	 * (FI_ND_PEER_TIMEOUT, StallWatch in nd_cq.h); 0 where the transport
	 * gives up on a silent peer by itself (retry count below 7). */
	int stall_timeout_s;
	/* Where the device counts the not-ready NAKs it receives
	 * (not_ready_naks_path), with stall_timeout_s; empty where unknown. */
	std::string not_ready_naks_path;
	/* ofi_rxm's flow control (nd_flow_ctrl.h): offered (FI_ND_FLOW_CTRL,
	 * and a libfabric whose rxm marks its credit messages with the public
	 * FI_PRIORITY), and rxm's handler that sends credits, set once when
	 * rxm opens the domain, before its endpoints. */
	bool flow_ctrl;
	ssize_t (*send_credits)(fid_ep *ep, uint64_t credits) = nullptr;
	fi_threading threading;
	/* Whether objects several endpoints share (a CQ, a shared receive
	 * context) may be used by another thread while an endpoint posts:
	 * all but FI_THREAD_DOMAIN and FI_THREAD_COMPLETION, where the
	 * application serializes every use of them with their endpoints.
	 * Under FI_THREAD_FID a post that finds its ring full reads its CQ
	 * while another thread may. Such objects lock. */
	bool shared_objects_lock() const noexcept
	{
		return threading != FI_THREAD_DOMAIN && threading != FI_THREAD_COMPLETION;
	}
	/* The API version the application asked for (its fabric's), which
	 * the domain's children follow. */
	uint32_t api_version;

	/* Whether the device resizes CQs (soft-iWARP does not): asked once,
	 * of a CQ of its own, at the first endpoint enabled. Where it does,
	 * an endpoint's queues start small and its CQ grows with them
	 * (WorkQueue::grow); where not, each reserves its whole depth. */
	bool cqs_resize();
	Once cq_resize_probe;
	bool cq_resize_works = false;

	/* The windows, opened on first use; nullptr where the device has none
	 * (regions peers may reach are then registered for themselves). */
	MemoryWindows *memory_windows();

	/* Gives the device back what the domain keeps idle: registrations the
	 * cache holds for reuse and pooled windows. A device (or the rdma
	 * cgroup's rdma.max) limits its objects, and an application at that
	 * limit must not be refused a queue pair or a registration for nd's
	 * spares. True when anything went back. */
	bool release_idle_device_objects(const char *why) noexcept;
	/* Whether a creation that failed with errno `err` is worth one more
	 * try: it failed for want of device objects or memory (EAGAIN,
	 * ENOMEM), and the domain gave back idle ones. */
	bool made_room_after(int err, const char *why) noexcept
	{
		return (err == EAGAIN || err == ENOMEM) && release_idle_device_objects(why);
	}

	/* make(), a device object's constructor returning nullptr with errno;
	 * once more when made_room_after says so. errno is make()'s on the
	 * last try. */
	template <class Make>
	auto make_with_room(const char *why, Make make) -> decltype(make())
	{
		auto made = make();
		if (!made) {
			const int first = errno;
			if (made_room_after(first, why)) {
				errno = 0;
				made = make();
			} else {
				errno = first;
			}
		}
		return made;
	}

	/* Where fi_atomic's fetch-and-add puts the old value nobody asked
	 * for: one registered word, written by the adapter and never read
	 * (every connection may write it at once). Registered on the first
	 * such call; nullptr when that failed (logged). */
	struct AtomicSink {
		alignas(8) uint64_t word = 0;
		VerbsHandle<ibv_mr, ibv_dereg_mr> mr;
	};
	const AtomicSink *atomic_sink();
	Once atomic_sink_made;
	std::unique_ptr<AtomicSink> atomic_sink_;
	int close();
};


} // namespace nd

#endif /* ND_DOMAIN_H */
