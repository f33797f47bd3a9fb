/* nd_slab.cpp: SlabPool (nd_slab.h). */
#include "nd_slab.h"

#include <sys/mman.h>
#include <unistd.h>

#include <new>

#if defined(__SANITIZE_ADDRESS__)
#define ND_SLAB_USES_HEAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ND_SLAB_USES_HEAP 1
#endif
#endif

namespace nd {

#ifdef ND_SLAB_USES_HEAP
const bool SlabPool::kMapsSlabs = false;
#else
const bool SlabPool::kMapsSlabs = true;
#endif

namespace {

constexpr size_t kAlign = 16;

constexpr size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

} // namespace

/* At the start of its own mapping: the objects follow. */
struct SlabPool::Slab {
	Slab *prev = nullptr;
	Slab *next = nullptr;
	void *free = nullptr;		/* freed objects, each holding the next */
	uint32_t live = 0;		/* objects handed out */
	uint32_t carved = 0;		/* objects ever taken from the slab's end */
	bool linked = false;		/* in with_room_ */

	uint8_t *objects() noexcept { return reinterpret_cast<uint8_t *>(this) + round_up(sizeof(Slab), kAlign); }
};

SlabPool::SlabPool(size_t object_size) noexcept
	: object_size_(round_up(object_size < sizeof(void *) ? sizeof(void *) : object_size, kAlign)),
	  per_slab_((kSlabBytes - round_up(sizeof(Slab), kAlign)) / object_size_)
{
}

SlabPool::~SlabPool()
{
	if (spare_)
		munmap(spare_, kSlabBytes);
}

size_t SlabPool::mapped_slabs() const noexcept
{
	std::lock_guard<Mutex> guard(lock_);
	return mapped_;
}

SlabPool::Slab *SlabPool::map_slab()
{
	/* Twice the size, then the ends cut so that what stays is aligned
	 * to its size: an object's slab is its address rounded down. */
	void *raw = mmap(nullptr, 2 * kSlabBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED)
		throw std::bad_alloc();
	const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
	const uintptr_t aligned = round_up(start, kSlabBytes);
	if (aligned > start)
		munmap(raw, aligned - start);
	if (start + 2 * kSlabBytes > aligned + kSlabBytes)
		munmap(reinterpret_cast<void *>(aligned + kSlabBytes), start + 2 * kSlabBytes - aligned - kSlabBytes);
	mapped_++;
	return new (reinterpret_cast<void *>(aligned)) Slab;
}

void SlabPool::link(Slab *slab) noexcept
{
	slab->prev = nullptr;
	slab->next = with_room_;
	if (with_room_)
		with_room_->prev = slab;
	with_room_ = slab;
	slab->linked = true;
}

void SlabPool::unlink(Slab *slab) noexcept
{
	if (slab->prev)
		slab->prev->next = slab->next;
	else
		with_room_ = slab->next;
	if (slab->next)
		slab->next->prev = slab->prev;
	slab->prev = slab->next = nullptr;
	slab->linked = false;
}

void *SlabPool::allocate()
{
#ifdef ND_SLAB_USES_HEAP
	return ::operator new(object_size_);
#else
	std::lock_guard<Mutex> guard(lock_);
	Slab *slab = with_room_;
	if (!slab) {
		if (spare_) {
			slab = spare_;
			spare_ = nullptr;
		} else {
			slab = map_slab();
		}
		link(slab);
	}
	void *object;
	if (slab->free) {
		object = slab->free;
		slab->free = *static_cast<void **>(object);
	} else {
		object = slab->objects() + slab->carved * object_size_;
		slab->carved++;
	}
	slab->live++;
	if (!slab->free && slab->carved == per_slab_)
		unlink(slab); /* full */
	return object;
#endif
}

void SlabPool::deallocate(void *object) noexcept
{
#ifdef ND_SLAB_USES_HEAP
	::operator delete(object);
#else
	if (!object)
		return;
	auto *slab = reinterpret_cast<Slab *>(reinterpret_cast<uintptr_t>(object) & ~(kSlabBytes - 1));
	std::lock_guard<Mutex> guard(lock_);
	*static_cast<void **>(object) = slab->free;
	slab->free = object;
	if (!slab->linked)
		link(slab);
	if (--slab->live)
		return;
	/* Empty: kept, its objects' pages returned, if none is kept yet;
	 * else unmapped. */
	unlink(slab);
	if (spare_) {
		munmap(slab, kSlabBytes);
		mapped_--;
		return;
	}
	const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
	const uintptr_t base = reinterpret_cast<uintptr_t>(slab);
	const uintptr_t first_free_page = round_up(base + round_up(sizeof(Slab), kAlign), page);
	madvise(reinterpret_cast<void *>(first_free_page), base + kSlabBytes - first_free_page, MADV_DONTNEED);
	/* Objects carved on the header's page keep their memory; the rest
	 * read as zeros now, and are carved again. */
	slab->free = nullptr;
	slab->carved = 0;
	spare_ = slab;
#endif
}

} // namespace nd
