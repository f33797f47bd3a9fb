/*
 * nd_topology.cpp: NUMA locality of adapters, with hwloc.
 *
 * An adapter is local when the CPUs it is attached near (sysfs local_cpus of
 * its PCI function) include every CPU the calling thread may run on; it is
 * near when they share some. fi_getinfo lists local adapters first, then near
 * ones, then the rest, so that an application taking the first info gets the
 * adapter its memory traffic does not have to cross a socket for.
 *
 * The topology is loaded once per process (hwloc_topology_load reads all of
 * sysfs and costs milliseconds); the thread's binding is read on every call,
 * because fi_getinfo may be called from differently bound threads.
 */
#include "nd.h"
#include "nd_device.h"

#include <hwloc.h>
#include <hwloc/linux.h>

#include <algorithm>
#include <mutex>

namespace nd {

namespace {

Mutex topology_lock{LockRank::topology};
hwloc_topology_t topology = nullptr;
bool topology_tried = false;

/* The process-wide topology, loaded on first use; nullptr when hwloc cannot
 * load one. Released by release_topology() when libfabric unloads us. */
hwloc_topology_t process_topology()
{
	std::lock_guard<Mutex> guard(topology_lock);
	if (topology_tried)
		return topology;
	topology_tried = true;
	hwloc_topology_t t;
	if (hwloc_topology_init(&t) != 0)
		return nullptr;
	if (hwloc_topology_load(t) != 0) {
		hwloc_topology_destroy(t);
		ND_INFO(FI_LOG_CORE, "hwloc cannot load the topology; devices keep discovery order\n");
		return nullptr;
	}
	topology = t;
	return topology;
}

struct Bitmap {
	hwloc_bitmap_t set = hwloc_bitmap_alloc();
	Bitmap() = default;
	Bitmap(const Bitmap &) = delete;
	Bitmap &operator=(const Bitmap &) = delete;
	~Bitmap() { hwloc_bitmap_free(set); }
};

enum class Locality : int { far = 0, unknown = 0, near = 1, local = 2 };

Locality locality_of(const Adapter &adapter, hwloc_const_bitmap_t thread_cpus)
{
	if (adapter.local_cpus.empty())
		return Locality::unknown;
	Bitmap device_cpus;
	if (hwloc_linux_read_path_as_cpumask(adapter.local_cpus.c_str(), device_cpus.set) != 0 ||
	    hwloc_bitmap_iszero(device_cpus.set))
		return Locality::unknown;
	if (hwloc_bitmap_isincluded(thread_cpus, device_cpus.set))
		return Locality::local;
	if (hwloc_bitmap_intersects(thread_cpus, device_cpus.set))
		return Locality::near;
	return Locality::far;
}

} // namespace

void release_topology() noexcept
{
	std::lock_guard<Mutex> guard(topology_lock);
	if (topology)
		hwloc_topology_destroy(topology);
	topology = nullptr;
	topology_tried = false;
}

void order_by_locality(std::vector<Adapter> &adapters)
{
	if (adapters.empty())
		return;
	hwloc_topology_t topology = process_topology();
	if (!topology)
		return;
	Bitmap thread_cpus;
	if (hwloc_get_cpubind(topology, thread_cpus.set, HWLOC_CPUBIND_THREAD) != 0)
		hwloc_bitmap_copy(thread_cpus.set, hwloc_topology_get_allowed_cpuset(topology));

	std::vector<std::pair<int, size_t>> ranks;
	for (size_t i = 0; i < adapters.size(); i++) {
		Locality l = locality_of(adapters[i], thread_cpus.set);
		adapters[i].is_local = l == Locality::local;
		ranks.emplace_back(static_cast<int>(l), i);
	}
	std::stable_sort(ranks.begin(), ranks.end(),
			 [](const auto &a, const auto &b) { return a.first > b.first; });
	std::vector<Adapter> ordered;
	ordered.reserve(adapters.size());
	for (const auto &rank : ranks)
		ordered.push_back(std::move(adapters[rank.second]));
	adapters = std::move(ordered);
}

} // namespace nd
