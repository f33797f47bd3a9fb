/*
 * nd_counter_cells.h: a counter's words (nd_cntr.h), and where a work queue counts a
 * request's completion in them (nd_wq.h).
 */
#ifndef ND_COUNTER_CELLS_H
#define ND_COUNTER_CELLS_H

#include <rdma/fabric.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace nd {

/* A counter's two words (nd_cntr.h): completions and errors. */
struct CounterWords {
	std::atomic<uint64_t> success{0};
	std::atomic<uint64_t> errors{0};
};

/* Where a request's completion is counted: one pointer, since every queue
 * of thousands of endpoints keeps one per kind of request. */
struct CounterCells {
	CounterWords *words = nullptr;

	explicit operator bool() const noexcept { return words != nullptr; }
	void count(bool ok) const noexcept
	{
		(ok ? words->success : words->errors).fetch_add(1, std::memory_order_release);
	}
};

/* Which counter a request feeds, by its CQ flags. */
enum class CounterKind : uint8_t { send, recv, read, write, none };
constexpr size_t kCounterKinds = 4;

constexpr CounterKind counter_kind(uint64_t cq_flags) noexcept
{
	return (cq_flags & FI_SEND)    ? CounterKind::send
	       : (cq_flags & FI_RECV)  ? CounterKind::recv
	       : (cq_flags & FI_READ)  ? CounterKind::read
	       : (cq_flags & FI_WRITE) ? CounterKind::write
				       : CounterKind::none;
}

} // namespace nd

#endif /* ND_COUNTER_CELLS_H */
