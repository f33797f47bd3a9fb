/*
 * nd_ep_state.h: the connection state machine of an endpoint, with one
 * handler per rdma_cm event and one check per application call.
 *
 * It also keeps the endpoint object's lifecycle (bound, enabled, closing).
 *
 * Pure: a handler takes the event's facts and returns the step the endpoint
 * must carry out (the next state and one action); the endpoint (nd_ep.cpp)
 * performs the action with rdma_cm and verbs. Events that do not belong to
 * the current state, late ones after a disconnect or a failure included, are
 * absorbed: they never assert and never produce a second report.
 */
#ifndef ND_EP_STATE_H
#define ND_EP_STATE_H

#include "nd_cm_data.h"

#include <cstdint>

namespace nd {

enum class EpState : uint8_t {
	idle,		  /* nothing sent (or a retryable attempt ended); a passive-side
			   * endpoint may hold a request */
	resolving_addr,	  /* fi_connect: address resolution running */
	resolving_route,  /* route resolution running */
	connecting,	  /* request sent, waiting for the reply */
	response_pending, /* manual mode: reply reported, the application decides */
	accepting,	  /* passive side: reply sent, waiting for the peer to complete */
	connected,
	shutting_down,	  /* fi_shutdown sent the disconnect */
	disconnected,	  /* FI_SHUTDOWN reported; the endpoint is done */
	failed,		  /* the attempt failed for good; cannot be reused */
};

const char *to_string(EpState state) noexcept;

enum class EpAction {
	none,		 /* a state change only */
	absorb,		 /* event not for this state: ignore it (logged) */
	resolve_route,	 /* rdma_resolve_route */
	connect,	 /* move the QP to INIT, rdma_connect */
	report_response, /* manual mode: FI_ND_CONNRESP with the reply's data */
	complete,	 /* QP to RTR/RTS with the negotiated limits, rdma_establish, FI_CONNECTED */
	report_connected,/* FI_CONNECTED */
	report_error,	 /* an error entry with `error` (and the event's data) */
	report_shutdown, /* FI_SHUTDOWN */
};

struct EpStep {
	EpState next;
	EpAction action;
	int error = 0; /* positive FI_E* for report_error */
	bool operator==(const EpStep &) const = default;
};

class EpStateMachine {
public:
	EpStateMachine(cm::Side side, bool manual_complete) noexcept
		: side_(side), manual_(manual_complete) {}

	EpState state() const noexcept { return state_; }
	cm::Side side() const noexcept { return side_; }
	void set_manual(bool manual) noexcept { manual_ = manual; }
	/* iWARP: the CM leaves a refused connector's queue pair in error (siw
	 * closes it with the MPA stream), so an attempt that reached the peer
	 * cannot be retried with it; one that failed before rdma_connect can. */
	void set_iwarp(bool iwarp) noexcept { iwarp_ = iwarp; }

	/* One handler per rdma_cm event; each returns what to do and moves
	 * to the step's next state. */
	EpStep addr_resolved() noexcept;
	EpStep addr_error(int status) noexcept;
	EpStep route_resolved() noexcept;
	EpStep route_error(int status) noexcept;
	EpStep connect_response() noexcept;
	EpStep connect_error(int status) noexcept;
	EpStep unreachable(int status) noexcept;
	EpStep rejected(int status) noexcept;
	EpStep established() noexcept;
	EpStep disconnected() noexcept;
	EpStep device_removal() noexcept;
	EpStep other_event() noexcept; /* TIMEWAIT_EXIT, ADDR_CHANGE, ... */
	/* Dispatches an rdma_cm event type to its handler. */
	EpStep on_event(rdma_cm_event_type type, int status) noexcept;

	/* Application calls: 0 when allowed now (the state moves on), or the
	 * -FI_E* the call returns, the state unchanged. */
	int begin_connect() noexcept;
	int begin_accept(bool has_request) noexcept;
	int begin_shutdown() noexcept;
	int begin_complete() noexcept;	/* manual mode: complete */
	int begin_reject() noexcept;	/* manual mode: reject the reply */
	/* An action the endpoint carried out failed locally (e.g. rdma_connect
	 * returned an error): the attempt is over. */
	void fail() noexcept { state_ = EpState::failed; }
	/* The connecting side's attempt ended with `error` (positive FI_E*)
	 * before the accepter answered: back to idle, so that fi_connect may
	 * try again, where ND allows it (see retryable), else failed. The step
	 * reports the error either way. */
	EpStep attempt_failed(int error) noexcept;
	/* Address or route resolution (`during`) answered: the next step, or
	 * the attempt failed. */
	EpStep resolved(EpState during, EpState next, EpAction action) noexcept;
	EpStep resolution_failed(EpState during, rdma_cm_event_type event, int status) noexcept;
	/* begin_connect's and begin_accept's error where not idle. */
	int not_idle() const noexcept;
	/* ND Connect: "the connection attempt may be retried" after
	 * NETWORK_UNREACHABLE, HOST_UNREACHABLE, CONNECTION_REFUSED (no
	 * listener, backlog, or the peer's Reject) and IO_TIMEOUT; every other
	 * error leaves the connector unusable. */
	static bool retryable(int error) noexcept;
	/* complete() succeeded. */
	void completed() noexcept { state_ = EpState::connected; }

	/* The endpoint object's own lifecycle, beside the connection's: each
	 * step is taken once and never undone. */
	bool bound() const noexcept { return bound_; }		/* fi_setname done */
	void mark_bound() noexcept { bound_ = true; }
	bool enabled() const noexcept { return enabled_; }	/* fi_enable done */
	void mark_enabled() noexcept { enabled_ = true; }
	/* fi_close has begun: deferred work finds nothing to do (set under
	 * the progress lock). */
	bool closing() const noexcept { return closing_; }
	void mark_closing() noexcept { closing_ = true; }

private:
	EpStep go(EpState next, EpAction action, int error = 0) noexcept;
	EpStep absorb() noexcept { return {state_, EpAction::absorb}; }
	bool attempt_in_progress() const noexcept;

	EpState state_ = EpState::idle;
	cm::Side side_;
	bool manual_;
	bool iwarp_ = false;
	/* Manual mode: the accepter gave up while the application decided;
	 * fi_nd_complete_connect then says so (ND_CONNECTION_ABORTED). */
	bool peer_aborted_ = false;
	bool bound_ = false;
	bool enabled_ = false;
	bool closing_ = false;
};

} // namespace nd

#endif /* ND_EP_STATE_H */
