/* nd_getinfo.h: the provider's getinfo entry point (fi_provider::getinfo). */
#ifndef ND_GETINFO_H
#define ND_GETINFO_H

#include <rdma/fabric.h>

namespace nd {

int getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
	    const fi_info *hints, fi_info **info) noexcept;

} // namespace nd

#endif /* ND_GETINFO_H */
