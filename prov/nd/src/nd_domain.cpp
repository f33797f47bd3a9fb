/* nd_domain.cpp: the domain object (fid_domain). */
#include "nd_domain.h"
#include "nd_async.h"
#include "nd_fabric.h"
#include "nd_flow_ctrl.h"
#include "nd_info.h"
#include "nd_mem_monitor.h"
#include "nd_memlock.h"
#include "nd_params.h"
#include "nd_unsupported.h"

#include <cstring>
#include <memory>
#include <string>

namespace nd {

namespace {

/* What a domain without memory windows does instead (nd_mr.cpp). */
constexpr const char *kWithoutWindows =
	"regions that peers may reach are registered for themselves (uncached) and deregistered at fi_close";

int domain_close(fid *fid) noexcept
{
	return guarded("fi_close(domain)", [&] { return from_fid<Domain>(fid)->close(); });
}

int domain_control(fid *fid, int command, void *arg) noexcept
{
	if (command != FI_ND_GET_MR_CACHE_STATS) {
		ND_WARN(FI_LOG_DOMAIN, "fi_control(domain): command %d not supported\n", command);
		return -FI_ENOSYS;
	}
	return guarded("fi_nd_get_mr_cache_stats", [&] {
		Domain *domain = from_fid<Domain>(fid);
		if (!arg) {
			ND_WARN(FI_LOG_DOMAIN, "fi_nd_get_mr_cache_stats: stats is NULL\n");
			return -FI_EINVAL;
		}
		if (!domain->mr_cache) {
			ND_WARN(FI_LOG_DOMAIN, "fi_nd_get_mr_cache_stats: the domain has no registration cache\n");
			return -FI_ENOSYS;
		}
		domain->mr_cache->stats(static_cast<fi_nd_mr_cache_stats *>(arg));
		return 0;
	});
}

/* fi_open_ops: ofi_rxm's flow control (nd_flow_ctrl.h), where offered. */
int domain_ops_open(fid *fid, const char *name, uint64_t flags, void **ops, void *context) noexcept
{
	if (!name || std::strcmp(name, kOfiOpsFlowCtrl) != 0)
		return unsupported::ops_open(fid, name, flags, ops, context);
	return guarded("fi_open_ops(domain)", [&] {
		Domain *domain = from_fid<Domain>(fid);
		if (!ops) {
			ND_WARN(FI_LOG_DOMAIN, "fi_open_ops(%s): ops is NULL\n", name);
			return -FI_EINVAL;
		}
		if (!domain->flow_ctrl) {
			/* rxm asks on every domain it opens, and goes on without. */
			ND_INFO(FI_LOG_DOMAIN, "fi_open_ops(%s): not offered (FI_ND_FLOW_CTRL, or a libfabric whose rxm marks its credit messages with a flag nd cannot see)\n",
				name);
			return -FI_ENOSYS;
		}
		*ops = const_cast<void *>(flow_ctrl_ops());
		return 0;
	});
}

/* The domain's registration cache, when caching is on and the memory
 * monitor runs; otherwise every registration goes to the device. */
std::unique_ptr<RegistrationCache> open_mr_cache(Domain &domain, const Params &params)
{
	if (!params.mr_cache_enable || params.mr_cache_max_count == 0) {
		ND_INFO(FI_LOG_MR, "registration cache off (FI_ND_MR_CACHE_ENABLE / _MAX_COUNT)\n");
		return nullptr;
	}
	std::string why;
	if (!mem_monitor_start(&why)) {
		ND_INFO(FI_LOG_MR, "registration cache off: %s\n", why.c_str());
		return nullptr;
	}
	/* Within the memory-lock limit, whatever was asked: idle entries past
	 * it would make the application's own registrations fail. */
	const MemlockLimit memlock = memlock_limit();
	const size_t wanted = params.mr_cache_max_size ? params.mr_cache_max_size : default_mr_cache_max_size();
	const RegistrationCache::Limits limits = {mr_cache_bytes_within(wanted, memlock), params.mr_cache_max_count};
	if (limits.max_bytes < wanted)
		ND_INFO(FI_LOG_MR, "registration cache: at most %zu KiB, half the memory-lock limit (%zu KiB)\n",
			limits.max_bytes / 1024, memlock.bytes / 1024);
	Registrar registrar;
	registrar.owner = domain.pd.get();
	registrar.reg = [](void *pd, void *addr, size_t length, int access) noexcept {
		return ibv_reg_mr(static_cast<ibv_pd *>(pd), addr, length, access);
	};
	registrar.dereg = [](void *, ibv_mr *mr) noexcept { ibv_dereg_mr(mr); };
	auto cache = std::make_unique<RegistrationCache>(registrar, limits);
	if (!cache->watch_unmaps()) {
		ND_WARN(FI_LOG_MR, "registration cache off: too many domains watch memory at once\n");
		return nullptr;
	}
	return cache;
}

fi_ops domain_fid_ops = {
	.size = sizeof(fi_ops),
	.close = domain_close,
	.bind = unsupported::bind,
	.control = domain_control,
	.ops_open = domain_ops_open,
	.tostr = nullptr,
	.ops_set = nullptr,
};

fi_ops_domain domain_ops = {
	.size = sizeof(fi_ops_domain),
	.av_open = unsupported::av_open,
	.cq_open = cq_open,
	.endpoint = open_endpoint,
	.scalable_ep = unsupported::scalable_ep,
	.cntr_open = cntr_open,
	.poll_open = poll_open,
	.stx_ctx = stx_open,
	.srx_ctx = srx_open,
	.query_atomic = query_atomic,
	.query_collective = unsupported::query_collective,
	.endpoint2 = [](fid_domain *domain, fi_info *info, fid_ep **ep, uint64_t flags,
			void *context) noexcept {
		if (flags) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_endpoint2: flags 0x%llx not supported\n",
				static_cast<unsigned long long>(flags));
			return -FI_EBADFLAGS;
		}
		return open_endpoint(domain, info, ep, context);
	},
};

fi_ops_mr domain_mr_ops = {
	.size = sizeof(fi_ops_mr),
	.reg = mr_reg,
	.regv = mr_regv,
	.regattr = mr_regattr,
};

int open_domain_impl(fid_fabric *f, fi_info *info, fid_domain **out, void *context)
{
	if (!f || !info || !out) {
		ND_WARN(FI_LOG_DOMAIN, "fi_domain: fabric, info and domain must not be NULL\n");
		return -FI_EINVAL;
	}
	if (!info->domain_attr || !info->domain_attr->name) {
		ND_WARN(FI_LOG_DOMAIN, "fi_domain: info->domain_attr->name names no device\n");
		return -FI_EINVAL;
	}
	Fabric *fabric = from_fid<Fabric>(f);
	if (info->fabric_attr && info->fabric_attr->name &&
	    std::strcmp(info->fabric_attr->name, fabric->name) != 0) {
		ND_WARN(FI_LOG_DOMAIN, "fi_domain: info is for fabric '%s', not this fabric '%s'\n",
			info->fabric_attr->name, fabric->name);
		return -FI_EINVAL;
	}

	auto domain = std::make_unique<Domain>();
	int count = 0;
	domain->device_list.reset(rdma_get_devices(&count));
	if (!domain->device_list) {
		ND_WARN(FI_LOG_DOMAIN, "fi_domain: rdma_get_devices: %s\n", std::strerror(errno));
		return -FI_ENODEV;
	}
	for (int i = 0; i < count; i++) {
		ibv_context *candidate = domain->device_list[i];
		if (std::strcmp(ibv_get_device_name(candidate->device), info->domain_attr->name) == 0) {
			domain->context = candidate;
			break;
		}
	}
	if (!domain->context) {
		ND_WARN(FI_LOG_DOMAIN, "fi_domain: no RDMA device named '%s'\n",
			info->domain_attr->name);
		return -FI_ENODEV;
	}
	domain->pd.reset(ibv_alloc_pd(domain->context));
	if (!domain->pd) {
		int err = errno ? errno : ENOMEM;
		ND_WARN(FI_LOG_DOMAIN, "fi_domain(%s): ibv_alloc_pd: %s\n", info->domain_attr->name,
			std::strerror(err));
		return fi_error_of_errno(err, -FI_ENODEV);
	}
	ibv_device_attr attr{};
	int rc = ibv_query_device(domain->context, &attr);
	if (rc) {
		ND_WARN(FI_LOG_DOMAIN, "fi_domain(%s): ibv_query_device: %s\n",
			info->domain_attr->name, std::strerror(rc));
		return -FI_ENODEV;
	}
	domain->adapter_read_limits = {static_cast<uint32_t>(attr.max_qp_rd_atom),
				       static_cast<uint32_t>(attr.max_qp_init_rd_atom)};
	domain->iwarp = domain->context->device->transport_type == IBV_TRANSPORT_IWARP;
	domain->atomics = !domain->iwarp && attr.atomic_cap != IBV_ATOMIC_NONE;
	/* siw's vendor id is "bmt" in ASCII (its author's initials). */
	constexpr uint32_t kSoftIwarpVendorId = 0x626d74;
	domain->synchronous_flush = domain->iwarp && attr.vendor_id == kSoftIwarpVendorId;
	domain->max_cqe = attr.max_cqe;
	domain->max_srq_wr = attr.max_srq_wr;
	/* 0 on devices that do not say (the limit is then max_sge). */
	domain->max_read_sge = static_cast<uint32_t>(attr.max_sge_rd ? attr.max_sge_rd : attr.max_sge);
	const Params params = read_params();
	domain->min_rnr_timer = static_cast<uint8_t>(params.min_rnr_timer);
#ifdef FI_PRIORITY
	domain->flow_ctrl = params.flow_ctrl;
#else
	/* libfabric 2.x's rxm marks its credit messages with an internal flag
	 * nd cannot see (OFI_PRIORITY), and its verbs provider's rxm takes the
	 * refusals as nd's does (docs/mpi.md). */
	domain->flow_ctrl = false;
#endif
	domain->rnr_retry = static_cast<uint8_t>(params.rnr_retry);
	domain->resolve_timeout_ms = params.resolve_timeout_ms;
	domain->tagged_msg_size = params.tagged_msg_size;
	const bool soft_roce = !domain->iwarp && is_software_device(info->domain_attr->name);
	const TransportRetry retry = transport_retry(params, soft_roce);
	domain->retry_count = static_cast<uint8_t>(retry.retry_count);
	domain->ack_timeout = retry.ack_timeout;
	domain->stall_timeout_s = domain->iwarp || retry.retry_count == 7 ? params.peer_timeout_s : 0;
	if (domain->stall_timeout_s)
		domain->not_ready_naks_path = not_ready_naks_path(info->domain_attr->name);
	ND_INFO(FI_LOG_DOMAIN, "fi_domain(%s): %s: transport retry count %d, ACK timeout %d (-1: rdma_cm's), "
		"requests that stand still end their connection after %d s (0: the transport's retries decide); "
		"not-ready NAKs counted in %s\n",
		info->domain_attr->name, domain->iwarp ? "iWARP" : soft_roce ? "Soft-RoCE" : "hardware",
		retry.retry_count, retry.ack_timeout, domain->stall_timeout_s,
		domain->not_ready_naks_path.empty() ? "(no counter)" : domain->not_ready_naks_path.c_str());
	switch (const int threading = api::enum_value(info->domain_attr->threading)) {
	case FI_THREAD_UNSPEC:
		domain->threading = FI_THREAD_SAFE;
		break;
	case FI_THREAD_SAFE: case FI_THREAD_FID: case FI_THREAD_DOMAIN:
	case FI_THREAD_COMPLETION: case FI_THREAD_ENDPOINT:
		domain->threading = static_cast<fi_threading>(threading);
		break;
	default:
		ND_WARN(FI_LOG_DOMAIN, "fi_domain(%s): domain_attr->threading %d is no threading model\n",
			info->domain_attr->name, threading);
		return -FI_EINVAL;
	}
	domain->cm_limits = user_cm_limits(domain->iwarp);

	UniqueInfo copy(fi_dupinfo(info));
	if (!copy)
		return -FI_ENOMEM;
	/* The device's asynchronous events (a queue pair or the device
	 * failing) are read by the EQs from now on. */
	if (int ret = async::device_open(domain->context))
		return ret;
	domain->mr_cache = open_mr_cache(*domain, params);
	domain->windows_capable = MemoryWindows::supported_by(attr);
	if (domain->mr_cache && !domain->windows_capable)
		ND_INFO(FI_LOG_MR, "fi_domain(%s): the device has no memory windows: %s\n", info->domain_attr->name,
			kWithoutWindows);

	domain->info = copy.release();
	domain->fabric = fabric;
	domain->api_version = fabric->api_version;
	domain->domain.fid.fclass = FI_CLASS_DOMAIN;
	domain->domain.fid.context = context;
	domain->domain.fid.ops = &domain_fid_ops;
	domain->domain.ops = &domain_ops;
	domain->domain.mr = &domain_mr_ops;
	fabric->children.acquire();
	*out = &domain.release()->domain;
	return 0;
}

} // namespace

bool Domain::cqs_resize()
{
	/* Asked once, whatever the answer: a probe that fails says no. */
	cq_resize_probe.run([this]() noexcept {
		ibv_cq *cq = ibv_create_cq(context, 1, nullptr, nullptr, 0);
		if (!cq) {
			ND_INFO(FI_LOG_DOMAIN, "domain %p: ibv_create_cq(1) for the resize probe: %s; queues reserve their depth\n",
				static_cast<void *>(this), std::strerror(errno));
			return 0;
		}
		const int rc = ibv_resize_cq(cq, cq->cqe + 1);
		cq_resize_works = rc == 0;
		ibv_destroy_cq(cq);
		ND_INFO(FI_LOG_DOMAIN, "domain %p: %s\n", static_cast<void *>(this),
			cq_resize_works ? "the device resizes CQs: queues start small and grow"
					: "the device does not resize CQs: each queue reserves its whole depth on its CQ");
		return 0;
	});
	return cq_resize_works;
}

MemoryWindows *Domain::memory_windows()
{
	/* Tried once: a device that failed to open them is told once. */
	windows_opened.run([this] {
		if (!windows_capable)
			return 0;
		std::string why;
		windows = MemoryWindows::open(context, pd.get(), &why);
		if (!windows)
			ND_WARN(FI_LOG_MR, "fi_domain(%s): no memory windows (%s): %s\n", info->domain_attr->name,
				why.c_str(), kWithoutWindows);
		return 0;
	});
	return windows.get();
}

bool Domain::release_idle_device_objects(const char *why) noexcept
{
	/* Set once and kept until the domain closes: seen once opened. */
	MemoryWindows *pool = windows_opened.done() ? windows.get() : nullptr;
	const size_t windows_released = pool ? pool->release_pool() : 0;
	const size_t registrations_released = mr_cache ? mr_cache->evict_idle() : 0;
	if (windows_released + registrations_released == 0)
		return false;
	ND_INFO(FI_LOG_DOMAIN, "fi_domain(%s): %s: the device refused an object; gave back %zu idle registrations "
		"and %zu pooled memory windows, and trying again\n", info->domain_attr->name, why,
		registrations_released, windows_released);
	return true;
}

const Domain::AtomicSink *Domain::atomic_sink()
{
	/* Made once; one that failed is not tried again (logged once). */
	atomic_sink_made.run([this] {
		auto sink = std::make_unique<AtomicSink>();
		sink->mr.reset(ibv_reg_mr(pd.get(), &sink->word, sizeof(sink->word), IBV_ACCESS_LOCAL_WRITE));
		if (!sink->mr) {
			ND_WARN(FI_LOG_EP_DATA, "fi_domain(%s): ibv_reg_mr of fi_atomic's result word: %s\n",
				info->domain_attr->name, std::strerror(errno));
			return 0;
		}
		atomic_sink_ = std::move(sink);
		return 0;
	});
	return atomic_sink_.get();
}

int Domain::close()
{
	if (children.busy()) {
		ND_WARN(FI_LOG_DOMAIN, "fi_close(domain %s): %d child object(s) still open\n",
			info->domain_attr->name, children.value());
		return -FI_EBUSY;
	}
	if (mr_cache) {
		/* What the cache did, for whoever checks that it runs in their
		 * process (Open MPI's ranks have no handle to ask). */
		fi_nd_mr_cache_stats stats{};
		mr_cache->stats(&stats);
		ND_INFO(FI_LOG_MR, "fi_close(domain %s): registration cache: %llu hits, %llu misses, %llu uncached, "
			"%llu evictions, %llu invalidations\n", info->domain_attr->name,
			static_cast<unsigned long long>(stats.hits), static_cast<unsigned long long>(stats.misses),
			static_cast<unsigned long long>(stats.uncached), static_cast<unsigned long long>(stats.evictions),
			static_cast<unsigned long long>(stats.invalidations));
	}
	fabric->children.release();
	fi_freeinfo(info);
	async::device_close(context);
	delete this; /* members release the PD, then librdmacm's device list */
	return 0;
}

int open_domain(fid_fabric *fabric, fi_info *info, fid_domain **domain, void *context) noexcept
{
	return guarded("fi_domain", [&] { return open_domain_impl(fabric, info, domain, context); });
}

} // namespace nd
