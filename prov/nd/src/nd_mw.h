/*
 * nd_mw.h: memory windows, through which a domain lets peers reach its
 * regions (IND2MemoryWindow Bind / Invalidate in NetworkDirect).
 *
 * The registration cache keeps a registration after fi_close of the region
 * that made it, so its own rkey would outlive the region: a peer that kept
 * the key could write memory the application has since freed and reused.
 * So on a device with type 1 memory windows a cached registration grants no
 * remote access at all (local write and window binding only), and each
 * region that peers may reach gets a window bound over exactly its bytes:
 * fi_mr_key is the window's rkey, and fi_close invalidates it (a bind of no
 * length, which also changes the key) before it returns. Both are work
 * requests posted on a queue pair of the domain's own, connected to itself,
 * and waited for: no registration system call, and windows are pooled, so
 * the steady state of a reused buffer allocates none either.
 *
 * A window is bound over a registration of exactly its region's bytes (the
 * cache's exact lookup): Soft-RoCE checks a window's requests against the
 * bounds of the registration under it, not the window's own.
 *
 * Type 1 windows belong to the protection domain, so every endpoint of the
 * domain serves them (a type 2 window would serve one queue pair only).
 * Where the device has no windows (soft-iWARP), or binding ever fails,
 * regions that peers may reach are registered for themselves and
 * deregistered at fi_close instead (nd_mr.cpp).
 */
#ifndef ND_MW_H
#define ND_MW_H

#include "nd.h"
#include "nd_verbs.h"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace nd {

class MemoryWindows {
public:
	/* Whether the device says it binds type 1 windows. */
	static bool supported_by(const ibv_device_attr &attr) noexcept;
	/* The domain's binder: a CQ and a queue pair connected to itself;
	 * nullptr with *why when the device cannot give one. */
	static std::unique_ptr<MemoryWindows> open(ibv_context *context, ibv_pd *pd, std::string *why);

	MemoryWindows(const MemoryWindows &) = delete;
	MemoryWindows &operator=(const MemoryWindows &) = delete;
	~MemoryWindows();

	/* Binds a window over [addr, addr + length) of `mr` with the remote
	 * `access` (IBV_ACCESS_REMOTE_*) and waits for the bind. Returns the
	 * window (its rkey is the key peers use), or nullptr with *err (a
	 * positive errno). */
	ibv_mw *expose(ibv_mr *mr, const void *addr, size_t length, int access, int *err);
	/* Ends remote access through `window` (bound on `mr`) and waits
	 * until the device says so; the window goes back to the pool. False
	 * when the device could not say so and could not deallocate the
	 * window either: the caller must then deregister `mr`. */
	bool revoke(ibv_mw *window, ibv_mr *mr) noexcept;
	/* Deallocates the pooled windows (none is bound); returns how many
	 * went. */
	size_t release_pool() noexcept;


private:
	MemoryWindows() = default;
	int bind_and_wait_locked(ibv_mw *window, ibv_mr *mr, uint64_t addr, uint64_t length,
				 int access) noexcept;
	/* Deallocates a window that is not back in the pool; false when the
	 * device refused. */
	bool discard_locked(ibv_mw *window) noexcept;

	Mutex lock_{LockRank::memory_windows};
	UniqueCq cq_;
	UniqueQp qp_;
	ibv_pd *pd_ = nullptr;
	std::vector<ibv_mw *> free_;		/* unbound, ready to bind */
	bool broken_ = false;			/* a bind failed: the queue pair is in error */
};

} // namespace nd

#endif /* ND_MW_H */
