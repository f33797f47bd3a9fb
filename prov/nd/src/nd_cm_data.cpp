/* nd_cm_data.cpp: private data framing, read-limit negotiation, CM errors. */
#include "nd_cm_data.h"

#include <rdma/fi_errno.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

namespace nd::cm {

namespace {

/* |value| as an int: the kernel's statuses are small, but INT_MIN has no
 * positive int and negating it is undefined (found by fuzz_cm_data). */
int magnitude(int value) noexcept
{
	if (value == std::numeric_limits<int>::min())
		return std::numeric_limits<int>::max();
	return value < 0 ? -value : value;
}

} // namespace

int frame(const void *data, size_t len, size_t user_limit, std::vector<uint8_t> *wire)
{
	/* One length byte: a limit above 255 (no transport has one today)
	 * must not frame a length the byte cannot say (fuzz_cm_data). */
	if (len > user_limit || len > std::numeric_limits<uint8_t>::max() || (len && !data))
		return -FI_EINVAL;
	wire->assign(kFramingBytes + len, 0);
	(*wire)[0] = static_cast<uint8_t>(len);
	if (len)
		std::memcpy(wire->data() + kFramingBytes, data, len);
	return 0;
}

Unframed unframe(const void *wire, size_t wire_len) noexcept
{
	Unframed out;
	if (!wire || wire_len < kFramingBytes)
		return out;
	const uint8_t *bytes = static_cast<const uint8_t *>(wire);
	size_t claimed = bytes[0];
	size_t available = wire_len - kFramingBytes;
	out.data = bytes + kFramingBytes;
	out.len = std::min(claimed, available);
	out.well_formed = claimed <= available;
	return out;
}

void append_credit_offer(const CreditOffer &offer, std::vector<uint8_t> *wire)
{
	uint8_t bytes[kCreditOfferBytes];
	for (size_t i = 0; i < 8; i++)
		bytes[i] = static_cast<uint8_t>(offer.addr >> (8 * i));
	for (size_t i = 0; i < 4; i++) {
		bytes[8 + i] = static_cast<uint8_t>(offer.rkey >> (8 * i));
		bytes[12 + i] = static_cast<uint8_t>(offer.posted >> (8 * i));
	}
	bytes[16] = offer.inbound;
	bytes[17] = offer.outbound;
	bytes[18] = static_cast<uint8_t>((offer.data_slots_log2 & ~kReadyHandshakeBit) |
					 (offer.ready_handshake ? kReadyHandshakeBit : 0));
	wire->insert(wire->end(), bytes, bytes + kCreditOfferBytes);
}

bool read_credit_offer(const void *wire, size_t wire_len, CreditOffer *out) noexcept
{
	const Unframed data = unframe(wire, wire_len);
	if (!data.data || !data.well_formed)
		return false;
	const size_t at = kFramingBytes + data.len;
	if (wire_len - at < kCreditOfferBytes)
		return false;
	const uint8_t *bytes = static_cast<const uint8_t *>(wire) + at;
	CreditOffer offer;
	for (size_t i = 0; i < 8; i++)
		offer.addr |= static_cast<uint64_t>(bytes[i]) << (8 * i);
	for (size_t i = 0; i < 4; i++) {
		offer.rkey |= static_cast<uint32_t>(bytes[8 + i]) << (8 * i);
		offer.posted |= static_cast<uint32_t>(bytes[12 + i]) << (8 * i);
	}
	offer.inbound = bytes[16];
	offer.outbound = bytes[17];
	offer.data_slots_log2 = static_cast<uint8_t>(bytes[18] & ~kReadyHandshakeBit);
	offer.ready_handshake = (bytes[18] & kReadyHandshakeBit) != 0;
	*out = offer;
	return true;
}

ReadLimits cap(ReadLimits wanted, ReadLimits adapter) noexcept
{
	return {std::min({wanted.inbound, adapter.inbound, kWireMax}),
		std::min({wanted.outbound, adapter.outbound, kWireMax})};
}

ReadLimits negotiate(ReadLimits own_capped, uint8_t responder_resources,
		     uint8_t initiator_depth) noexcept
{
	return {std::min<uint32_t>(own_capped.inbound, responder_resources),
		std::min<uint32_t>(own_capped.outbound, initiator_depth)};
}

ReadLimits peer_offer(uint8_t responder_resources, uint8_t initiator_depth) noexcept
{
	return {responder_resources, initiator_depth};
}

int error_of(rdma_cm_event_type type, int status, Side side) noexcept
{
	const int err = magnitude(status);
	switch (type) {
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		if (err == ENETUNREACH)
			return FI_ENETUNREACH;
		if (err == ETIMEDOUT)
			return FI_ETIMEDOUT;
		if (err == ENODEV)
			return FI_ENODEV;
		return FI_EHOSTUNREACH;
	case RDMA_CM_EVENT_UNREACHABLE:
		if (side == Side::passive)
			return err == ETIMEDOUT ? FI_ETIMEDOUT : FI_ECONNABORTED;
		return err == ETIMEDOUT ? FI_ETIMEDOUT : FI_EHOSTUNREACH;
	case RDMA_CM_EVENT_REJECTED:
		/* On the passive side a reject can only come after our accept:
		 * the connecting peer refused (ND Reject after Connect). */
		return side == Side::passive ? FI_ECONNABORTED : FI_ECONNREFUSED;
	case RDMA_CM_EVENT_CONNECT_ERROR:
		return side == Side::passive ? FI_ECONNABORTED
					     : (err == ETIMEDOUT ? FI_ETIMEDOUT : FI_ECONNREFUSED);
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		return FI_ENODEV;
	default:
		return 0;
	}
}

int prov_errno_of(rdma_cm_event_type type, int status, int error) noexcept
{
	if (type == RDMA_CM_EVENT_REJECTED && status > 0 && status < kRejectReasonBase)
		return kRejectReasonBase + status;
	if (status < 0)
		return magnitude(status);
	return status ? status : error;
}

const char *prov_errno_str(int prov_errno) noexcept
{
	if (prov_errno < kRejectReasonBase)
		return std::strerror(magnitude(prov_errno));
	if (prov_errno >= kAsyncEventBase)
		return ibv_event_type_str(static_cast<ibv_event_type>(prov_errno - kAsyncEventBase));
	/* IB CM reject reasons (IBTA, CM REJ "Reason"), the ones rdma_cm and
	 * its peers send. */
	switch (prov_errno - kRejectReasonBase) {
	case 1: return "connection rejected: no queue pair available at the peer";
	case 3: return "connection rejected: no resources at the peer";
	case 4: return "connection rejected: the peer timed out";
	case 5: return "connection rejected: unsupported request";
	case kRejectInvalidServiceId:
		return "connection refused: nobody listens on that port (invalid service ID)";
	case 10: return "connection rejected: stale connection";
	case 26: return "connection rejected: invalid MTU";
	case 27: return "connection rejected: insufficient responder resources";
	case kRejectConsumer: return "connection rejected by the peer's application";
	case 29: return "connection rejected: invalid RNR retry count";
	case 30: return "connection rejected: duplicate local communication ID";
	default: return "connection rejected by the peer's connection manager";
	}
}

const char *event_name(rdma_cm_event_type type) noexcept
{
	switch (type) {
	case RDMA_CM_EVENT_ADDR_RESOLVED: return "ADDR_RESOLVED";
	case RDMA_CM_EVENT_ADDR_ERROR: return "ADDR_ERROR";
	case RDMA_CM_EVENT_ROUTE_RESOLVED: return "ROUTE_RESOLVED";
	case RDMA_CM_EVENT_ROUTE_ERROR: return "ROUTE_ERROR";
	case RDMA_CM_EVENT_CONNECT_REQUEST: return "CONNECT_REQUEST";
	case RDMA_CM_EVENT_CONNECT_RESPONSE: return "CONNECT_RESPONSE";
	case RDMA_CM_EVENT_CONNECT_ERROR: return "CONNECT_ERROR";
	case RDMA_CM_EVENT_UNREACHABLE: return "UNREACHABLE";
	case RDMA_CM_EVENT_REJECTED: return "REJECTED";
	case RDMA_CM_EVENT_ESTABLISHED: return "ESTABLISHED";
	case RDMA_CM_EVENT_DISCONNECTED: return "DISCONNECTED";
	case RDMA_CM_EVENT_DEVICE_REMOVAL: return "DEVICE_REMOVAL";
	case RDMA_CM_EVENT_MULTICAST_JOIN: return "MULTICAST_JOIN";
	case RDMA_CM_EVENT_MULTICAST_ERROR: return "MULTICAST_ERROR";
	case RDMA_CM_EVENT_ADDR_CHANGE: return "ADDR_CHANGE";
	case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "TIMEWAIT_EXIT";
	default: return "UNKNOWN";
	}
}

bool peer_gave_up(rdma_cm_event_type type) noexcept
{
	switch (type) {
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		return true;
	default:
		return false;
	}
}

} // namespace nd::cm
