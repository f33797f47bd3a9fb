/*
 * nd_send_budget.h: the budget a shared transmit context (nd_stx.h) shares among
 * the send queues bound to it, counted by each queue (nd_wq.h).
 */
#ifndef ND_SEND_BUDGET_H
#define ND_SEND_BUDGET_H

#include <atomic>
#include <cstdint>

namespace nd {

/*
 * What a shared transmit context (fi_stx_context, nd_stx.h) shares: a budget
 * of requests outstanding across every send queue bound to it. Verbs has no
 * shared send queue, so each queue pair keeps its own, as deep as the whole
 * context: the budget is what makes the context's size hold for all of them
 * together. The poster counts a request against it (count_budget) just
 * before it commits the slot; the slot gives it back when it retires or is
 * uncommitted. Queues without a budget never touch it on the fast path: an
 * endpoint bound to a shared context posts through the slow paths.
 *
 * The check (SendQueue::no_room) and the count are two steps, so
 * posters racing on different endpoints may pass the limit by one request
 * each; no device queue overflows by it, since each is as deep as the
 * context and the CQs reserve per endpoint.
 */
class SendBudget {
public:
	explicit SendBudget(uint64_t limit) noexcept : limit_(limit) {}
	bool exhausted() const noexcept { return used_.load(std::memory_order_acquire) >= limit_; }
	uint64_t left() const noexcept
	{
		const uint64_t u = used_.load(std::memory_order_acquire);
		return u < limit_ ? limit_ - u : 0;
	}
	/* A request about to be committed counts; `n` retired or given
	 * back no longer do. */
	void take() noexcept { used_.fetch_add(1, std::memory_order_acq_rel); }
	void give_back(uint64_t n) noexcept { used_.fetch_sub(n, std::memory_order_acq_rel); }

private:
	std::atomic<uint64_t> used_{0};
	uint64_t limit_;
};

} // namespace nd

#endif /* ND_SEND_BUDGET_H */
