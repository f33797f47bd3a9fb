/*
 * nd_slab.h: objects of one size in slabs that are mappings of their own.
 *
 * Some objects live only while something is under way: an endpoint's
 * connection-setup state lives from fi_endpoint until the connection is
 * up. An MPI job connects to its peers at once, so thousands of them are
 * made together, interleaved in malloc's heap with the endpoints' long-lived
 * parts, and freed together: malloc keeps the holes they leave resident
 * (it returns only the top of its heap), and the job keeps paying for its
 * start-up. A SlabPool takes such objects out of the heap: 64 KiB slabs,
 * each a mapping aligned to its size, so that an object finds its slab by
 * its address; a slab whose objects are all freed is unmapped (one is kept,
 * its pages returned, for the next burst).
 *
 * Thread-safe, with a lock: for objects made and freed on connection paths,
 * never on the data path. Under AddressSanitizer the pool hands its work to
 * operator new, so that a use after free is still caught.
 */
#ifndef ND_SLAB_H
#define ND_SLAB_H

#include "nd.h"

#include <cstddef>
#include <cstdint>
#include <mutex>

namespace nd {

class SlabPool {
public:
	static constexpr size_t kSlabBytes = 64 * 1024;
	/* False under AddressSanitizer: objects come from operator new. */
	static const bool kMapsSlabs;

	/* Objects of `object_size` bytes (at most a quarter of a slab), each
	 * aligned to 16 bytes. */
	explicit SlabPool(size_t object_size) noexcept;
	/* Unmaps the kept slab; a pool with objects still out must not go. */
	~SlabPool();
	SlabPool(const SlabPool &) = delete;
	SlabPool &operator=(const SlabPool &) = delete;

	/* Throws std::bad_alloc. */
	void *allocate();
	/* `object` came from allocate() of this pool. */
	void deallocate(void *object) noexcept;

	/* Slabs mapped now, the kept empty one included (for tests). */
	size_t mapped_slabs() const noexcept;
	/* Objects one slab holds. */
	size_t per_slab() const noexcept { return per_slab_; }

private:
	struct Slab;
	Slab *map_slab();
	void link(Slab *slab) noexcept;		/* into with_room_ */
	void unlink(Slab *slab) noexcept;

	const size_t object_size_;
	const size_t per_slab_;
	mutable Mutex lock_{LockRank::slab};
	Slab *with_room_ = nullptr;	/* slabs with a free object, in a list */
	Slab *spare_ = nullptr;		/* an empty slab kept, its pages returned */
	size_t mapped_ = 0;
};

} // namespace nd

#endif /* ND_SLAB_H */
