/*
 * fuzz_cm_data.cpp: connection management's parsers under hostile bytes.
 *
 * What a peer controls: the private data of a connect, accept or reject
 * (framed by one length byte, then on iWARP the receive-credit offer) and
 * the read limits its CM message carries; what rdma_cm reports: event types
 * and statuses. Every path must stay inside the bytes it was given (ASan),
 * give back exactly what was framed, and never report an impossible value;
 * a broken rule aborts, which libFuzzer records as a crash.
 */
#include "nd_cm_data.h"

#include <fuzzer/FuzzedDataProvider.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace nd::cm;

namespace {

[[noreturn]] void broken(const char *rule)
{
	std::fprintf(stderr, "fuzz_cm_data: broken rule: %s\n", rule);
	std::abort();
}

/* The bytes as a peer's private data, exactly as the CM delivered them. */
void as_delivered(const uint8_t *data, size_t size)
{
	/* A copy of exactly `size` bytes, so that ASan sees any read past them. */
	std::vector<uint8_t> wire(data, data + size);
	const Unframed u = unframe(wire.empty() ? nullptr : wire.data(), wire.size());
	if (u.len > wire.size())
		broken("unframe: more bytes than were delivered");
	if (u.len && (u.data < wire.data() || u.data + u.len > wire.data() + wire.size()))
		broken("unframe: data outside the delivered field");
	unsigned sum = 0;
	for (size_t i = 0; i < u.len; i++)
		sum += u.data[i];
	if (u.well_formed && !wire.empty() && u.len != wire[0])
		broken("unframe: well formed, yet not the claimed length");
	CreditOffer offer;
	if (read_credit_offer(wire.empty() ? nullptr : wire.data(), wire.size(), &offer)) {
		if (!u.well_formed || kFramingBytes + u.len + kCreditOfferBytes > wire.size())
			broken("read_credit_offer: an offer where none fits");
		/* Framed again, the same bytes and offer come back. */
		std::vector<uint8_t> again;
		if (frame(u.data, u.len, u.len, &again) != 0)
			broken("frame: refused what unframe returned");
		append_credit_offer(offer, &again);
		CreditOffer back;
		if (!read_credit_offer(again.data(), again.size(), &back) || !(back == offer))
			broken("credit offer: not the same after a round trip");
	}
	(void)sum;
}

void negotiation(FuzzedDataProvider &in)
{
	const ReadLimits wanted{in.ConsumeIntegral<uint32_t>(), in.ConsumeIntegral<uint32_t>()};
	const ReadLimits adapter{in.ConsumeIntegral<uint32_t>(), in.ConsumeIntegral<uint32_t>()};
	const ReadLimits capped = cap(wanted, adapter);
	if (capped.inbound > std::min({wanted.inbound, adapter.inbound, kWireMax}) ||
	    capped.outbound > std::min({wanted.outbound, adapter.outbound, kWireMax}))
		broken("cap: above the wanted, the adapter's or the wire's limit");
	const auto responder = in.ConsumeIntegral<uint8_t>();
	const auto initiator = in.ConsumeIntegral<uint8_t>();
	const ReadLimits settled = negotiate(capped, responder, initiator);
	if (settled.inbound > capped.inbound || settled.inbound > responder ||
	    settled.outbound > capped.outbound || settled.outbound > initiator)
		broken("negotiate: more reads than one side offered");
	const ReadLimits offer = peer_offer(responder, initiator);
	if (offer.inbound != responder || offer.outbound != initiator)
		broken("peer_offer: not the peer's values");
}

void events(FuzzedDataProvider &in)
{
	/* rdma_cm reports an enumerator (the range its values span). */
	const auto type = static_cast<rdma_cm_event_type>(in.ConsumeIntegralInRange<int>(0, RDMA_CM_EVENT_TIMEWAIT_EXIT));
	const int status = in.ConsumeIntegral<int>();
	const int error = in.ConsumeIntegralInRange<int>(1, INT32_MAX); /* a positive FI_E* */
	const Side side = in.ConsumeBool() ? Side::active : Side::passive;
	const int prov_errno = prov_errno_of(type, status, error);
	if (prov_errno <= 0)
		broken("prov_errno_of: 0 or negative");
	const char *text = prov_errno_str(prov_errno);
	if (!text || !std::strlen(text))
		broken("prov_errno_str: no text");
	text = prov_errno_str(in.ConsumeIntegral<int>());
	if (!text)
		broken("prov_errno_str: NULL for an arbitrary value");
	if (error_of(type, status, side) < 0)
		broken("error_of: negative");
	if (!event_name(type))
		broken("event_name: NULL");
	(void)peer_gave_up(type);
}

/* What the application frames comes back whole, or is refused. */
void application_data(FuzzedDataProvider &in)
{
	const size_t limit = in.ConsumeIntegralInRange<size_t>(0, 1024);
	const std::vector<uint8_t> payload = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange<size_t>(0, 1024));
	std::vector<uint8_t> wire;
	const int ret = frame(payload.data(), payload.size(), limit, &wire);
	if (ret != 0) {
		if (ret != -FI_EINVAL)
			broken("frame: an error other than -FI_EINVAL");
		return;
	}
	if (payload.size() > limit)
		broken("frame: accepted more than the limit");
	const Unframed u = unframe(wire.data(), wire.size());
	if (!u.well_formed || u.len != payload.size() ||
	    (u.len && std::memcmp(u.data, payload.data(), u.len) != 0))
		broken("frame/unframe: the bytes framed are not the bytes read back");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	as_delivered(data, size);
	FuzzedDataProvider in(data, size);
	negotiation(in);
	events(in);
	application_data(in);
	return 0;
}
