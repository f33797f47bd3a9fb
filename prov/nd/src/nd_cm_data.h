/*
 * nd_cm_data.h: the pure rules of connection management: framing of private
 * data, negotiation of RDMA read limits, and the meaning of rdma_cm events
 * as libfabric error codes. No device and no rdma_cm call here; every rule
 * is unit-tested on the host, hostile input included.
 */
#ifndef ND_CM_DATA_H
#define ND_CM_DATA_H

#include <rdma/rdma_cma.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace nd::cm {

/*
 * Private data on the wire: one length byte, then the application's bytes.
 * The transport always delivers its whole field, zero-padded, so the length
 * byte is what gives the receiver the exact length that was sent.
 */
constexpr size_t kFramingBytes = 1;

/* Frames `len` bytes of `data` for a message whose application limit is
 * `user_limit`. Returns 0 and fills `wire`, or -FI_EINVAL when len exceeds
 * the limit or the 255 one length byte can say, or data is NULL with
 * len > 0 (nothing is framed then). */
int frame(const void *data, size_t len, size_t user_limit, std::vector<uint8_t> *wire);

struct Unframed {
	const uint8_t *data = nullptr;
	size_t len = 0;
	/* False when the length byte claimed more than the field holds (a
	 * foreign or hostile peer); len is then cut to what is there. */
	bool well_formed = true;
};

/* Reads framed private data as delivered (`wire` may be NULL when
 * `wire_len` is 0). Never reads outside [wire, wire + wire_len). */
Unframed unframe(const void *wire, size_t wire_len) noexcept;

/*
 * iWARP: every connect and accept carries this offer after the
 * application's bytes. Receive credits (nd_credits.h): where the peer
 * writes the count of receives it has posted (addr and rkey 0 for an
 * endpoint that keeps none), and that count now; remote CQ data's slots
 * (nd_credits.h: RemoteDataSlots), which follow the credit word in the same
 * registration, as log2 of their count (0: none). Read limits: the iWARP CM
 * reports MPA's IRD/ORD as the adapter settled them, not the peer's ND
 * values, so the offerer's own travel here (the connector's offered
 * limits, the accepter's negotiated ones). Little-endian, its fields packed
 * (kCreditOfferBytes).
 */
struct CreditOffer {
	uint64_t addr = 0;	/* the offerer's credit word */
	uint32_t rkey = 0;
	uint32_t posted = 0;	/* receives posted when the offer was made */
	uint8_t inbound = 0;	/* reads the offerer serves */
	uint8_t outbound = 0;	/* reads the offerer issues */
	uint8_t data_slots_log2 = 0;	/* remote CQ data's slots: 1 << this; 0: none */
	/* The first-write handshake (nd_credits.h, "Who sends first"): a
	 * connector's offer says it writes the accepter's ready word as its
	 * first request once connected; an accepter's, that it waits for that
	 * write before it sends. Carried in the high bit of data_slots_log2's
	 * byte (kReadyHandshakeBit), which a count of slots never reaches. */
	bool ready_handshake = false;
	bool operator==(const CreditOffer &) const = default;
};
constexpr size_t kCreditOfferBytes = 19;
static_assert(kCreditOfferBytes == sizeof(CreditOffer::addr) + sizeof(CreditOffer::rkey) + sizeof(CreditOffer::posted) +
				   sizeof(CreditOffer::inbound) + sizeof(CreditOffer::outbound) +
				   sizeof(CreditOffer::data_slots_log2));
constexpr uint8_t kReadyHandshakeBit = 0x80;

/* Appends `offer` to framed private data. */
void append_credit_offer(const CreditOffer &offer, std::vector<uint8_t> *wire);
/* The offer after framed data, when the field holds one (false: none, or
 * a length byte that claims more than was received). */
bool read_credit_offer(const void *wire, size_t wire_len, CreditOffer *out) noexcept;
inline std::optional<CreditOffer> credit_offer_of(const std::vector<uint8_t> &wire) noexcept
{
	CreditOffer offer;
	if (read_credit_offer(wire.data(), wire.size(), &offer))
		return offer;
	return std::nullopt;
}

/* A pair of read limits (ND's inbound and outbound). */
struct ReadLimits {
	uint32_t inbound = 0;
	uint32_t outbound = 0;
	bool operator==(const ReadLimits &) const = default;
};

/* rdma_cm carries each limit in one byte. */
constexpr uint32_t kWireMax = 255;

/* The application's limits capped silently to the adapter's and to what
 * one byte can carry (ND Connect/Accept: larger values are capped). */
ReadLimits cap(ReadLimits wanted, ReadLimits adapter) noexcept;

/*
 * The effective limits once the peer's offer is known: rdma_cm reports the
 * peer's values from the receiver's point of view (responder_resources: reads
 * the peer will issue to us; initiator_depth: reads the peer will serve), on
 * a connect request and on a reply alike, so one rule serves both sides:
 * inbound = min(own inbound, responder_resources),
 * outbound = min(own outbound, initiator_depth).
 */
ReadLimits negotiate(ReadLimits own_capped, uint8_t responder_resources,
		     uint8_t initiator_depth) noexcept;

/* The peer's offer as ND's GetReadLimits reports it (see fi_ext_nd.h). */
ReadLimits peer_offer(uint8_t responder_resources, uint8_t initiator_depth) noexcept;

/* Which side of a connection an endpoint is: it changes what a rejection or
 * a lost peer means. */
enum class Side : uint8_t { active, passive };

/* IB CM reject reasons rdma_cm reports as the status of REJECTED. */
constexpr int kRejectConsumer = 28;	/* the peer's application rejected */
constexpr int kRejectInvalidServiceId = 8; /* no listener on that port */

/*
 * prov_errno of EQ error entries is an errno, positive. An IB CM reject
 * reason (rdma_cm's positive status of REJECTED on InfiniBand and RoCE;
 * iWARP reports -ECONNREFUSED) lies in the same small numbers (28 would read
 * as ENOSPC), so it is kept apart as kRejectReasonBase + reason.
 */
constexpr int kRejectReasonBase = 0x10000;
/* A verbs asynchronous event (nd_async.h) is kAsyncEventBase + its
 * ibv_event_type. */
constexpr int kAsyncEventBase = 0x20000;

/* The prov_errno of an error entry: rdma_cm's `status` of event `type`,
 * made positive, a reject reason moved above kRejectReasonBase; with no
 * status, `error` (the positive FI_E*, an errno value) itself. Never 0 or
 * negative. */
int prov_errno_of(rdma_cm_event_type type, int status, int error) noexcept;

/* What an EQ entry's prov_errno means, for fi_eq_strerror: strerror for an
 * errno, a sentence for a reject reason, the event's name for a verbs
 * asynchronous event. Never NULL. */
const char *prov_errno_str(int prov_errno) noexcept;

/*
 * The libfabric error (positive FI_E* value) of an rdma_cm event that ends a
 * connection attempt, or 0 for events that are not failures. ND's meanings:
 * refused (no listener, backlog, rejected) is FI_ECONNREFUSED on the active
 * side; a passive endpoint whose accepted peer rejected or vanished sees
 * FI_ECONNABORTED; address and route failures keep the kernel's distinction
 * between network and host unreachable; a request that was never answered is
 * FI_ETIMEDOUT; a removed device is FI_ENODEV.
 */
int error_of(rdma_cm_event_type type, int status, Side side) noexcept;

/* Printable name of an rdma_cm event (rdma_event_str without the library). */
const char *event_name(rdma_cm_event_type type) noexcept;

/* Whether an event on a connection request's id, before it is answered,
 * means the requester went away (rejected, timed out, disconnected, or the
 * device is gone): fi_accept must then fail with FI_ECONNABORTED. */
bool peer_gave_up(rdma_cm_event_type type) noexcept;

} // namespace nd::cm

#endif /* ND_CM_DATA_H */
