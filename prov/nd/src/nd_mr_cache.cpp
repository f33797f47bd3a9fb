/* nd_mr_cache.cpp: the registration cache (see nd_mr_cache.h). */
#include "nd_mr_cache.h"

#include <cerrno>
#include <new>

namespace nd {

bool RegistrationCache::watch_unmaps() noexcept
{
	watching_ = mem_monitor_subscribe(this);
	return watching_;
}

RegistrationCache::~RegistrationCache()
{
	if (watching_)
		mem_monitor_unsubscribe(this);
	std::lock_guard<Mutex> guard(lock_);
	while (!idle_.empty())
		destroy_locked(idle_.back());
}

void RegistrationCache::on_unmap(uintptr_t start, size_t length) noexcept
{
	std::lock_guard<Mutex> guard(unmapped_lock_);
	if (unmapped_count_ == unmapped_.size()) {
		unmapped_overflow_ = true;
		return;
	}
	unmapped_[unmapped_count_++] = {start, start + length};
}

void RegistrationCache::apply_unmapped_locked() noexcept
{
	assert_held(lock_, "RegistrationCache::apply_unmapped_locked");
	/* Deregistering can free memory and so report more ranges: loop until
	 * none is left. */
	for (;;) {
		std::array<std::pair<uintptr_t, uintptr_t>, 32> ranges;
		size_t count;
		bool overflow;
		{
			std::lock_guard<Mutex> guard(unmapped_lock_);
			count = unmapped_count_;
			overflow = unmapped_overflow_;
			for (size_t i = 0; i < count; i++)
				ranges[i] = unmapped_[i];
			unmapped_count_ = 0;
			unmapped_overflow_ = false;
		}
		if (!count && !overflow)
			return;
		if (overflow)
			invalidate_locked(0, UINTPTR_MAX);
		for (size_t i = 0; i < count; i++)
			invalidate_locked(ranges[i].first, ranges[i].second);
	}
}

void RegistrationCache::invalidate_locked(uintptr_t start, uintptr_t end) noexcept
{
	assert_held(lock_, "RegistrationCache::invalidate_locked");
	/* Entries that overlap start at most `longest_` bytes before `start`. */
	auto it = index_.lower_bound(start > longest_ ? start - longest_ : 0);
	while (it != index_.end() && it->first < end) {
		Entry *entry = it->second;
		++it;
		if (entry->end <= start)
			continue;
		invalidations_++;
		if (entry->idle)
			destroy_locked(entry);
		else
			unindex_locked(entry); /* deregistered when its last region closes */
	}
}

RegistrationCache::Entry *RegistrationCache::find_locked(uintptr_t start, uintptr_t end,
							 int access, bool exact) noexcept
{
	assert_held(lock_, "RegistrationCache::find_locked");
	if (exact) {
		auto range = index_.equal_range(start);
		for (auto it = range.first; it != range.second; ++it) {
			if (it->second->end == end && (it->second->access & access) == access)
				return it->second;
		}
		return nullptr;
	}
	/* A covering entry starts at or before `start`, and at most `longest_`
	 * bytes before `end`. */
	const uintptr_t lowest = end - start >= longest_ ? start : (end > longest_ ? end - longest_ : 0);
	for (auto it = index_.lower_bound(lowest); it != index_.end() && it->first <= start; ++it) {
		Entry *entry = it->second;
		if (entry->end >= end && (entry->access & access) == access)
			return entry;
	}
	return nullptr;
}

void RegistrationCache::unindex_locked(Entry *entry) noexcept
{
	assert_held(lock_, "RegistrationCache::unindex_locked");
	if (!entry->indexed)
		return;
	auto range = index_.equal_range(entry->start);
	for (auto it = range.first; it != range.second; ++it) {
		if (it->second == entry) {
			index_.erase(it);
			break;
		}
	}
	entry->indexed = false;
	indexed_bytes_ -= entry->end - entry->start;
}

void RegistrationCache::destroy_locked(Entry *entry) noexcept
{
	assert_held(lock_, "RegistrationCache::destroy_locked");
	if (entry->idle) {
		idle_.erase(entry->idle_at);
		entry->idle = false;
	}
	unindex_locked(entry);
	registrar_.dereg(registrar_.owner, entry->mr);
	delete entry;
}

void RegistrationCache::evict_idle_locked(size_t keep) noexcept
{
	assert_held(lock_, "RegistrationCache::evict_idle_locked");
	while (idle_.size() > keep) {
		evictions_++;
		destroy_locked(idle_.back());
	}
}

size_t RegistrationCache::evict_idle() noexcept
{
	std::lock_guard<Mutex> guard(lock_);
	const size_t idle = idle_.size();
	evict_idle_locked(0);
	return idle;
}

/* Evicts idle entries until one of `length` bytes fits; false when it
 * cannot fit beside the entries in use. */
bool RegistrationCache::make_room_locked(size_t length) noexcept
{
	assert_held(lock_, "RegistrationCache::make_room_locked");
	if (length > limits_.max_bytes || limits_.max_count == 0)
		return false;
	while (index_.size() + 1 > limits_.max_count || indexed_bytes_ + length > limits_.max_bytes) {
		if (idle_.empty())
			return false;
		evictions_++;
		destroy_locked(idle_.back());
	}
	return true;
}

RegistrationCache::Entry *RegistrationCache::register_locked(uintptr_t start, uintptr_t end, int access,
							     int *err)
{
	assert_held(lock_, "RegistrationCache::register_locked");
	auto *entry = new (std::nothrow) Entry;
	if (!entry) {
		*err = ENOMEM;
		return nullptr;
	}
	void *addr = reinterpret_cast<void *>(start);
	const size_t length = end - start;
	errno = 0;
	ibv_mr *mr = registrar_.reg(registrar_.owner, addr, length, access);
	if (!mr && (errno == ENOMEM || errno == EAGAIN) && !idle_.empty()) {
		/* Pinned memory is limited (RLIMIT_MEMLOCK): what the cache holds
		 * idle must not make a registration fail. */
		evict_idle_locked(0);
		errno = 0;
		mr = registrar_.reg(registrar_.owner, addr, length, access);
	}
	if (!mr) {
		*err = errno ? errno : ENOMEM;
		delete entry;
		return nullptr;
	}
	entry->start = start;
	entry->end = end;
	entry->access = access;
	entry->mr = mr;
	return entry;
}

RegistrationCache::Entry *RegistrationCache::acquire(const void *addr, size_t length, int access, int *err,
							 bool exact)
{
	/* A zero-length region still gets keys: it is kept as one byte. */
	if (length == 0)
		length = 1;
	const uintptr_t start = reinterpret_cast<uintptr_t>(addr);
	const uintptr_t end = start + length;
	std::lock_guard<Mutex> guard(lock_);
	apply_unmapped_locked();
	if (Entry *entry = find_locked(start, end, access, exact)) {
		hits_++;
		if (entry->idle) {
			idle_.erase(entry->idle_at);
			entry->idle = false;
		}
		if (entry->users++ == 0)
			in_use_++;
		return entry;
	}
	misses_++;
	const bool cacheable = make_room_locked(length);
	Entry *entry = register_locked(start, end, access, err);
	if (!entry)
		return nullptr;
	/* The registration may have freed memory (it evicts): apply what that
	 * unmapped before the new entry becomes findable. */
	apply_unmapped_locked();
	if (cacheable) {
		index_.emplace(start, entry);
		entry->indexed = true;
		indexed_bytes_ += length;
		if (length > longest_)
			longest_ = length;
	} else {
		uncached_++;
	}
	entry->users = 1;
	in_use_++;
	return entry;
}

void RegistrationCache::release(Entry *entry, bool reusable) noexcept
{
	std::lock_guard<Mutex> guard(lock_);
	apply_unmapped_locked();
	if (!reusable)
		unindex_locked(entry);
	if (--entry->users > 0)
		return;
	in_use_--;
	if (!entry->indexed) {
		destroy_locked(entry);
		return;
	}
	try {
		idle_.push_front(entry);
	} catch (const std::bad_alloc &) {
		destroy_locked(entry);
		return;
	}
	entry->idle_at = idle_.begin();
	entry->idle = true;
}

void RegistrationCache::stats(fi_nd_mr_cache_stats *out)
{
	std::lock_guard<Mutex> guard(lock_);
	apply_unmapped_locked();
	out->hits = hits_;
	out->misses = misses_;
	out->uncached = uncached_;
	out->evictions = evictions_;
	out->invalidations = invalidations_;
	out->entries = index_.size();
	out->bytes = indexed_bytes_;
	out->in_use = in_use_;
}

} // namespace nd
