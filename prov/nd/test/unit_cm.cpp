/*
 * unit_cm.cpp: the pure rules of connection management: private data
 * framing (hostile input included), read-limit negotiation, the meaning of
 * rdma_cm events, and the endpoint state machine for every state x event.
 */
#include <criterion/criterion.h>

#include <chrono>
#include <cstring>
#include "nd_cm_data.h"
#include "nd_credits.h"
#include "nd_flow_ctrl.h"
#include "nd_ep_state.h"

#include <rdma/fi_errno.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <functional>
#include <vector>

using namespace nd;
using namespace nd::cm;

/* ---- framing ---- */

Test(framing, every_length_round_trips_exactly)
{
	for (size_t len = 0; len <= 55; len++) {
		std::vector<uint8_t> data(len);
		for (size_t i = 0; i < len; i++)
			data[i] = static_cast<uint8_t>(i * 7 + 1);
		std::vector<uint8_t> wire;
		cr_assert_eq(frame(data.data(), len, 55, &wire), 0);
		/* The transport delivers the whole field, zero-padded. */
		std::vector<uint8_t> delivered(56, 0);
		std::copy(wire.begin(), wire.end(), delivered.begin());
		Unframed out = unframe(delivered.data(), delivered.size());
		cr_assert(out.well_formed);
		cr_assert_eq(out.len, len);
		if (len)
			cr_assert_arr_eq(out.data, data.data(), len);
	}
}

Test(framing, one_byte_over_the_limit_is_refused)
{
	std::vector<uint8_t> data(56, 1), wire{9};
	cr_assert_eq(frame(data.data(), 56, 55, &wire), -FI_EINVAL);
	cr_assert_eq(wire.size(), 1u, "nothing framed");
	cr_assert_eq(frame(nullptr, 3, 55, &wire), -FI_EINVAL);
	cr_assert_eq(frame(nullptr, 0, 55, &wire), 0);
	cr_assert_eq(wire.size(), 1u);
	cr_assert_eq(wire[0], 0);
}

/* Found by fuzz_cm_data: under a limit above 255 a 300-byte message was
 * framed with the length byte 44. One byte says at most 255. */
Test(framing, more_than_the_length_byte_can_say_is_refused)
{
	std::vector<uint8_t> data(300, 7), wire;
	cr_assert_eq(frame(data.data(), 256, 1024, &wire), -FI_EINVAL);
	cr_assert_eq(frame(data.data(), 300, 1024, &wire), -FI_EINVAL);
	cr_assert_eq(frame(data.data(), 255, 1024, &wire), 0);
	const Unframed u = unframe(wire.data(), wire.size());
	cr_assert(u.well_formed);
	cr_assert_eq(u.len, 255u);
}

/* Found by fuzz_cm_data: a status of INT_MIN was negated (undefined); it
 * reads as the largest errno-like value, positive, and still has a text. */
Test(errors, the_most_negative_status_stays_positive)
{
	const int pe = prov_errno_of(RDMA_CM_EVENT_CONNECT_ERROR, INT_MIN, FI_EIO);
	cr_assert_gt(pe, 0);
	cr_assert_not_null(prov_errno_str(pe));
	cr_assert_not_null(prov_errno_str(INT_MIN));
	cr_assert_eq(error_of(RDMA_CM_EVENT_ADDR_ERROR, INT_MIN, Side::active), FI_EHOSTUNREACH);
}

/* iWARP's receive-credit offer rides after the application's bytes, at
 * every length, and is found only where a whole one was sent. */
Test(framing, credit_offer_follows_the_application_bytes)
{
	const CreditOffer offer{0x1122334455667788ull, 0xa1b2c3d4u, 77, 16, 3, 11};
	for (size_t len = 0; len <= 229; len++) {
		std::vector<uint8_t> payload(len, static_cast<uint8_t>(len));
		std::vector<uint8_t> wire;
		cr_assert_eq(frame(payload.data(), len, 229, &wire), 0);
		append_credit_offer(offer, &wire);
		cr_assert_eq(wire.size(), 1 + len + kCreditOfferBytes);
		Unframed out = unframe(wire.data(), wire.size());
		cr_assert_eq(out.len, len, "the application's bytes are unchanged");
		CreditOffer read;
		cr_assert(read_credit_offer(wire.data(), wire.size(), &read));
		cr_assert(read == offer);
		/* One byte short of a whole offer: none. */
		cr_assert_not(read_credit_offer(wire.data(), wire.size() - 1, &read));
	}
	std::vector<uint8_t> without;
	frame("abc", 3, 229, &without);
	cr_assert_not(credit_offer_of(without).has_value());
	/* A length byte that claims more than arrived: no offer read. */
	const uint8_t hostile[] = {200, 1, 2, 3};
	CreditOffer read;
	cr_assert_not(read_credit_offer(hostile, sizeof(hostile), &read));
}

/* The first-write handshake's flag rides in the slot count's byte: each
 * reads back as it was sent, with and without the other. */
Test(framing, the_ready_handshake_flag_leaves_the_slot_count_alone)
{
	for (uint8_t slots : {0, 1, 8, 31})
		for (bool ready : {false, true}) {
			CreditOffer offer{0x1122334455667788ull, 0xa1b2c3d4u, 77, 16, 3, slots, ready};
			std::vector<uint8_t> wire;
			cr_assert_eq(frame(nullptr, 0, 229, &wire), 0);
			append_credit_offer(offer, &wire);
			cr_assert_eq(wire.size(), 1 + kCreditOfferBytes, "the offer's length is unchanged");
			CreditOffer read;
			cr_assert(read_credit_offer(wire.data(), wire.size(), &read));
			cr_assert_eq(read.data_slots_log2, slots);
			cr_assert_eq(read.ready_handshake, ready);
		}
	/* An offer from an nd that knew no handshake (its byte a count alone)
	 * asks for none. */
	std::vector<uint8_t> wire;
	frame(nullptr, 0, 229, &wire);
	append_credit_offer(CreditOffer{1, 2, 3, 4, 5, 8}, &wire);
	cr_assert_not(credit_offer_of(wire)->ready_handshake);
}

/* The accepter's ready word is where the connector writes it (the peer's
 * credit word + kReadyOffset), apart from the words the peer writes
 * otherwise, and reads as written only once written. */
Test(credits, the_ready_word_is_written_where_the_connector_aims)
{
	nd::CreditWords accepter_words{};
	nd::ReceiveCredits accepter(&accepter_words, 256);
	CreditOffer offer;
	accepter.offer(4, &offer);
	cr_assert_not(accepter.peer_ready(), "nothing written yet");
	nd::CreditWords connector_words{};
	nd::ReceiveCredits connector(&connector_words, 0);
	connector.take_offer(offer);
	cr_assert_not(connector.peer_waits(), "until the accepter's offer asks");
	connector.peer_waits_for_ready();
	cr_assert(connector.peer_waits());
	const uint64_t target = connector.peer_ready_addr();
	cr_assert_eq(target, reinterpret_cast<uintptr_t>(&accepter_words.ready));
	cr_assert(target >= offer.addr + sizeof(uint64_t) && target + sizeof(uint64_t) <= offer.addr + nd::kDataSlotsOffset,
		  "apart from the credit word and before the data slots");
	/* The write: the source's 8 bytes at the target. */
	const auto *source = reinterpret_cast<const uint64_t *>(connector.ready_source());
	cr_assert_eq(*source, 1u);
	std::memcpy(reinterpret_cast<void *>(target), source, sizeof(uint64_t));
	cr_assert(accepter.peer_ready());
	cr_assert_eq(accepter_words.granted, 0u, "the credit word untouched");
	const auto first = std::chrono::steady_clock::now();
	const auto until = accepter.ready_wait_until(first);
	cr_assert(until == first + nd::kReadyWait);
	cr_assert(accepter.ready_wait_until(first + std::chrono::seconds(5)) == until,
		  "the wait is counted from the first post that waited");
	cr_assert_not(connector.take_ready_repeat(), "no repeat before the first write");
	connector.ready_written();
	for (int i = 0; i < nd::kReadyRepeats; i++)
		cr_assert(connector.take_ready_repeat(), "repeat %d", i + 1);
	cr_assert_not(connector.take_ready_repeat(), "kReadyRepeats in all");
}

/* The receiver writes its count whenever it rose: the sender may be
 * waiting for the one receive not told of yet. */
Test(credits, the_count_is_written_whenever_it_rose)
{
	nd::CreditWords words{};
	nd::ReceiveCredits c(&words, 0);
	CreditOffer mine;
	c.offer(100, &mine);
	cr_assert_not(c.worth_writing(100), "offered: nothing new");
	cr_assert(c.worth_writing(101), "one receive the peer was not told of");
	c.advertised(101);
	cr_assert_not(c.worth_writing(101), "written");
	CreditOffer peer{};
	peer.posted = 5;
	c.take_offer(peer);
	cr_assert(c.peer_known());
	cr_assert_eq(c.granted(), 5u, "the offer counts before the peer writes");
	c.count_sent(5);
	cr_assert_not(c.can_send());
	words.granted = 6; /* the peer's write */
	cr_assert(c.can_send());
	c.take_no_offer();
	words.granted = 0;
	cr_assert(c.can_send(), "a peer that offered nothing is not counted");
	cr_assert_not(c.write_pending());
	c.hold_write();
	cr_assert(c.write_pending());
	c.write_done();
	cr_assert_not(c.write_pending());
	cr_assert_eq(c.stage_count(102), reinterpret_cast<uintptr_t>(&words.outgoing));
	cr_assert_eq(words.outgoing, 102u, "the count goes out from the registered word");
}

/* Remote CQ data on iWARP: a slot names the receive it was written for,
 * and the offer says how many slots follow the credit word. */
Test(credits, a_data_slot_names_its_receive)
{
	using nd::DataSlot;
	using nd::DataSlotKind;
	const uint64_t word = DataSlot::encode(DataSlotKind::write, 0x1234567, 0xdeadbeef);
	const DataSlot slot = DataSlot::decode(word);
	cr_assert_eq(slot.kind, DataSlotKind::write);
	cr_assert_eq(slot.data, 0xdeadbeefu);
	cr_assert_eq(slot.seq, 0x234567u, "the low 24 bits of the receive's number");
	cr_assert(slot.belongs_to(0x234567));
	cr_assert(slot.belongs_to(0xff234567), "only the low 24 bits are compared");
	cr_assert_not(slot.belongs_to(0x234568), "another receive's");
	cr_assert_not(DataSlot::decode(0).belongs_to(0), "an empty slot is nobody's");
	cr_assert_not(DataSlot::decode(uint64_t{7} << 32).belongs_to(0), "a kind nd never writes");
	cr_assert_eq(DataSlot::decode(DataSlot::encode(DataSlotKind::message, 5, 0)).kind, DataSlotKind::message);

	nd::CreditWords words{};
	nd::ReceiveCredits receiver(&words, 256);
	CreditOffer offer;
	receiver.offer(0, &offer);
	offer.rkey = 1; /* as a registered word's */
	cr_assert_eq(offer.data_slots_log2, 8);
	nd::CreditWords sender_words{};
	nd::ReceiveCredits sender(&sender_words, 0);
	sender.take_offer(offer);
	cr_assert(sender.carries_data());
	sender.count_sent(257);
	cr_assert_eq(sender.next_slot_address(), offer.addr + nd::kDataSlotsOffset + nd::kDataSlotBytes, "message 257 takes slot 1");
	offer.data_slots_log2 = 0;
	nd::ReceiveCredits without(&sender_words, 0);
	without.take_offer(offer);
	cr_assert_not(without.carries_data(), "a peer that offered no slots takes no data");
}

Test(framing, hostile_length_byte_is_cut_to_the_field)
{
	uint8_t wire[8] = {200, 1, 2, 3, 4, 5, 6, 7};
	Unframed out = unframe(wire, sizeof(wire));
	cr_assert_not(out.well_formed);
	cr_assert_eq(out.len, 7u);
	cr_assert_eq(out.data, wire + 1);
}

Test(framing, empty_and_truncated_input)
{
	Unframed none = unframe(nullptr, 0);
	cr_assert_eq(none.len, 0u);
	cr_assert(none.well_formed);
	uint8_t zero[56] = {};
	cr_assert_eq(unframe(zero, sizeof(zero)).len, 0u, "no data sent: all zero");
	uint8_t only_length[1] = {5};
	Unframed cut = unframe(only_length, 1);
	cr_assert_eq(cut.len, 0u);
	cr_assert_not(cut.well_formed);
	cr_assert_eq(unframe(only_length, 0).len, 0u);
	cr_assert_eq(unframe(nullptr, 10).len, 0u, "NULL with a length is empty, not a crash");
}

/* ---- read limits ---- */

Test(read_limits, capped_by_the_adapter_and_the_wire)
{
	cr_assert(cap({1000, 2}, {128, 128}) == (ReadLimits{128, 2}));
	cr_assert(cap({4, 4}, {16, 8}) == (ReadLimits{4, 4}));
	cr_assert(cap({1000, 1000}, {4096, 4096}) == (ReadLimits{255, 255}));
	cr_assert(cap({0, 0}, {16, 16}) == (ReadLimits{0, 0}));
}

Test(read_limits, negotiation_takes_the_lower_of_each_pair)
{
	/* Connector: inbound 8, outbound 4. The passive side sees the
	 * connector's outbound as responder_resources and its inbound as
	 * initiator_depth. */
	ReadLimits passive_own{16, 2};
	ReadLimits passive = negotiate(passive_own, /*responder_resources=*/4, /*initiator_depth=*/8);
	cr_assert(passive == (ReadLimits{4, 2}));
	/* The reply carries the passive side's effective values the same way
	 * round: its outbound as responder_resources, its inbound as depth. */
	ReadLimits active = negotiate({8, 4}, passive.outbound, passive.inbound);
	cr_assert(active == (ReadLimits{2, 4}));
	/* What one side may issue, the other serves. */
	cr_assert_eq(active.outbound, passive.inbound);
	cr_assert_eq(active.inbound, passive.outbound);
}

Test(read_limits, matrix_above_at_and_below)
{
	const uint32_t values[] = {0, 1, 4, 16, 128, 255};
	for (uint32_t ci : values)
		for (uint32_t co : values)
			for (uint32_t pi : values)
				for (uint32_t po : values) {
					ReadLimits c = cap({ci, co}, {16, 16});
					ReadLimits p = negotiate(cap({pi, po}, {16, 16}), c.outbound, c.inbound);
					ReadLimits a = negotiate(c, p.outbound, p.inbound);
					cr_assert_eq(a.outbound, p.inbound);
					cr_assert_eq(a.inbound, p.outbound);
					cr_assert_leq(a.outbound, 16u);
					cr_assert_leq(p.outbound, 16u);
					cr_assert_leq(a.outbound, co);
					cr_assert_leq(p.inbound, pi);
				}
}

Test(read_limits, peer_offer_as_nd_reports_it)
{
	ReadLimits offer = peer_offer(4, 8);
	cr_assert_eq(offer.inbound, 4u, "reads the peer wants to issue to us");
	cr_assert_eq(offer.outbound, 8u, "reads the peer will serve for us");
}

/* ---- errors ---- */

Test(errors, distinct_causes_keep_distinct_codes)
{
	cr_assert_eq(error_of(RDMA_CM_EVENT_ADDR_ERROR, -ENETUNREACH, Side::active), FI_ENETUNREACH);
	cr_assert_eq(error_of(RDMA_CM_EVENT_ADDR_ERROR, -EHOSTUNREACH, Side::active), FI_EHOSTUNREACH);
	cr_assert_eq(error_of(RDMA_CM_EVENT_ADDR_ERROR, -ETIMEDOUT, Side::active), FI_ETIMEDOUT);
	cr_assert_eq(error_of(RDMA_CM_EVENT_ROUTE_ERROR, -ETIMEDOUT, Side::active), FI_ETIMEDOUT);
	cr_assert_eq(error_of(RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, Side::active), FI_ETIMEDOUT);
	cr_assert_eq(error_of(RDMA_CM_EVENT_UNREACHABLE, -EIO, Side::active), FI_EHOSTUNREACH);
	cr_assert_eq(error_of(RDMA_CM_EVENT_REJECTED, kRejectConsumer, Side::active), FI_ECONNREFUSED);
	cr_assert_eq(error_of(RDMA_CM_EVENT_REJECTED, kRejectInvalidServiceId, Side::active),
		     FI_ECONNREFUSED);
	cr_assert_eq(error_of(RDMA_CM_EVENT_REJECTED, kRejectConsumer, Side::passive),
		     FI_ECONNABORTED, "the connecting peer rejected after our accept");
	cr_assert_eq(error_of(RDMA_CM_EVENT_UNREACHABLE, -EIO, Side::passive), FI_ECONNABORTED);
	cr_assert_eq(error_of(RDMA_CM_EVENT_DEVICE_REMOVAL, 0, Side::active), FI_ENODEV);
	cr_assert_eq(error_of(RDMA_CM_EVENT_ESTABLISHED, 0, Side::active), 0);
	cr_assert_eq(error_of(RDMA_CM_EVENT_TIMEWAIT_EXIT, 0, Side::passive), 0);
}

/* ---- state machine ---- */

namespace {

/* Drives a machine into `target` through the calls and events that lead
 * there in real life. */
EpStateMachine machine_in(EpState target, bool manual = false)
{
	const bool passive = target == EpState::accepting;
	EpStateMachine m(passive ? Side::passive : Side::active, manual);
	switch (target) {
	case EpState::idle:
		break;
	case EpState::resolving_addr:
		m.begin_connect();
		break;
	case EpState::resolving_route:
		m.begin_connect();
		m.addr_resolved();
		break;
	case EpState::connecting:
		m.begin_connect();
		m.addr_resolved();
		m.route_resolved();
		break;
	case EpState::response_pending: {
		EpStateMachine manual_m(Side::active, true);
		manual_m.begin_connect();
		manual_m.addr_resolved();
		manual_m.route_resolved();
		manual_m.connect_response();
		return manual_m;
	}
	case EpState::accepting:
		m.begin_accept(true);
		break;
	case EpState::connected:
		m.begin_connect();
		m.addr_resolved();
		m.route_resolved();
		m.connect_response();
		m.completed();
		break;
	case EpState::shutting_down:
		m = machine_in(EpState::connected);
		m.begin_shutdown();
		break;
	case EpState::disconnected:
		m = machine_in(EpState::connected);
		m.disconnected();
		break;
	case EpState::failed:
		/* A failure ND does not let the connector retry. */
		m.begin_connect();
		m.addr_error(-ENODEV);
		break;
	}
	cr_assert_eq(m.state(), target, "reached %s, wanted %s", to_string(m.state()),
		     to_string(target));
	return m;
}

const EpState kAllStates[] = {
	EpState::idle, EpState::resolving_addr, EpState::resolving_route, EpState::connecting,
	EpState::response_pending, EpState::accepting, EpState::connected,
	EpState::shutting_down, EpState::disconnected, EpState::failed,
};

const rdma_cm_event_type kAllEvents[] = {
	RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_ADDR_ERROR, RDMA_CM_EVENT_ROUTE_RESOLVED,
	RDMA_CM_EVENT_ROUTE_ERROR, RDMA_CM_EVENT_CONNECT_REQUEST, RDMA_CM_EVENT_CONNECT_RESPONSE,
	RDMA_CM_EVENT_CONNECT_ERROR, RDMA_CM_EVENT_UNREACHABLE, RDMA_CM_EVENT_REJECTED,
	RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_DISCONNECTED, RDMA_CM_EVENT_DEVICE_REMOVAL,
	RDMA_CM_EVENT_MULTICAST_JOIN, RDMA_CM_EVENT_MULTICAST_ERROR, RDMA_CM_EVENT_ADDR_CHANGE,
	RDMA_CM_EVENT_TIMEWAIT_EXIT,
};

/* The step expected of every (state, event) pair; absorb where the event
 * has no business in the state. */
EpStep expected(EpState s, rdma_cm_event_type e, int status, Side side)
{
	auto absorb = EpStep{s, EpAction::absorb};
	/* ND: an attempt that had no answer yet may be retried after these. */
	auto fail_with = [&](rdma_cm_event_type type) {
		const int err = error_of(type, status, side);
		const bool before_answer = s == EpState::resolving_addr ||
					   s == EpState::resolving_route || s == EpState::connecting;
		const bool retry = side == Side::active && before_answer &&
				   (err == FI_ECONNREFUSED || err == FI_ETIMEDOUT ||
				    err == FI_EHOSTUNREACH || err == FI_ENETUNREACH);
		return EpStep{retry ? EpState::idle : EpState::failed, EpAction::report_error, err};
	};
	const bool attempt = s == EpState::resolving_addr || s == EpState::resolving_route ||
			     s == EpState::connecting || s == EpState::response_pending ||
			     s == EpState::accepting;
	switch (e) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		return s == EpState::resolving_addr ? EpStep{EpState::resolving_route, EpAction::resolve_route} : absorb;
	case RDMA_CM_EVENT_ADDR_ERROR:
		return s == EpState::resolving_addr ? fail_with(e) : absorb;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		return s == EpState::resolving_route ? EpStep{EpState::connecting, EpAction::connect} : absorb;
	case RDMA_CM_EVENT_ROUTE_ERROR:
		return s == EpState::resolving_route ? fail_with(e) : absorb;
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		return s == EpState::connecting ? EpStep{EpState::connecting, EpAction::complete} : absorb;
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
		return attempt ? fail_with(e) : absorb;
	case RDMA_CM_EVENT_REJECTED:
		if (s == EpState::response_pending && side == Side::active)
			return {EpState::failed, EpAction::report_error, FI_ECONNABORTED};
		if ((s == EpState::connecting && side == Side::active) ||
		    (s == EpState::accepting && side == Side::passive))
			return fail_with(e);
		return absorb;
	case RDMA_CM_EVENT_ESTABLISHED:
		/* iWARP's reply to the connecting side (its CONNECT_RESPONSE). */
		if (s == EpState::connecting && side == Side::active)
			return {EpState::connecting, EpAction::complete};
		return s == EpState::accepting ? EpStep{EpState::connected, EpAction::report_connected} : absorb;
	case RDMA_CM_EVENT_DISCONNECTED:
		if (s == EpState::connected || s == EpState::shutting_down)
			return {EpState::disconnected, EpAction::report_shutdown};
		if (s == EpState::accepting || s == EpState::response_pending)
			return {EpState::failed, EpAction::report_error, FI_ECONNABORTED};
		return absorb;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		if (s == EpState::disconnected || s == EpState::failed)
			return absorb;
		return {EpState::failed, EpAction::report_error, FI_ENODEV};
	default:
		return absorb;
	}
}

} // namespace

Test(state_machine, every_state_times_every_event)
{
	int pairs = 0;
	for (EpState s : kAllStates)
		for (rdma_cm_event_type e : kAllEvents) {
			EpStateMachine m = machine_in(s);
			const int status = e == RDMA_CM_EVENT_REJECTED ? kRejectConsumer : -ETIMEDOUT;
			EpStep want = expected(s, e, status, m.side());
			if (s == EpState::response_pending && e == RDMA_CM_EVENT_CONNECT_RESPONSE)
				want = {s, EpAction::absorb};
			EpStep got = m.on_event(e, status);
			cr_assert(got == want, "%s x %s: got (%s, %d, %d), want (%s, %d, %d)",
				  to_string(s), event_name(e), to_string(got.next),
				  static_cast<int>(got.action), got.error, to_string(want.next),
				  static_cast<int>(want.action), want.error);
			cr_assert_eq(m.state(), got.next);
			pairs++;
		}
	cr_assert_eq(pairs, 10 * 16);
}

Test(state_machine, manual_mode_reports_the_response)
{
	EpStateMachine m(Side::active, true);
	cr_assert_eq(m.begin_connect(), 0);
	m.addr_resolved();
	m.route_resolved();
	EpStep step = m.connect_response();
	cr_assert_eq(step.action, EpAction::report_response);
	cr_assert_eq(m.state(), EpState::response_pending);
	cr_assert_eq(m.begin_complete(), 0);
	m.completed();
	cr_assert_eq(m.state(), EpState::connected);
}

Test(state_machine, iwarp_established_is_the_reply_in_both_modes)
{
	EpStateMachine automatic(Side::active, false);
	automatic.begin_connect();
	automatic.addr_resolved();
	automatic.route_resolved();
	cr_assert(automatic.established() == (EpStep{EpState::connecting, EpAction::complete}));
	automatic.completed();
	cr_assert_eq(automatic.established().action, EpAction::absorb, "only the first one counts");

	EpStateMachine manual(Side::active, true);
	manual.begin_connect();
	manual.addr_resolved();
	manual.route_resolved();
	cr_assert(manual.established() == (EpStep{EpState::response_pending, EpAction::report_response}));
	cr_assert_eq(manual.established().action, EpAction::absorb);
	cr_assert_eq(manual.begin_complete(), 0);
}

/* iWARP: a refusal after rdma_connect leaves the queue pair in error, so
 * only failures before it may be retried. */
Test(state_machine, iwarp_retries_only_what_failed_before_the_request)
{
	EpStateMachine sent(Side::active, false);
	sent.set_iwarp(true);
	sent.begin_connect();
	sent.addr_resolved();
	sent.route_resolved();
	cr_assert_eq(sent.rejected(kRejectConsumer).next, EpState::failed);
	cr_assert_eq(sent.begin_connect(), -FI_EOPBADSTATE);

	EpStateMachine unresolved(Side::active, false);
	unresolved.set_iwarp(true);
	unresolved.begin_connect();
	cr_assert_eq(unresolved.addr_error(-ENETUNREACH).next, EpState::idle);
	cr_assert_eq(unresolved.begin_connect(), 0);
}

Test(state_machine, manual_mode_reports_an_accepter_that_gives_up)
{
	for (rdma_cm_event_type e : {RDMA_CM_EVENT_REJECTED, RDMA_CM_EVENT_DISCONNECTED}) {
		EpStateMachine m = machine_in(EpState::response_pending);
		EpStep step = m.on_event(e, e == RDMA_CM_EVENT_REJECTED ? kRejectConsumer : 0);
		cr_assert(step == (EpStep{EpState::failed, EpAction::report_error, FI_ECONNABORTED}), "%s",
			  event_name(e));
		cr_assert_eq(m.begin_complete(), -FI_ECONNABORTED, "ND_CONNECTION_ABORTED");
		cr_assert_eq(m.begin_connect(), -FI_EOPBADSTATE, "answered, then aborted: not retried");
	}
}

Test(state_machine, manual_reject_leaves_the_endpoint_unusable)
{
	EpStateMachine m = machine_in(EpState::response_pending);
	cr_assert_eq(m.begin_reject(), 0);
	cr_assert_eq(m.state(), EpState::failed);
	cr_assert_eq(m.begin_connect(), -FI_EOPBADSTATE);
	cr_assert_eq(m.begin_complete(), -FI_ENOTCONN);
	cr_assert_eq(m.on_event(RDMA_CM_EVENT_DISCONNECTED, 0).action, EpAction::absorb);
}

Test(state_machine, application_calls_check_the_state)
{
	cr_assert_eq(machine_in(EpState::connected).begin_connect(), -FI_EISCONN);
	cr_assert_eq(machine_in(EpState::connecting).begin_connect(), -FI_EISCONN);
	cr_assert_eq(machine_in(EpState::failed).begin_connect(), -FI_EOPBADSTATE,
		     "a connector whose attempt failed for good cannot be reused");
	cr_assert_eq(machine_in(EpState::disconnected).begin_connect(), -FI_EOPBADSTATE);
	cr_assert_eq(machine_in(EpState::idle).begin_shutdown(), -FI_ENOTCONN);
	cr_assert_eq(machine_in(EpState::connecting).begin_shutdown(), -FI_ENOTCONN);
	cr_assert_eq(machine_in(EpState::disconnected).begin_shutdown(), -FI_ENOTCONN);
	EpStateMachine passive(Side::passive, false);
	cr_assert_eq(passive.begin_accept(false), -FI_EINVAL, "accept without a request");
	cr_assert_eq(passive.state(), EpState::idle);
	cr_assert_eq(passive.begin_connect(), -FI_EINVAL);
	cr_assert_eq(machine_in(EpState::connected).begin_accept(true), -FI_EISCONN);
	cr_assert_eq(machine_in(EpState::idle).begin_complete(), -FI_ENOTCONN);
	cr_assert_eq(machine_in(EpState::connecting).begin_reject(), -FI_ENOTCONN);
	cr_assert_eq(machine_in(EpState::connected).begin_shutdown(), 0);
}

Test(state_machine, shutdown_is_reported_exactly_once)
{
	EpStateMachine m = machine_in(EpState::connected);
	cr_assert_eq(m.begin_shutdown(), 0);
	cr_assert_eq(m.on_event(RDMA_CM_EVENT_DISCONNECTED, 0).action, EpAction::report_shutdown);
	cr_assert_eq(m.on_event(RDMA_CM_EVENT_DISCONNECTED, 0).action, EpAction::absorb);
	cr_assert_eq(m.on_event(RDMA_CM_EVENT_TIMEWAIT_EXIT, 0).action, EpAction::absorb);
	cr_assert_eq(m.on_event(RDMA_CM_EVENT_ESTABLISHED, 0).action, EpAction::absorb);
	cr_assert_eq(m.state(), EpState::disconnected);
}

/* ND Connect: NETWORK_UNREACHABLE, HOST_UNREACHABLE, CONNECTION_REFUSED and
 * IO_TIMEOUT "may be retried"; other errors end the connector. */
Test(state_machine, refused_unreachable_and_timed_out_attempts_may_be_retried)
{
	cr_assert(EpStateMachine::retryable(FI_ECONNREFUSED));
	cr_assert(EpStateMachine::retryable(FI_EHOSTUNREACH));
	cr_assert(EpStateMachine::retryable(FI_ENETUNREACH));
	cr_assert(EpStateMachine::retryable(FI_ETIMEDOUT));
	cr_assert_not(EpStateMachine::retryable(FI_ENODEV));
	cr_assert_not(EpStateMachine::retryable(FI_ECONNABORTED));
	cr_assert_not(EpStateMachine::retryable(0));

	struct Case {
		EpState from;
		rdma_cm_event_type event;
		int status;
		int error;
	} cases[] = {
		{EpState::connecting, RDMA_CM_EVENT_REJECTED, kRejectConsumer, FI_ECONNREFUSED},
		{EpState::connecting, RDMA_CM_EVENT_REJECTED, kRejectInvalidServiceId, FI_ECONNREFUSED},
		{EpState::connecting, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, FI_ETIMEDOUT},
		{EpState::connecting, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNREFUSED, FI_ECONNREFUSED},
		{EpState::resolving_addr, RDMA_CM_EVENT_ADDR_ERROR, -ENETUNREACH, FI_ENETUNREACH},
		{EpState::resolving_addr, RDMA_CM_EVENT_ADDR_ERROR, -ETIMEDOUT, FI_ETIMEDOUT},
		{EpState::resolving_route, RDMA_CM_EVENT_ROUTE_ERROR, -EHOSTUNREACH, FI_EHOSTUNREACH},
	};
	for (const Case &c : cases) {
		EpStateMachine m = machine_in(c.from);
		EpStep step = m.on_event(c.event, c.status);
		cr_assert(step == (EpStep{EpState::idle, EpAction::report_error, c.error}),
			  "%s x %s: (%s, %d, %d)", to_string(c.from), event_name(c.event),
			  to_string(step.next), static_cast<int>(step.action), step.error);
		/* fi_connect again, through the whole attempt to a connection. */
		cr_assert_eq(m.begin_connect(), 0);
		cr_assert_eq(m.addr_resolved().action, EpAction::resolve_route);
		cr_assert_eq(m.route_resolved().action, EpAction::connect);
		cr_assert_eq(m.connect_response().action, EpAction::complete);
		m.completed();
		cr_assert_eq(m.state(), EpState::connected);
	}
}

Test(state_machine, other_failures_leave_the_connector_unusable)
{
	/* No address at all: not one of ND's retryable errors. */
	EpStateMachine m = machine_in(EpState::resolving_addr);
	cr_assert_eq(m.addr_error(-ENODEV).next, EpState::failed);
	cr_assert_eq(m.begin_connect(), -FI_EOPBADSTATE);
	/* After the answer: CompleteConnect or Reject, never a retry. */
	EpStateMachine answered = machine_in(EpState::response_pending);
	cr_assert_eq(answered.unreachable(-ETIMEDOUT).next, EpState::failed);
	cr_assert_eq(answered.begin_connect(), -FI_EOPBADSTATE);
	/* The accepting side has nothing to retry. */
	EpStateMachine passive = machine_in(EpState::accepting);
	EpStep step = passive.rejected(kRejectConsumer);
	cr_assert(step == (EpStep{EpState::failed, EpAction::report_error, FI_ECONNABORTED}));
	EpStateMachine timed_out = machine_in(EpState::accepting);
	cr_assert_eq(timed_out.unreachable(-ETIMEDOUT).next, EpState::failed);
	/* A local failure of the endpoint's own action follows the same rule. */
	EpStateMachine local = machine_in(EpState::resolving_route);
	cr_assert_eq(local.attempt_failed(FI_EHOSTUNREACH).next, EpState::idle);
	EpStateMachine local_other = machine_in(EpState::connecting);
	cr_assert_eq(local_other.attempt_failed(FI_ENOMEM).next, EpState::failed);
	/* A device removal ends every attempt for good. */
	EpStateMachine removed = machine_in(EpState::connecting);
	cr_assert_eq(removed.device_removal().next, EpState::failed);
}

/* ofi_rxm's flow control (nd_flow_ctrl.h): the arithmetic both sides keep. */
Test(flow_ctrl, sends_are_unlimited_until_enabled)
{
	nd::FlowCredits flow;
	cr_assert_not(flow.enabled());
	for (int i = 0; i < 1000; i++)
		cr_assert(flow.take(false));
	cr_assert_eq(flow.peer(), nd::FlowCredits::kUnlimited);
	flow.give_back();
	cr_assert_eq(flow.peer(), nd::FlowCredits::kUnlimited);
}

Test(flow_ctrl, the_last_credit_is_for_a_priority_message)
{
	nd::FlowCredits flow;
	flow.start_sending();
	cr_assert(flow.enabled());
	cr_assert_eq(flow.peer(), 1u);
	cr_assert_not(flow.take(false), "the one credit a side starts with is the credit message's");
	cr_assert_eq(flow.peer(), 1u);
	cr_assert(flow.take(true));
	cr_assert_eq(flow.peer(), 0u);
	cr_assert_not(flow.take(true), "no credit at all: even a credit message waits");
	flow.give_back(); /* its post failed */
	cr_assert_eq(flow.peer(), 1u);
	flow.add(3);
	cr_assert(flow.take(false));
	cr_assert(flow.take(false));
	cr_assert(flow.take(false));
	cr_assert_not(flow.take(false));
	cr_assert_eq(flow.peer(), 1u);
}

Test(flow_ctrl, credits_that_come_before_enable_are_kept_for_it)
{
	nd::FlowCredits flow;
	flow.add(127); /* the peer enabled first and told its receives */
	cr_assert_not(flow.enabled());
	flow.start_sending();
	cr_assert_eq(flow.peer(), 128u, "one to start with and the 127 told before");
}

Test(flow_ctrl, the_receiver_tells_what_is_owed_from_the_threshold_on)
{
	nd::FlowCredits flow;
	cr_assert_eq(flow.due(128), 0u, "before enable nothing is told");
	flow.set_threshold(64);
	/* 128 posted before enable: the peer starts with one, so 127 are owed. */
	cr_assert_eq(flow.due(128), 127u);
	cr_assert_eq(flow.due(128), 0u, "told once");
	cr_assert_eq(flow.due(128 + 63), 0u, "63 more: below the threshold");
	cr_assert_eq(flow.due(128 + 64), 64u);
	/* The handler failed: owed again, with what was posted since. */
	flow.not_told(64);
	cr_assert_eq(flow.due(128 + 65), 65u);
	cr_assert_eq(flow.due(128 + 65), 0u);
}

Test(flow_ctrl, a_threshold_beyond_any_count_never_tells_and_never_wraps)
{
	nd::FlowCredits flow;
	flow.set_threshold(UINT64_MAX - 1);
	cr_assert_eq(flow.due(UINT64_MAX - 1), 0u);
	flow.set_threshold(UINT64_MAX / 4);
	cr_assert_eq(flow.due(1000), 0u);
	cr_assert_eq(flow.due(UINT64_MAX / 4), 0u, "owed one less than the threshold");
	cr_assert_eq(flow.due(UINT64_MAX / 4 + 1), UINT64_MAX / 4);
	flow.set_threshold(1);
	cr_assert_eq(flow.due(UINT64_MAX / 4 + 1), 0u, "told already");
	cr_assert_eq(flow.due(UINT64_MAX / 4 + 2), 1u, "threshold one: every receive");
}

Test(flow_ctrl, a_fast_path_takes_all_but_the_last_credit)
{
	nd::FlowCredits flow;
	flow.start_sending();
	flow.add(2);
	cr_assert(flow.take_kept());
	cr_assert(flow.take_kept());
	cr_assert_not(flow.take_kept(), "the last is a priority message's");
	cr_assert_eq(flow.peer(), 1u);
	cr_assert(flow.take(true));
	cr_assert_not(flow.take_kept());
	cr_assert_eq(flow.peer(), 0u);
}

Test(flow_ctrl, both_sides_together_never_send_past_the_receives_posted)
{
	/* Side B posts 8 receives and enables with threshold 4; A sends until
	 * refused, B consumes and reposts each message, and tells its credits;
	 * A never has more messages in flight than B has receives posted. */
	nd::FlowCredits a, b;
	uint64_t b_posted = 8, b_consumed = 0, in_flight = 0;
	a.start_sending();
	b.set_threshold(4);
	uint64_t told = b.due(b_posted);
	cr_assert_eq(told, 7u);
	a.add(told);
	for (int step = 0; step < 1000; step++) {
		while (a.take(false))
			in_flight++;
		cr_assert_leq(in_flight, b_posted - b_consumed, "a message past the posted receives");
		cr_assert_gt(in_flight, 0u, "A stalled with credits owed (step %d)", step);
		/* B takes one message and posts its receive again. */
		in_flight--;
		b_consumed++;
		b_posted++;
		if ((told = b.due(b_posted)))
			a.add(told);
	}
}
