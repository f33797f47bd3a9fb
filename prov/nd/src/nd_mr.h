/*
 * nd_mr.h: memory registration (fid_mr) on ibv_reg_mr.
 *
 * mr_mode is FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
 * FI_MR_PROV_KEY: the key is the device's rkey, remote addresses are virtual
 * addresses, and the descriptor (fi_mr_desc) is the MemoryRegion itself, so
 * that posting reads the lkey with one load. A region may be closed while
 * operations that use it are outstanding, as verbs allows; those operations
 * then complete in error (libfabric leaves that to the application).
 */
#ifndef ND_MR_H
#define ND_MR_H

#include "nd.h"
#include "nd_verbs.h"

#include <rdma/fi_domain.h>

namespace nd {

struct Domain;

using UniqueMr = VerbsHandle<ibv_mr, ibv_dereg_mr>;

struct MemoryRegion {
	fid_mr mr;				/* first: from_fid<MemoryRegion> */
	uint32_t lkey;				/* what the data path reads */
	Domain *domain;
	UniqueMr handle;

	int close();
};

/* The lkey of a descriptor from fi_mr_desc. */
inline uint32_t lkey_of(void *desc) noexcept
{
	return static_cast<MemoryRegion *>(desc)->lkey;
}

/* Maps libfabric access flags (FI_SEND, FI_REMOTE_WRITE, ...) to verbs
 * access flags; 0 access means every access, as libfabric says. */
int verbs_access_of(uint64_t access) noexcept;


} // namespace nd

#endif /* ND_MR_H */
