/*
 * nd_api.h: one source tree for both generations of the libfabric API.
 *
 * The provider builds against libfabric 1.x headers (Debian 12: 1.17) and
 * 2.x headers (Debian 13: 2.1). It announces the API version of the headers
 * it was built with: libfabric 2.x skips a provider whose fi_version is
 * older than the version an application asks for, so a fixed "1.17" made
 * nd invisible to every application built against 2.x.
 *
 * libfabric 2.0 deprecated (with a compile-time warning) some names whose
 * meaning it keeps for applications that ask for an older API: the version
 * 1.0 registration modes FI_MR_UNSPEC/BASIC/SCALABLE, the FI_LOCAL_MR mode
 * bit and the completion orders FI_ORDER_STRICT/FI_ORDER_DATA. The provider
 * still honours them for such applications, so it needs their values; it
 * takes them from here, where they are checked against the 1.x headers,
 * rather than through the deprecated macros.
 */
#ifndef ND_API_H
#define ND_API_H

#include <rdma/fabric.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

/* The API of the headers this provider was built with. */
#define ND_API_VERSION FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)

namespace nd::api {

/*
 * The value an application stored in an enum field of libfabric's C
 * structures (fi_info's ep type, threading, progress, resource
 * management), read as the int it is: C lets any int be stored there, and
 * C++ makes loading one outside the enum's range undefined behaviour (the
 * getinfo fuzz harness found nd doing so). Compare the result with the
 * enumerators; convert back only a value that was checked.
 */
template <typename E> int enum_value(const E &field) noexcept
{
	static_assert(std::is_enum_v<E> && sizeof(E) == sizeof(int), "a C enum field");
	int value;
	std::memcpy(&value, &field, sizeof(value));
	return value;
}

/* fi_mr(3): version 1.0 registration modes, enum values of mr_mode before
 * 1.5 and still accepted (alone) after it. */
constexpr int kMrUnspec = 0;
constexpr int kMrBasic = 1 << 0;
constexpr int kMrScalable = 1 << 1;
/* fi_getinfo(3): the mode bit that stood for FI_MR_LOCAL before 1.5. */
constexpr uint64_t kModeLocalMr = 1ULL << 55;
/* fi_endpoint(3) comp_order: completions in submission order, and data
 * written before the completion that reports it. */
constexpr uint64_t kOrderStrict = 0x1FF;
constexpr uint64_t kOrderData = 1ULL << 16;

#if FI_MAJOR_VERSION < 2
static_assert(kMrUnspec == FI_MR_UNSPEC && kMrBasic == FI_MR_BASIC &&
		      kMrScalable == FI_MR_SCALABLE,
	      "libfabric's version 1.0 registration modes");
static_assert(kModeLocalMr == FI_LOCAL_MR, "libfabric's FI_LOCAL_MR mode bit");
static_assert(kOrderStrict == FI_ORDER_STRICT && kOrderData == FI_ORDER_DATA,
	      "libfabric's completion orders");
#endif

/* An application that asked for version 2.0 or later gets 2.x meanings:
 * comp_order is "provided for version 1 compatibility and should be set to
 * 0" (fi_endpoint(3), 2.x). */
constexpr bool is_v2(uint32_t version) noexcept
{
	return !FI_VERSION_LT(version, FI_VERSION(2, 0));
}

} // namespace nd::api

#endif /* ND_API_H */
