/* unit_slab.cpp: SlabPool (nd_slab.h): objects out of the heap, slabs
 * returned when their objects are freed. */
#include "nd_slab.h"

#include <criterion/criterion.h>

#include <cstring>
#include <set>
#include <vector>

using nd::SlabPool;

Test(slab_pool, objects_are_distinct_aligned_and_writable)
{
	SlabPool pool(200);
	std::vector<void *> out;
	std::set<void *> seen;
	for (int i = 0; i < 1000; i++) {
		void *p = pool.allocate();
		cr_assert_eq(reinterpret_cast<uintptr_t>(p) % 16, 0u);
		std::memset(p, i & 0xff, 200);
		cr_assert(seen.insert(p).second, "object %d handed out twice", i);
		out.push_back(p);
	}
	for (size_t i = 0; i < out.size(); i++)
		cr_assert_eq(static_cast<uint8_t *>(out[i])[199], i & 0xff, "object %zu overwritten", i);
	for (void *p : out)
		pool.deallocate(p);
}

/* Under AddressSanitizer the objects come from operator new, so that a use
 * after free is caught: nothing is mapped. */
static void check_heap_build(SlabPool &pool)
{
	std::vector<void *> out;
	for (size_t i = 0; i < pool.per_slab() + 1; i++)
		out.push_back(pool.allocate());
	cr_assert_eq(pool.mapped_slabs(), 0u);
	for (void *p : out)
		pool.deallocate(p);
}

Test(slab_pool, a_burst_freed_whole_leaves_one_slab_mapped)
{
	SlabPool pool(256);
	if (!SlabPool::kMapsSlabs)
		return check_heap_build(pool);
	const size_t burst = pool.per_slab() * 8 + 3;
	std::vector<void *> out;
	for (size_t i = 0; i < burst; i++)
		out.push_back(pool.allocate());
	cr_assert_eq(pool.mapped_slabs(), 9u, "%zu objects fill nine slabs", burst);
	/* Freed in a different order than made, as connections complete. */
	for (size_t i = 0; i < out.size(); i += 2)
		pool.deallocate(out[i]);
	for (size_t i = 1; i < out.size(); i += 2)
		pool.deallocate(out[i]);
	cr_assert_eq(pool.mapped_slabs(), 1u, "empty slabs go but one, kept for the next burst");
	void *again = pool.allocate();
	cr_assert_eq(pool.mapped_slabs(), 1u, "the kept slab serves the next object");
	pool.deallocate(again);
}

Test(slab_pool, a_freed_object_is_reused_before_a_new_slab_is_mapped)
{
	SlabPool pool(1024);
	if (!SlabPool::kMapsSlabs)
		return check_heap_build(pool);
	std::vector<void *> out;
	for (size_t i = 0; i < pool.per_slab(); i++)
		out.push_back(pool.allocate());
	cr_assert_eq(pool.mapped_slabs(), 1u);
	void *freed = out[5];
	pool.deallocate(freed);
	cr_assert_eq(pool.allocate(), freed, "the full slab's freed object comes back first");
	cr_assert_eq(pool.mapped_slabs(), 1u);
	out.push_back(pool.allocate());
	cr_assert_eq(pool.mapped_slabs(), 2u);
	for (void *p : out)
		pool.deallocate(p);
}
