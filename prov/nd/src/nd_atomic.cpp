/* nd_atomic.cpp: which atomics nd carries (nd_atomic.h). */
#include "nd_atomic.h"

#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

namespace nd::atomics {

const char *op_name(int op) noexcept
{
	static const char *const names[] = {"FI_MIN", "FI_MAX", "FI_SUM", "FI_PROD", "FI_LOR", "FI_LAND",
					    "FI_BOR", "FI_BAND", "FI_LXOR", "FI_BXOR", "FI_ATOMIC_READ",
					    "FI_ATOMIC_WRITE", "FI_CSWAP", "FI_CSWAP_NE", "FI_CSWAP_LE",
					    "FI_CSWAP_LT", "FI_CSWAP_GE", "FI_CSWAP_GT", "FI_MSWAP", "FI_DIFF"};
	return op >= 0 && static_cast<size_t>(op) < sizeof(names) / sizeof(names[0]) ? names[op] : "an unknown op";
}

const char *datatype_name(int datatype) noexcept
{
	static const char *const names[] = {"FI_INT8", "FI_UINT8", "FI_INT16", "FI_UINT16", "FI_INT32",
					    "FI_UINT32", "FI_INT64", "FI_UINT64", "FI_FLOAT", "FI_DOUBLE",
					    "FI_FLOAT_COMPLEX", "FI_DOUBLE_COMPLEX", "FI_LONG_DOUBLE",
					    "FI_LONG_DOUBLE_COMPLEX", "FI_INT128", "FI_UINT128", "FI_FLOAT16",
					    "FI_BFLOAT16", "FI_FLOAT8_E4M3", "FI_FLOAT8_E5M2"};
	return datatype >= 0 && static_cast<size_t>(datatype) < sizeof(names) / sizeof(names[0])
		       ? names[datatype]
		       : "an unknown datatype";
}

const char *name_of(Call call) noexcept
{
	switch (call) {
	case Call::atomic: return "fi_atomic";
	case Call::fetch: return "fi_fetch_atomic";
	case Call::compare: return "fi_compare_atomic";
	}
	return "atomic";
}

int check(bool device_atomics, fi_datatype datatype, fi_op op, Call call, const char **why) noexcept
{
	if (!device_atomics) {
		*why = "the device has no atomics (iWARP has none)";
		return -FI_EOPNOTSUPP;
	}
	if (datatype != FI_INT64 && datatype != FI_UINT64) {
		*why = "the adapter's atomics are on 64-bit integers only (FI_INT64, FI_UINT64)";
		return -FI_EOPNOTSUPP;
	}
	const fi_op carried = call == Call::compare ? FI_CSWAP : FI_SUM;
	if (op != carried) {
		*why = call == Call::compare ? "compare atomics: FI_CSWAP only (the adapter's compare-and-swap)"
					     : "FI_SUM only (the adapter's fetch-and-add)";
		return -FI_EOPNOTSUPP;
	}
	return 0;
}

int call_of_query_flags(uint64_t flags, Call *call, const char **why) noexcept
{
	if (flags & FI_TAGGED) {
		*why = "tagged atomics are not offered";
		return -FI_EOPNOTSUPP;
	}
	const uint64_t kinds = flags & (FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC);
	if (flags & ~(FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC)) {
		*why = "flags other than FI_FETCH_ATOMIC and FI_COMPARE_ATOMIC";
		return -FI_EBADFLAGS;
	}
	if (kinds == (FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC)) {
		*why = "FI_FETCH_ATOMIC and FI_COMPARE_ATOMIC together";
		return -FI_EBADFLAGS;
	}
	*call = kinds == FI_FETCH_ATOMIC ? Call::fetch : kinds == FI_COMPARE_ATOMIC ? Call::compare : Call::atomic;
	return 0;
}

} // namespace nd::atomics
