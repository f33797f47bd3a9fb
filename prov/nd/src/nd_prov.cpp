/* nd_prov.cpp: the provider object libfabric knows the provider by. */
#include "nd.h"
#include "nd_device.h"
#include "nd_fabric.h"
#include "nd_getinfo.h"
#include "nd_mem_monitor.h"

namespace {

/* libfabric calls this when it unloads providers (fi_fini). */
void nd_cleanup() noexcept
{
	nd::release_topology();
	/* libucm would otherwise call into an unloaded library at the next
	 * munmap. */
	nd::mem_monitor_stop();
}

} // namespace

struct fi_provider nd_prov = {
	.version = ND_PROV_VERSION,
	.fi_version = ND_API_VERSION,
	.context = {},
	.name = "nd",
	.getinfo = nd::getinfo,
	.fabric = nd::open_fabric,
	.cleanup = nd_cleanup,
};
