/*
 * nd_link.h: whether an endpoint's queue pair carries data (LinkState), and the
 * one place it changes (Link). Read by every post, broken by the
 * retirement of a failed request (nd_wq.h).
 */
#ifndef ND_LINK_H
#define ND_LINK_H

#include <atomic>
#include <cstdint>

namespace nd {

/* Whether the queue pair carries data: set by connection management, read
 * by every post, and set to broken by the retirement of a failed request. */
enum class LinkState : uint8_t {
	idle,		/* not connected yet: receives may be posted, nothing sent */
	up,		/* the queue pair is ready to send */
	down,		/* shut down or disconnected: flushed */
	broken,		/* a transfer failed; the queue pair is in error */
};

/*
 * An endpoint's LinkState, changed in one place: on() below, by the event
 * that changes it. Connection management brings it up and takes it down;
 * the retirement of a failed request (WorkQueue::retire), the CQ's stall
 * watch and the verbs asynchronous events break it. Every post reads it.
 *
 * The same atomic word holds the endpoint's slow-transmit bits (SlowTx in
 * nd_ep.h: a send lock, a shared context, credits, requests held back), so
 * that a post tests "up, and nothing to defer" with one compare (open_with()).
 * Both halves change only by compare-and-swap, each keeping the other.
 */
class Link {
public:
	enum class Event : uint8_t {
		ready,			/* the queue pair can send (RTS, or iWARP's CM did it) */
		flushed,		/* the application or the CM ended it: idle/up -> down */
		failed,			/* a transfer or the device failed: -> broken */
		stream_ended,		/* iWARP: a flush while up means the peer ended it */
	};

	LinkState state(std::memory_order order = std::memory_order_acquire) const noexcept
	{
		return state_of(word_.load(order));
	}
	/* Down or broken: receives are refused (the states after up). */
	bool ended(std::memory_order order = std::memory_order_relaxed) const noexcept
	{
		return word_.load(order) >= static_cast<uint16_t>(LinkState::down) << 8;
	}
	/* Up, with exactly these slow-transmit bits: a post may take its fast
	 * path (no bit at all; or, for an endpoint whose one reason for the
	 * slow path is something that fast path handles itself, that bit:
	 * Keeps in nd_ep.h). */
	bool open_with(uint8_t bits) const noexcept
	{
		return word_.load(std::memory_order_relaxed) == (kOpen | bits);
	}
	uint8_t slow_tx() const noexcept
	{
		return static_cast<uint8_t>(word_.load(std::memory_order_relaxed) & 0xff);
	}
	void set_slow_tx(uint8_t bits) noexcept
	{
		uint16_t w = word_.load(std::memory_order_relaxed);
		while (!word_.compare_exchange_weak(w, static_cast<uint16_t>((w & 0xff00) | bits),
						    std::memory_order_acq_rel, std::memory_order_relaxed)) {
		}
	}
	/* Whether the event changed the state. */
	bool on(Event event) noexcept
	{
		switch (event) {
		case Event::ready:
			move(nullptr, 0, LinkState::up);
			return true;
		case Event::flushed: {
			static constexpr LinkState from[] = {LinkState::up, LinkState::idle};
			return move(from, 2, LinkState::down);
		}
		case Event::failed: {
			static constexpr LinkState from[] = {LinkState::idle, LinkState::up, LinkState::down};
			return move(from, 3, LinkState::broken);
		}
		case Event::stream_ended: {
			static constexpr LinkState from[] = {LinkState::up};
			return move(from, 1, LinkState::broken);
		}
		}
		return false;
	}

private:
	static constexpr uint16_t kOpen = static_cast<uint16_t>(LinkState::up) << 8;
	static LinkState state_of(uint16_t word) noexcept { return static_cast<LinkState>(word >> 8); }
	/* To `to` from any state in from[0..n) (from any state at all when
	 * from is null), keeping the slow-transmit bits; whether it moved. */
	bool move(const LinkState *from, size_t n, LinkState to) noexcept
	{
		uint16_t w = word_.load(std::memory_order_relaxed);
		for (;;) {
			bool allowed = !from;
			for (size_t i = 0; i < n && !allowed; i++)
				allowed = state_of(w) == from[i];
			if (!allowed)
				return false;
			const uint16_t next = static_cast<uint16_t>((static_cast<uint16_t>(to) << 8) | (w & 0xff));
			if (word_.compare_exchange_weak(w, next, std::memory_order_acq_rel, std::memory_order_relaxed))
				return true;
		}
	}

	std::atomic<uint16_t> word_{static_cast<uint16_t>(LinkState::idle) << 8};
};

} // namespace nd

#endif /* ND_LINK_H */
