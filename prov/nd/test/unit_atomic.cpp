/* unit_atomic.cpp: which atomics nd carries (nd_atomic.h). */
#include <criterion/criterion.h>

#include "nd_atomic.h"

#include <rdma/fi_errno.h>

#include <initializer_list>

using namespace nd::atomics;

namespace {

int carried(bool device, fi_datatype datatype, fi_op op, Call call)
{
	const char *why = nullptr;
	const int ret = check(device, datatype, op, call, &why);
	cr_assert(ret == 0 || why, "a refusal says why");
	return ret;
}

} // namespace

Test(atomics, the_adapters_fetch_add_and_compare_swap_on_64_bits)
{
	for (fi_datatype datatype : {FI_INT64, FI_UINT64}) {
		cr_assert_eq(carried(true, datatype, FI_SUM, Call::atomic), 0);
		cr_assert_eq(carried(true, datatype, FI_SUM, Call::fetch), 0);
		cr_assert_eq(carried(true, datatype, FI_CSWAP, Call::compare), 0);
	}
}

Test(atomics, every_other_op_and_datatype_is_refused)
{
	/* libfabric 2.x drops FI_ATOMIC_OP_LAST and FI_DATATYPE_LAST: the
	 * enumerators both versions have. */
	for (int op = FI_MIN; op <= FI_MSWAP; op++) {
		for (int datatype = FI_INT8; datatype <= FI_UINT128; datatype++) {
			const bool is64 = datatype == FI_INT64 || datatype == FI_UINT64;
			for (Call call : {Call::atomic, Call::fetch, Call::compare}) {
				const bool wanted = is64 && ((call == Call::compare) ? op == FI_CSWAP : op == FI_SUM);
				cr_assert_eq(carried(true, static_cast<fi_datatype>(datatype), static_cast<fi_op>(op), call),
					     wanted ? 0 : -FI_EOPNOTSUPP, "%s %s by %s", op_name(op), datatype_name(datatype),
					     name_of(call));
			}
		}
	}
}

Test(atomics, nothing_without_the_devices_atomics)
{
	const char *why = nullptr;
	cr_assert_eq(check(false, FI_UINT64, FI_SUM, Call::fetch, &why), -FI_EOPNOTSUPP);
	cr_assert_str_eq(why, "the device has no atomics (iWARP has none)");
}

Test(atomics, query_flags)
{
	Call call = Call::atomic;
	const char *why = nullptr;
	cr_assert_eq(call_of_query_flags(0, &call, &why), 0);
	cr_assert(call == Call::atomic);
	cr_assert_eq(call_of_query_flags(FI_FETCH_ATOMIC, &call, &why), 0);
	cr_assert(call == Call::fetch);
	cr_assert_eq(call_of_query_flags(FI_COMPARE_ATOMIC, &call, &why), 0);
	cr_assert(call == Call::compare);
	cr_assert_eq(call_of_query_flags(FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC, &call, &why), -FI_EBADFLAGS);
	cr_assert_eq(call_of_query_flags(FI_TAGGED, &call, &why), -FI_EOPNOTSUPP);
	cr_assert_eq(call_of_query_flags(FI_SEND, &call, &why), -FI_EBADFLAGS);
}

Test(atomics, names_for_the_log)
{
	cr_assert_str_eq(op_name(FI_SUM), "FI_SUM");
	cr_assert_str_eq(op_name(FI_MSWAP), "FI_MSWAP");
	cr_assert_str_eq(op_name(-1), "an unknown op");
	cr_assert_str_eq(datatype_name(FI_UINT64), "FI_UINT64");
	cr_assert_str_eq(datatype_name(99), "an unknown datatype");
}
