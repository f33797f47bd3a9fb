/* nd_ep_state.cpp: the endpoint's connection state machine (pure). */
#include "nd_ep_state.h"

#include <rdma/fi_errno.h>

namespace nd {

const char *to_string(EpState state) noexcept
{
	switch (state) {
	case EpState::idle: return "idle";
	case EpState::resolving_addr: return "resolving address";
	case EpState::resolving_route: return "resolving route";
	case EpState::connecting: return "connecting";
	case EpState::response_pending: return "response pending";
	case EpState::accepting: return "accepting";
	case EpState::connected: return "connected";
	case EpState::shutting_down: return "shutting down";
	case EpState::disconnected: return "disconnected";
	case EpState::failed: return "failed";
	}
	return "unknown";
}

EpStep EpStateMachine::go(EpState next, EpAction action, int error) noexcept
{
	state_ = next;
	return {next, action, error};
}

bool EpStateMachine::attempt_in_progress() const noexcept
{
	return state_ == EpState::resolving_addr || state_ == EpState::resolving_route ||
	       state_ == EpState::connecting || state_ == EpState::response_pending ||
	       state_ == EpState::accepting;
}

bool EpStateMachine::retryable(int error) noexcept
{
	return error == FI_ENETUNREACH || error == FI_EHOSTUNREACH || error == FI_ECONNREFUSED ||
	       error == FI_ETIMEDOUT;
}

EpStep EpStateMachine::attempt_failed(int error) noexcept
{
	/* Only before an answer: a connector that got one goes on through
	 * CompleteConnect or Reject, after which ND allows no reuse. The queue
	 * pair is still in INIT at most, its receives posted. */
	const bool before_answer = state_ == EpState::resolving_addr ||
				   state_ == EpState::resolving_route ||
				   (state_ == EpState::connecting && !iwarp_);
	if (side_ == cm::Side::active && before_answer && retryable(error))
		return go(EpState::idle, EpAction::report_error, error);
	return go(EpState::failed, EpAction::report_error, error);
}

/* Address and route resolution answer alike: expected only while that
 * step runs (absorbed otherwise), on to the next step, or the attempt
 * failed. */
EpStep EpStateMachine::resolved(EpState during, EpState next, EpAction action) noexcept
{
	if (state_ != during)
		return absorb();
	return go(next, action);
}

EpStep EpStateMachine::resolution_failed(EpState during, rdma_cm_event_type event, int status) noexcept
{
	if (state_ != during)
		return absorb();
	return attempt_failed(cm::error_of(event, status, side_));
}

EpStep EpStateMachine::addr_resolved() noexcept
{
	return resolved(EpState::resolving_addr, EpState::resolving_route, EpAction::resolve_route);
}

EpStep EpStateMachine::addr_error(int status) noexcept
{
	return resolution_failed(EpState::resolving_addr, RDMA_CM_EVENT_ADDR_ERROR, status);
}

EpStep EpStateMachine::route_resolved() noexcept
{
	return resolved(EpState::resolving_route, EpState::connecting, EpAction::connect);
}

EpStep EpStateMachine::route_error(int status) noexcept
{
	return resolution_failed(EpState::resolving_route, RDMA_CM_EVENT_ROUTE_ERROR, status);
}

EpStep EpStateMachine::connect_response() noexcept
{
	if (state_ != EpState::connecting || side_ != cm::Side::active)
		return absorb();
	if (manual_)
		return go(EpState::response_pending, EpAction::report_response);
	/* The state becomes connected only once complete() succeeds. */
	return {state_, EpAction::complete};
}

EpStep EpStateMachine::connect_error(int status) noexcept
{
	if (!attempt_in_progress())
		return absorb();
	return attempt_failed(cm::error_of(RDMA_CM_EVENT_CONNECT_ERROR, status, side_));
}

EpStep EpStateMachine::unreachable(int status) noexcept
{
	if (!attempt_in_progress())
		return absorb();
	return attempt_failed(cm::error_of(RDMA_CM_EVENT_UNREACHABLE, status, side_));
}

EpStep EpStateMachine::rejected(int status) noexcept
{
	/* ND CompleteConnect: an accepter that gives up while the connector
	 * decides (it closed, or timed out waiting) aborts the connection; the
	 * application hears of it now, not at its next call. */
	if (side_ == cm::Side::active && state_ == EpState::response_pending) {
		peer_aborted_ = true;
		return go(EpState::failed, EpAction::report_error, FI_ECONNABORTED);
	}
	const bool refused_request = side_ == cm::Side::active && state_ == EpState::connecting;
	const bool aborted_accept = side_ == cm::Side::passive && state_ == EpState::accepting;
	if (!refused_request && !aborted_accept)
		return absorb();
	return attempt_failed(cm::error_of(RDMA_CM_EVENT_REJECTED, status, side_));
}

EpStep EpStateMachine::established() noexcept
{
	/* iWARP has no reply step: MPA's reply comes to the connecting side as
	 * ESTABLISHED, its queue pair already in RTS, with the accepter's
	 * private data and read limits. It is the answer CONNECT_RESPONSE is
	 * on InfiniBand and RoCE (where a QP-less active id never sees
	 * ESTABLISHED), and goes the same way. */
	if (state_ == EpState::connecting && side_ == cm::Side::active)
		return connect_response();
	if (state_ != EpState::accepting)
		return absorb();
	return go(EpState::connected, EpAction::report_connected);
}

EpStep EpStateMachine::disconnected() noexcept
{
	switch (state_) {
	case EpState::connected:
	case EpState::shutting_down:
		return go(EpState::disconnected, EpAction::report_shutdown);
	case EpState::response_pending:
		peer_aborted_ = true;
		[[fallthrough]];
	case EpState::accepting:
		/* The peer let go before the connection was complete. */
		return go(EpState::failed, EpAction::report_error, FI_ECONNABORTED);
	default:
		return absorb();
	}
}

EpStep EpStateMachine::device_removal() noexcept
{
	switch (state_) {
	case EpState::disconnected:
	case EpState::failed:
		return absorb();
	default:
		return go(EpState::failed, EpAction::report_error, FI_ENODEV);
	}
}

EpStep EpStateMachine::other_event() noexcept
{
	return absorb();
}

EpStep EpStateMachine::on_event(rdma_cm_event_type type, int status) noexcept
{
	switch (type) {
	case RDMA_CM_EVENT_ADDR_RESOLVED: return addr_resolved();
	case RDMA_CM_EVENT_ADDR_ERROR: return addr_error(status);
	case RDMA_CM_EVENT_ROUTE_RESOLVED: return route_resolved();
	case RDMA_CM_EVENT_ROUTE_ERROR: return route_error(status);
	case RDMA_CM_EVENT_CONNECT_RESPONSE: return connect_response();
	case RDMA_CM_EVENT_CONNECT_ERROR: return connect_error(status);
	case RDMA_CM_EVENT_UNREACHABLE: return unreachable(status);
	case RDMA_CM_EVENT_REJECTED: return rejected(status);
	case RDMA_CM_EVENT_ESTABLISHED: return established();
	case RDMA_CM_EVENT_DISCONNECTED: return disconnected();
	case RDMA_CM_EVENT_DEVICE_REMOVAL: return device_removal();
	default: return other_event();
	}
}

/* Why fi_connect or fi_accept cannot begin where the connector is not
 * idle. ND: a connector is not reused after a failure it cannot retry,
 * nor after a connection (a retryable one is idle again); otherwise it is
 * already connecting or connected. */
int EpStateMachine::not_idle() const noexcept
{
	return state_ == EpState::failed || state_ == EpState::disconnected ? -FI_EOPBADSTATE : -FI_EISCONN;
}

int EpStateMachine::begin_connect() noexcept
{
	if (state_ != EpState::idle)
		return not_idle();
	if (side_ != cm::Side::active)
		return -FI_EINVAL; /* holds a request: accept or reject it */
	state_ = EpState::resolving_addr;
	return 0;
}

int EpStateMachine::begin_accept(bool has_request) noexcept
{
	if (state_ != EpState::idle)
		return not_idle();
	if (!has_request)
		return -FI_EINVAL;
	state_ = EpState::accepting;
	return 0;
}

int EpStateMachine::begin_shutdown() noexcept
{
	if (state_ != EpState::connected)
		return -FI_ENOTCONN;
	state_ = EpState::shutting_down;
	return 0;
}

int EpStateMachine::begin_complete() noexcept
{
	/* ND_CONNECTION_ABORTED after the peer gave up (reported on the EQ). */
	if (state_ == EpState::failed && peer_aborted_)
		return -FI_ECONNABORTED;
	return state_ == EpState::response_pending ? 0 : -FI_ENOTCONN;
}

int EpStateMachine::begin_reject() noexcept
{
	if (state_ != EpState::response_pending)
		return -FI_ENOTCONN;
	state_ = EpState::failed;
	return 0;
}

} // namespace nd
