/*
 * nd_flow_ctrl.h: ofi_rxm's credit-based flow control, the internal
 * extension libfabric's utility provider asks a core provider for
 * ("ofix_flow_ctrl_v1", fi_open_ops on the domain), as the verbs provider
 * offers it.
 *
 * Without it rxm sends as fast as it can and leaves a message that finds no
 * receive posted to the adapter's receiver-not-ready retry: nothing is
 * lost, but each refusal stalls the connection for the RNR timer, which
 * Soft-RoCE rounds up to a kernel tick (docs/mpi.md, Biband). With it, each
 * side tells the other by rxm's own messages how many receives it posted,
 * and a message the peer has no receive for waits at the call
 * (-FI_EAGAIN), where rxm queues it.
 *
 * The protocol, as rxm and the verbs provider keep it:
 *   - rxm opens the ops on the domain and gives them its handler, which
 *     sends a credit message of its own (set_send_handler);
 *   - at connection time it asks each endpoint whether it can keep credits
 *     (available), tells the peer in its CM data, and once both can and the
 *     connection is up, enables them with a threshold (half its receives);
 *   - from then on each side has one credit to start with, reserved for a
 *     credit message (sent with FI_PRIORITY), and the receives it posts,
 *     less that one, go to the peer through the handler, whenever at least
 *     the threshold of them is owed; rxm hands the credits it receives to
 *     add_credits, which may come before this side enabled (kept for then).
 *
 * FlowCredits is the arithmetic, pure and tested on the host (unit_cm):
 * the sender's half under the endpoint's send lock, the receiver's under
 * its receive lock. The receiver counts what it owes from its receive
 * ring's posted count (every receive since the endpoint was made, those
 * rxm posts before the connection is up among them), so the receive fast
 * path counts nothing.
 */
#ifndef ND_FLOW_CTRL_H
#define ND_FLOW_CTRL_H

#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>

#include <cstddef>
#include <cstdint>

namespace nd {

/* The extension's name and table, as libfabric lays them out in its
 * internal include/ofi_util.h (not installed). */
inline constexpr const char kOfiOpsFlowCtrl[] = "ofix_flow_ctrl_v1";
struct OfiFlowCtrlOps {
	size_t size;
	bool (*available)(fid_ep *ep);
	int (*enable)(fid_ep *ep, uint64_t threshold);
	void (*add_credits)(fid_ep *ep, uint64_t credits);
	void (*set_send_handler)(fid_domain *domain, ssize_t (*send_handler)(fid_ep *ep, uint64_t credits));
};

/* The flag rxm's credit messages carry, which may take the last credit:
 * public in libfabric 1.x; 2.x made it internal (nd offers none there). */
#ifdef FI_PRIORITY
inline constexpr uint64_t kFlowPriority = FI_PRIORITY;
#else
inline constexpr uint64_t kFlowPriority = 0;
#endif

class FlowCredits {
public:
	static constexpr uint64_t kUnlimited = UINT64_MAX;

	/* Sender, under the send lock. Whether credits are kept. */
	bool enabled() const noexcept { return peer_ != kUnlimited; }
	/* The peer's receives this side may still send into. */
	uint64_t peer() const noexcept { return peer_; }
	/* One message that takes a peer's receive: false when it must wait.
	 * The last credit goes only to a priority message (rxm's credit
	 * message), so that credits can always be told. */
	bool take(bool priority) noexcept
	{
		if (peer_ == kUnlimited)
			return true;
		if (peer_ == 0 || (peer_ == 1 && !priority))
			return false;
		--peer_;
		return true;
	}
	/* The same for a fast path, which runs only once credits are kept
	 * (SlowTx::flow) and never for a priority message. */
	bool take_kept() noexcept
	{
		if (peer_ <= 1)
			return false;
		--peer_;
		return true;
	}
	/* A message taken for that was not posted after all. */
	void give_back() noexcept
	{
		if (peer_ != kUnlimited)
			++peer_;
	}
	/* The peer's credit message (add_credits): kept for enable when it
	 * comes first. */
	void add(uint64_t credits) noexcept
	{
		if (peer_ == kUnlimited)
			saved_ += credits;
		else
			peer_ += credits;
	}
	/* enable, the sender's half: one credit to start with, and what the
	 * peer sent before. */
	void start_sending() noexcept
	{
		peer_ = 1 + saved_;
		saved_ = 0;
	}

	/* Receiver, under the receive lock. enable's half. */
	void set_threshold(uint64_t threshold) noexcept
	{
		threshold_ = threshold;
		update_tell_at();
	}
	/* What to tell the peer now, with `posted` receives posted in all:
	 * all it is owed (every receive but the one it starts with, less what
	 * it was told), once that is at least the threshold; 0 otherwise. The
	 * amount counts as told (give it back with not_told). Every receive
	 * post asks: one compare until the threshold is reached. */
	uint64_t due(uint64_t posted) noexcept
	{
		if (posted < tell_at_)
			return 0;
		const uint64_t owed = posted - 1 - told_;
		told_ += owed;
		update_tell_at();
		return owed;
	}
	/* The handler could not send them: owed again. */
	void not_told(uint64_t credits) noexcept
	{
		told_ -= credits;
		update_tell_at();
	}

private:
	/* The posted count from which the threshold is owed: the one receive
	 * the peer starts with, what it was told, and the threshold (never,
	 * before enable). */
	void update_tell_at() noexcept
	{
		tell_at_ = threshold_ >= kUnlimited - 1 - told_ ? kUnlimited : told_ + 1 + threshold_;
	}

	uint64_t peer_ = kUnlimited;
	uint64_t saved_ = 0;
	uint64_t told_ = 0;
	uint64_t threshold_ = kUnlimited;
	uint64_t tell_at_ = kUnlimited;
};

} // namespace nd

#endif /* ND_FLOW_CTRL_H */
