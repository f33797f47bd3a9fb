/* nd_mr.cpp: memory regions (fi_mr_reg, fi_mr_regv, fi_mr_regattr). */
#include "nd_mr.h"
#include "nd_domain.h"
#include "nd_memlock.h"
#include "nd_unsupported.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace nd {

int verbs_access_of(uint64_t access, bool atomics) noexcept
{
	if (!access)
		access = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
	/* Local write is needed to receive into the region and to land read
	 * results there; verbs requires it beside remote write as well. */
	int flags = 0;
	if (access & (FI_RECV | FI_READ | FI_REMOTE_WRITE))
		flags |= IBV_ACCESS_LOCAL_WRITE;
	/* An atomic writes the word it targets: a region peers may write
	 * takes their atomics too, where the device has them. */
	if (access & FI_REMOTE_WRITE)
		flags |= IBV_ACCESS_REMOTE_WRITE | (atomics ? IBV_ACCESS_REMOTE_ATOMIC : 0);
	if (access & FI_REMOTE_READ)
		flags |= IBV_ACCESS_REMOTE_READ;
	return flags;
}

namespace {

int mr_close(fid *fid) noexcept
{
	return guarded("fi_close(mr)", [&] { return from_fid<MemoryRegion>(fid)->close(); });
}

fi_ops mr_fid_ops = {
	.size = sizeof(fi_ops),
	.close = mr_close,
	.bind = unsupported::bind,
	.control = unsupported::control,
	.ops_open = unsupported::ops_open,
	.tostr = nullptr,
	.ops_set = nullptr,
};

/* libfabric's internal OFI_MR_NOCACHE: its utility providers (ofi_rxm)
 * pass it for their own long-lived buffer pools, which the cache would only
 * fill up with. */
constexpr uint64_t kOfiMrNoCache = 1ULL << 60;

constexpr int kRemoteAccess = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;

constexpr uint64_t kAccessFlags = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ |
				  FI_REMOTE_WRITE;

int register_region(Domain *domain, const void *buf, size_t len, uint64_t access,
		    uint64_t offset, uint64_t flags, void *context, fid_mr **out)
{
	if (!out) {
		ND_WARN(FI_LOG_MR, "fi_mr_reg: mr is NULL\n");
		return -FI_EINVAL;
	}
	if (!buf && len) {
		ND_WARN(FI_LOG_MR, "fi_mr_reg: buf is NULL with len %zu\n", len);
		return -FI_EINVAL;
	}
	if (access & ~kAccessFlags) {
		ND_WARN(FI_LOG_MR, "fi_mr_reg: access 0x%llx has flags the provider does not know\n",
			static_cast<unsigned long long>(access));
		return -FI_EINVAL;
	}
	if (flags & ~kOfiMrNoCache) {
		ND_WARN(FI_LOG_MR, "fi_mr_reg: flags 0x%llx not supported\n",
			static_cast<unsigned long long>(flags));
		return -FI_EBADFLAGS;
	}
	if (offset) {
		/* FI_MR_VIRT_ADDR: the remote side addresses by virtual address. */
		ND_WARN(FI_LOG_MR, "fi_mr_reg: offset must be 0 under FI_MR_VIRT_ADDR\n");
		return -FI_EINVAL;
	}
	auto region = std::make_unique<MemoryRegion>();
	region->domain = domain;
	const int verbs_access = verbs_access_of(access, domain->atomics);
	const int remote_access = verbs_access & kRemoteAccess;
	bool cacheable = domain->mr_cache && !(flags & kOfiMrNoCache);
	/* A cached registration outlives the region, so peers reach it only
	 * through a window that fi_close invalidates; without one, a region
	 * they may reach is registered for itself. */
	MemoryWindows *windows = cacheable && remote_access && len ? domain->memory_windows() : nullptr;
	if (remote_access && !windows)
		cacheable = false;
	ibv_mr *registered = nullptr;
	int err = 0;
	if (cacheable) {
		const int cache_access = domain->windows_capable ? (verbs_access & ~kRemoteAccess) | IBV_ACCESS_MW_BIND
								 : verbs_access;
		region->cached = domain->mr_cache->acquire(buf, len, cache_access, &err, windows != nullptr);
		if (!region->cached && domain->made_room_after(err, "fi_mr_reg: ibv_reg_mr"))
			region->cached = domain->mr_cache->acquire(buf, len, cache_access, &err, windows != nullptr);
		registered = region->cached ? region->cached->mr : nullptr;
		if (registered && windows) {
			region->window = windows->expose(registered, buf, len, remote_access, &err);
			if (!region->window && domain->made_room_after(err, "fi_mr_reg: ibv_alloc_mw"))
				region->window = windows->expose(registered, buf, len, remote_access, &err);
			if (!region->window) {
				ND_WARN(FI_LOG_MR, "fi_mr_reg(%p, %zu): no memory window (%s): registering the region "
					"for itself\n", buf, len, std::strerror(err));
				domain->mr_cache->release(region->cached);
				region->cached = nullptr;
				registered = nullptr;
				cacheable = false;
			}
		}
	}
	if (!cacheable) {
		/* A zero-length region still gets keys: register one byte of it. */
		errno = 0;
		region->handle.reset(domain->make_with_room("fi_mr_reg: ibv_reg_mr", [&] {
			return ibv_reg_mr(domain->pd.get(), const_cast<void *>(buf), len ? len : 1, verbs_access);
		}));
		registered = region->handle.get();
		err = errno ? errno : ENOMEM;
	}
	if (!registered) {
		char what[64];
		std::snprintf(what, sizeof(what), "fi_mr_reg(%p, %zu)", buf, len);
		warn_registration_failed(FI_LOG_MR, what, len, err);
		return fi_error_of_errno(err);
	}
	region->desc.lkey = registered->lkey;
	region->mr.fid.fclass = FI_CLASS_MR;
	region->mr.fid.context = context;
	region->mr.fid.ops = &mr_fid_ops;
	region->mr.key = region->window ? region->window->rkey : registered->rkey;
	region->mr.mem_desc = &region->desc;
	domain->children.acquire();
	*out = &region.release()->mr;
	return 0;
}

Domain *domain_of(fid *fid)
{
	if (!fid || fid->fclass != FI_CLASS_DOMAIN) {
		ND_WARN(FI_LOG_MR, "fi_mr_reg: registration is on a domain\n");
		return nullptr;
	}
	return from_fid<Domain>(fid);
}

} // namespace

int MemoryRegion::close()
{
	/* Remote access ends here, before fi_close returns. A window the
	 * device could neither invalidate nor free leaves its registration
	 * unusable, to be deregistered when its last region closes. */
	bool reusable = true;
	if (window)
		reusable = domain->windows->revoke(window, cached->mr);
	if (cached)
		domain->mr_cache->release(cached, reusable);
	handle.reset();
	domain->children.release();
	delete this;
	return 0;
}

int mr_reg(fid *fid, const void *buf, size_t len, uint64_t access, uint64_t offset, uint64_t,
	   uint64_t flags, fid_mr **mr, void *context) noexcept
{
	/* requested_key is ignored: FI_MR_PROV_KEY, the device chooses. */
	return guarded("fi_mr_reg", [&] {
		Domain *domain = domain_of(fid);
		if (!domain)
			return -FI_EINVAL;
		return register_region(domain, buf, len, access, offset, flags, context, mr);
	});
}

int mr_regv(fid *fid, const iovec *iov, size_t count, uint64_t access, uint64_t offset,
	    uint64_t requested_key, uint64_t flags, fid_mr **mr, void *context) noexcept
{
	if (count != 1 || !iov) {
		ND_WARN(FI_LOG_MR, "fi_mr_regv: %zu iovs; the device registers one range "
			"(domain_attr->mr_iov_limit is 1)\n", count);
		return -FI_EINVAL;
	}
	return mr_reg(fid, iov[0].iov_base, iov[0].iov_len, access, offset, requested_key, flags,
		      mr, context);
}

int mr_regattr(fid *fid, const fi_mr_attr *attr, uint64_t flags, fid_mr **mr) noexcept
{
	if (!attr) {
		ND_WARN(FI_LOG_MR, "fi_mr_regattr: attr is NULL\n");
		return -FI_EINVAL;
	}
	if (attr->iface != FI_HMEM_SYSTEM) {
		ND_WARN(FI_LOG_MR, "fi_mr_regattr: only host memory (FI_HMEM_SYSTEM)\n");
		return -FI_ENOSYS;
	}
	return mr_regv(fid, attr->mr_iov, attr->iov_count, attr->access, attr->offset,
		       attr->requested_key, flags, mr, attr->context);
}

} // namespace nd
