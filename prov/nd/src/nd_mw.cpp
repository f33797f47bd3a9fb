/* nd_mw.cpp: memory windows bound and invalidated by posted requests (see nd_mw.h). */
#include "nd_mw.h"
#include "nd.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>

namespace nd {

namespace {

/* A bind is a local operation: it completes in microseconds, or the queue
 * pair is broken. */
constexpr auto kBindWait = std::chrono::seconds(2);

/* The first active port, where the queue pair lives (port numbers start
 * at 1); 0 when none is active. */
uint8_t active_port(ibv_context *context, ibv_port_attr *out)
{
	ibv_device_attr device{};
	if (ibv_query_device(context, &device))
		return 0;
	for (uint8_t port = 1; port <= device.phys_port_cnt; port++) {
		if (ibv_query_port(context, port, out) == 0 && out->state == IBV_PORT_ACTIVE)
			return port;
	}
	return 0;
}

/* Takes the queue pair through INIT, RTR and RTS with itself as the
 * destination. No packet ever leaves it: binds are local operations, but
 * verbs posts them only on a queue pair that is ready to send. */
int connect_to_itself(ibv_qp *qp, ibv_context *context, std::string *why)
{
	ibv_port_attr port_attr{};
	const uint8_t port = active_port(context, &port_attr);
	if (!port) {
		*why = "no active port";
		return ENODEV;
	}
	ibv_qp_attr attr{};
	attr.qp_state = IBV_QPS_INIT;
	attr.pkey_index = 0;
	attr.port_num = port;
	attr.qp_access_flags = 0;
	if (int rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
		*why = std::string("ibv_modify_qp(INIT): ") + std::strerror(rc);
		return rc;
	}
	attr = {};
	attr.qp_state = IBV_QPS_RTR;
	attr.path_mtu = port_attr.active_mtu;
	attr.dest_qp_num = qp->qp_num;
	attr.rq_psn = 0;
	attr.max_dest_rd_atomic = 1;
	attr.min_rnr_timer = 12;
	attr.ah_attr.port_num = port;
	if (port_attr.link_layer == IBV_LINK_LAYER_ETHERNET) {
		/* RoCE addresses by GID: the port's first one that is set. */
		int index = -1;
		for (int i = 0; i < port_attr.gid_tbl_len && index < 0; i++) {
			ibv_gid gid{};
			if (ibv_query_gid(context, port, i, &gid) == 0 &&
			    (gid.global.subnet_prefix || gid.global.interface_id)) {
				index = i;
				attr.ah_attr.grh.dgid = gid;
			}
		}
		if (index < 0) {
			*why = "the port has no GID";
			return ENODEV;
		}
		attr.ah_attr.is_global = 1;
		attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(index);
		attr.ah_attr.grh.hop_limit = 1;
	} else {
		attr.ah_attr.dlid = port_attr.lid;
	}
	if (int rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
		*why = std::string("ibv_modify_qp(RTR): ") + std::strerror(rc);
		return rc;
	}
	attr = {};
	attr.qp_state = IBV_QPS_RTS;
	attr.timeout = 14;
	attr.retry_cnt = 7;
	attr.rnr_retry = 7;
	attr.sq_psn = 0;
	attr.max_rd_atomic = 1;
	if (int rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
		*why = std::string("ibv_modify_qp(RTS): ") + std::strerror(rc);
		return rc;
	}
	return 0;
}

} // namespace

bool MemoryWindows::supported_by(const ibv_device_attr &attr) noexcept
{
	return (attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW) != 0;
}

std::unique_ptr<MemoryWindows> MemoryWindows::open(ibv_context *context, ibv_pd *pd, std::string *why)
{
	std::unique_ptr<MemoryWindows> windows(new (std::nothrow) MemoryWindows);
	if (!windows) {
		*why = "out of memory";
		return nullptr;
	}
	windows->pd_ = pd;
	windows->cq_.reset(ibv_create_cq(context, 4, nullptr, nullptr, 0));
	if (!windows->cq_) {
		*why = std::string("ibv_create_cq: ") + std::strerror(errno);
		return nullptr;
	}
	ibv_qp_init_attr init{};
	init.send_cq = windows->cq_.get();
	init.recv_cq = windows->cq_.get();
	init.qp_type = IBV_QPT_RC;
	init.sq_sig_all = 1;
	init.cap.max_send_wr = 2;
	init.cap.max_recv_wr = 1;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	windows->qp_.reset(ibv_create_qp(pd, &init));
	if (!windows->qp_) {
		*why = std::string("ibv_create_qp: ") + std::strerror(errno);
		return nullptr;
	}
	if (connect_to_itself(windows->qp_.get(), context, why))
		return nullptr;
	/* A first window proves that the device allocates them (a device may
	 * set the capability and still refuse). */
	ibv_mw *first = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	if (!first) {
		*why = std::string("ibv_alloc_mw(type 1): ") + std::strerror(errno);
		return nullptr;
	}
	try {
		windows->free_.push_back(first);
	} catch (const std::bad_alloc &) {
		ibv_dealloc_mw(first);
		*why = "out of memory";
		return nullptr;
	}
	return windows;
}

MemoryWindows::~MemoryWindows()
{
	/* Every region is closed by now (the domain counts them), so every
	 * window is back here, unbound. */
	for (ibv_mw *window : free_)
		ibv_dealloc_mw(window);
}

int MemoryWindows::bind_and_wait_locked(ibv_mw *window, ibv_mr *mr, uint64_t addr, uint64_t length,
					int access) noexcept
{
	ibv_mw_bind bind{};
	bind.wr_id = reinterpret_cast<uintptr_t>(window);
	bind.send_flags = IBV_SEND_SIGNALED;
	/* An invalidation (no address, no length) names the region too:
	 * Soft-RoCE's libibverbs provider reads its lkey either way. */
	bind.bind_info.mr = mr;
	bind.bind_info.addr = addr;
	bind.bind_info.length = length;
	bind.bind_info.mw_access_flags = access;
	if (int rc = ibv_bind_mw(qp_.get(), window, &bind)) {
		ND_WARN(FI_LOG_MR, "memory window: ibv_bind_mw: %s\n", std::strerror(rc));
		return rc;
	}
	const auto deadline = std::chrono::steady_clock::now() + kBindWait;
	for (unsigned spins = 0;; spins++) {
		ibv_wc wc{};
		const int n = ibv_poll_cq(cq_.get(), 1, &wc);
		if (n < 0) {
			ND_WARN(FI_LOG_MR, "memory window: ibv_poll_cq failed\n");
			break;
		}
		if (n == 1) {
			if (wc.status == IBV_WC_SUCCESS && wc.wr_id == bind.wr_id)
				return 0;
			ND_WARN(FI_LOG_MR, "memory window: %s of [0x%llx, +%llu) completed with %s\n",
				length ? "bind" : "invalidation", static_cast<unsigned long long>(addr),
				static_cast<unsigned long long>(length), ibv_wc_status_str(wc.status));
			break;
		}
		if (spins > 1000) {
			if (std::chrono::steady_clock::now() > deadline) {
				ND_WARN(FI_LOG_MR, "memory window: no completion of a bind in 2 s\n");
				break;
			}
			sched_yield();
		}
	}
	/* The queue pair is in error, or holds a request that may still
	 * complete: no bind is trusted on it again. */
	broken_ = true;
	ibv_qp_attr attr{};
	attr.qp_state = IBV_QPS_ERR;
	(void)ibv_modify_qp(qp_.get(), &attr, IBV_QP_STATE);
	return EIO;
}

size_t MemoryWindows::release_pool() noexcept
{
	std::lock_guard<Mutex> guard(lock_);
	/* A window the device would not free stays pooled, not forgotten. */
	const size_t pooled = free_.size();
	free_.erase(std::remove_if(free_.begin(), free_.end(),
				   [this](ibv_mw *window) { return discard_locked(window); }),
		    free_.end());
	return pooled - free_.size();
}

bool MemoryWindows::discard_locked(ibv_mw *window) noexcept
{
	/* Deallocating invalidates whatever the window was bound to. */
	if (int rc = ibv_dealloc_mw(window)) {
		ND_WARN(FI_LOG_MR, "memory window: ibv_dealloc_mw: %s\n", std::strerror(rc));
		return false;
	}
	return true;
}

ibv_mw *MemoryWindows::expose(ibv_mr *mr, const void *addr, size_t length, int access, int *err)
{
	std::lock_guard<Mutex> guard(lock_);
	if (broken_) {
		*err = EIO;
		return nullptr;
	}
	ibv_mw *window;
	if (!free_.empty()) {
		window = free_.back();
		free_.pop_back();
	} else {
		window = ibv_alloc_mw(pd_, IBV_MW_TYPE_1);
		if (!window) {
			*err = errno ? errno : ENOMEM;
			/* Info: fi_mr_reg makes room and tries again, and warns
			 * if it then goes without a window. */
			ND_INFO(FI_LOG_MR, "memory window: ibv_alloc_mw: %s\n", std::strerror(*err));
			return nullptr;
		}
	}
	if (int rc = bind_and_wait_locked(window, mr, reinterpret_cast<uintptr_t>(addr), length, access)) {
		discard_locked(window);
		*err = rc;
		return nullptr;
	}
	return window;
}

bool MemoryWindows::revoke(ibv_mw *window, ibv_mr *mr) noexcept
{
	std::lock_guard<Mutex> guard(lock_);
	if (!broken_ && bind_and_wait_locked(window, mr, 0, 0, 0) == 0) {
		try {
			free_.push_back(window);
		} catch (const std::bad_alloc &) {
			discard_locked(window);
		}
		return true;
	}
	return discard_locked(window);
}

} // namespace nd
