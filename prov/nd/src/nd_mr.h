/*
 * nd_mr.h: memory registration (fid_mr) on ibv_reg_mr.
 *
 * mr_mode is FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
 * FI_MR_PROV_KEY: the key is the device's rkey, remote addresses are virtual
 * addresses, and the descriptor (fi_mr_desc) is the MemoryRegion itself, so
 * that posting reads the lkey with one load. A region may be closed while
 * operations that use it are outstanding, as verbs allows; those operations
 * then complete in error (libfabric leaves that to the application).
 *
 * Registrations go through the domain's cache (nd_mr_cache.h) when it has
 * one, except those flagged OFI_MR_NOCACHE (ofi_rxm's long-lived pools).
 * Remote access ends at fi_close: a cached registration grants peers
 * nothing, and a region they may reach gets a memory window over exactly
 * its bytes (nd_mw.h), invalidated before fi_close returns. Where the device
 * has no windows, such a region is registered for itself and deregistered
 * at fi_close. Either way a peer that kept the key gets a remote access
 * error, and the memory stays as it was.
 */
#ifndef ND_MR_H
#define ND_MR_H

#include "nd.h"
#include "nd_mr_cache.h"
#include "nd_verbs.h"

#include <rdma/fi_domain.h>

namespace nd {

struct Domain;

using UniqueMr = VerbsHandle<ibv_mr, ibv_dereg_mr>;

/*
 * What fi_mr_desc returns. Its first word points at itself, so that an
 * application that passes the descriptor where an array of descriptors is
 * due (fabtests' multi_recv -M sets fi_msg.desc = fi_mr_desc(mr)) reads the
 * same descriptor as its first element, instead of sending the adapter a
 * garbage key or the provider through a wild pointer.
 */
struct MrDescriptor {
	MrDescriptor *self = this;
	uint32_t lkey = 0;			/* what the data path reads */

	MrDescriptor() = default;
	MrDescriptor(const MrDescriptor &) = delete;
	MrDescriptor &operator=(const MrDescriptor &) = delete;
};

struct MemoryRegion {
	fid_mr mr;				/* first: from_fid<MemoryRegion> */
	MrDescriptor desc;			/* mr.mem_desc */
	Domain *domain;
	RegistrationCache::Entry *cached = nullptr;	/* from the domain's cache, or */
	UniqueMr handle;				/* a registration of its own */
	ibv_mw *window = nullptr;			/* peers' way in to a cached one */

	int close();
};

/* The lkey of a descriptor from fi_mr_desc. */
inline uint32_t lkey_of(void *desc) noexcept
{
	return static_cast<MrDescriptor *>(desc)->lkey;
}

/* Builds the scatter/gather list of a request and checks its buffers,
 * lengths and descriptors: for an endpoint's sends and receives and for a
 * shared receive context's receives (inline: it is on the data path).
 * Returns the number of entries built, or -FI_E*. A receive buffer that is
 * NULL takes no bytes, whatever its length (fabtests post such receives for
 * zero-byte messages): it gets no entry, so the adapter never touches it,
 * and a message with bytes for it completes with a length error. */
/* A receive that takes no bytes as soft-iWARP accepts it: libsiw refuses a
 * receive without scatter/gather entries (EINVAL), so it gets one entry of
 * no bytes, which the adapter never touches. */
inline ssize_t receive_sges_for_iwarp(ssize_t built, ibv_sge *sge) noexcept
{
	if (built != 0)
		return built;
	sge[0].addr = 0;
	sge[0].length = 0;
	sge[0].lkey = 0;
	return 1;
}

inline ssize_t gather_sges(const char *call, const iovec *iov, void **desc, size_t count, uint32_t limit,
			   bool needs_keys, bool receive, ibv_sge *sge, uint64_t *total)
{
	if (count > limit) {
		ND_WARN(FI_LOG_EP_DATA, "%s: %zu iovs; the limit is %u\n", call, count, limit);
		return -FI_EINVAL;
	}
	if (count && !iov) {
		ND_WARN(FI_LOG_EP_DATA, "%s: iov is NULL\n", call);
		return -FI_EINVAL;
	}
	uint64_t sum = 0;
	size_t built = 0;
	for (size_t i = 0; i < count; i++) {
		const size_t len = iov[i].iov_len;
		if (!iov[i].iov_base && receive) {
			if (len)
				ND_INFO(FI_LOG_EP_DATA, "%s: buffer %zu is NULL: it takes no bytes\n", call, i);
			continue;
		}
		if (!iov[i].iov_base && len) {
			ND_WARN(FI_LOG_EP_DATA, "%s: buffer %zu is NULL with length %zu\n", call, i, len);
			return -FI_EINVAL;
		}
		if (len > UINT32_MAX) {
			ND_WARN(FI_LOG_EP_DATA, "%s: buffer %zu is %zu bytes\n", call, i, len);
			return -FI_EMSGSIZE;
		}
		void *d = desc ? desc[i] : nullptr;
		if (needs_keys && len && !d) {
			ND_WARN(FI_LOG_EP_DATA, "%s: buffer %zu has no descriptor (FI_MR_LOCAL: pass fi_mr_desc)\n",
				call, i);
			return -FI_EINVAL;
		}
		sge[built].addr = reinterpret_cast<uintptr_t>(iov[i].iov_base);
		sge[built].length = static_cast<uint32_t>(len);
		sge[built].lkey = d ? lkey_of(d) : 0;
		built++;
		sum += len;
	}
	*total = sum;
	return static_cast<ssize_t>(built);
}

/* Maps libfabric access flags (FI_SEND, FI_REMOTE_WRITE, ...) to verbs
 * access flags; 0 access means every access, as libfabric says. Remote
 * write includes remote atomics where the device has them (`atomics`). */
int verbs_access_of(uint64_t access, bool atomics) noexcept;


} // namespace nd

#endif /* ND_MR_H */
