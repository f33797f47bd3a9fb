/*
 * fuzz_frame.cpp: the tagged framing's header and its delivery into the
 * application's buffers, under bytes a peer chose.
 *
 * A framed endpoint (nd_framing.h) reads each message's header from a
 * bounce buffer of the length the adapter reported, matches it against the
 * posted receives and scatters the payload into the first that fits. Here
 * the input is the received message (header and payload) and the shape of
 * the receive's scatter list: nothing may be read past the message or
 * written past a buffer (ASan), a header nd would not send is refused, and
 * a receive gets at most its capacity.
 */
#include "nd_framing.h"

#include <fuzzer/FuzzedDataProvider.h>

#include <endian.h>
#include <sys/uio.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

using namespace nd;

namespace {

[[noreturn]] void broken(const char *rule)
{
	std::fprintf(stderr, "fuzz_frame: broken rule: %s\n", rule);
	std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	FuzzedDataProvider in(data, size);
	/* The receive the application posted: up to kMaxSge buffers, each
	 * its own allocation so that ASan sees a write past any of them; a
	 * NULL base with a length is what a zero-length descriptor may carry. */
	const size_t count = in.ConsumeIntegralInRange<size_t>(0, kMaxSge);
	std::vector<std::unique_ptr<uint8_t[]>> buffers;
	iovec iov[kMaxSge] = {};
	size_t capacity = 0;
	for (size_t i = 0; i < count; i++) {
		const size_t len = in.ConsumeIntegralInRange<size_t>(0, 256);
		if (in.ConsumeBool() || len == 0) {
			buffers.emplace_back(new uint8_t[len ? len : 1]);
			iov[i] = {buffers.back().get(), len};
			capacity += len;
		} else {
			iov[i] = {nullptr, len};
		}
	}
	const bool receive_tagged = in.ConsumeBool();
	const uint64_t want = in.ConsumeIntegral<uint64_t>();
	const uint64_t ignore = in.ConsumeIntegral<uint64_t>();

	/* The rest is the message as it landed: exactly its length. */
	const std::vector<uint8_t> message = in.ConsumeRemainingBytes<uint8_t>();
	frame::Header header;
	if (!frame::read_header(message.data(), message.size(), &header))
		return 0;
	if (message.size() < sizeof(frame::Header))
		broken("read_header: accepted fewer bytes than a header");
	if (header.magic != frame::kMagic)
		broken("read_header: accepted a foreign magic");
	if (header.kind != static_cast<uint8_t>(frame::Kind::message) &&
	    header.kind != static_cast<uint8_t>(frame::Kind::tagged))
		broken("read_header: accepted an unknown kind");
	uint64_t wire_tag;
	std::memcpy(&wire_tag, message.data() + offsetof(frame::Header, tag), sizeof(wire_tag));
	if (header.tag != le64toh(wire_tag))
		broken("read_header: the tag is not the one sent");

	const auto kind = static_cast<frame::Kind>(header.kind);
	if (!frame::matches(receive_tagged, want, ignore, kind, header.tag))
		return 0;
	const uint8_t *payload = message.data() + sizeof(frame::Header);
	const size_t length = message.size() - sizeof(frame::Header);
	const size_t copied = frame::scatter(iov, count, payload, length);
	if (copied > length || copied > capacity)
		broken("scatter: more bytes than the message or the receive holds");
	if (copied < std::min(length, capacity))
		broken("scatter: fewer bytes than fit");
	/* The bytes delivered are the message's, in order. */
	size_t at = 0;
	for (size_t i = 0; i < count && at < copied; i++) {
		if (!iov[i].iov_base)
			continue;
		const size_t n = std::min(iov[i].iov_len, copied - at);
		if (std::memcmp(iov[i].iov_base, payload + at, n) != 0)
			broken("scatter: bytes out of order");
		at += n;
	}
	return 0;
}
