/* unit_framing.cpp: the header, matching and copy of framed (FI_TAGGED)
 * messages (nd_framing.h), on the host. */
#include <criterion/criterion.h>

#include "nd_framing.h"

#include <cstring>
#include <vector>

using namespace nd;

Test(framing, header_round_trip_and_wire_layout)
{
	frame::Header h = frame::make_header(frame::Kind::tagged, 0x1122334455667788ull, true, 0xabcdefull);
	uint8_t wire[kFrameHeaderSize];
	std::memcpy(wire, &h, sizeof(wire));
	/* Little-endian on the wire: the magic "ND" first, then kind, flags. */
	cr_assert_eq(wire[0], 0x44);
	cr_assert_eq(wire[1], 0x4e);
	cr_assert_eq(wire[2], static_cast<uint8_t>(frame::Kind::tagged));
	cr_assert_eq(wire[3], frame::kHasData);
	cr_assert_eq(wire[8], 0x88, "the tag, least significant byte first");
	frame::Header back;
	cr_assert(frame::read_header(wire, sizeof(wire) + 10, &back));
	cr_assert_eq(back.tag, 0x1122334455667788ull);
	cr_assert_eq(back.data, 0xabcdefull);
	cr_assert_eq(back.kind, static_cast<uint8_t>(frame::Kind::tagged));
	frame::Header plain = frame::make_header(frame::Kind::message, 5, false, 99);
	cr_assert_eq(plain.data, 0u, "no data: none travels");
}

Test(framing, bytes_no_framed_peer_sends_are_refused)
{
	frame::Header h = frame::make_header(frame::Kind::message, 0, false, 0);
	uint8_t wire[kFrameHeaderSize];
	std::memcpy(wire, &h, sizeof(wire));
	frame::Header out;
	cr_assert_not(frame::read_header(wire, kFrameHeaderSize - 1, &out), "shorter than a header");
	uint8_t bad[kFrameHeaderSize];
	std::memcpy(bad, wire, sizeof(bad));
	bad[0] ^= 1;
	cr_assert_not(frame::read_header(bad, sizeof(bad), &out), "wrong magic");
	std::memcpy(bad, wire, sizeof(bad));
	bad[2] = 7;
	cr_assert_not(frame::read_header(bad, sizeof(bad), &out), "unknown kind");
	std::vector<uint8_t> zeros(64, 0);
	cr_assert_not(frame::read_header(zeros.data(), zeros.size(), &out));
}

Test(framing, matching_follows_kind_tag_and_ignore_bits)
{
	using frame::Kind;
	cr_assert(frame::matches(true, 0x100, 0, Kind::tagged, 0x100));
	cr_assert_not(frame::matches(true, 0x100, 0, Kind::tagged, 0x101));
	cr_assert(frame::matches(true, 0x100, 0xff, Kind::tagged, 0x1ab));
	cr_assert_not(frame::matches(true, 0x100, 0xff, Kind::tagged, 0x2ab));
	cr_assert(frame::matches(true, 0, ~0ull, Kind::tagged, 12345), "every tag");
	cr_assert_not(frame::matches(true, 0, ~0ull, Kind::message, 0), "a tagged receive takes no plain message");
	cr_assert(frame::matches(false, 0, 0, Kind::message, 0));
	cr_assert(frame::matches(false, 7, 0, Kind::message, 99), "plain receives ignore tags");
	cr_assert_not(frame::matches(false, 0, 0, Kind::tagged, 0), "a plain receive takes no tagged message");
}

Test(framing, scatter_fills_iovs_in_order_and_skips_null_buffers)
{
	std::vector<uint8_t> src(100);
	for (size_t i = 0; i < src.size(); i++)
		src[i] = static_cast<uint8_t>(i);
	uint8_t a[10], b[50];
	std::memset(b, 0xee, sizeof(b));
	iovec iov[3] = {{a, sizeof(a)}, {nullptr, 20}, {b, sizeof(b)}};
	cr_assert_eq(frame::scatter(iov, 3, src.data(), 40), 40u);
	cr_assert_eq(a[9], 9);
	cr_assert_eq(b[0], 10, "a NULL buffer takes no bytes");
	cr_assert_eq(b[29], 39);
	cr_assert_eq(b[30], 0xee, "nothing past the message");
	cr_assert_eq(frame::scatter(iov, 3, src.data(), 100), 60u, "at most what the iovs hold");
	cr_assert_eq(frame::scatter(iov, 0, src.data(), 100), 0u);
}
