/*
 * nd_atomic.h: the atomics nd carries on FI_EP_MSG endpoints, and the rule
 * that says which (pure: the host's unit tests check it).
 *
 * An RC queue pair does two atomics in the adapter, each on one 64-bit word
 * at an 8-byte aligned remote address: fetch-and-add and compare-and-swap
 * (IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP). nd maps exactly
 * those, and nothing it would have to emulate:
 *
 *   fi_atomic         FI_SUM    fetch-and-add; the old value lands in a
 *                               word of the domain's that nobody reads
 *   fi_fetch_atomic   FI_SUM    fetch-and-add into the result buffer
 *   fi_compare_atomic FI_CSWAP  compare-and-swap into the result buffer
 *
 * on FI_INT64 and FI_UINT64 (two's complement: one addition for both), one
 * element a call. Every other operation and datatype is -FI_EOPNOTSUPP,
 * and so is everything on a device without atomics: iWARP (soft-iWARP,
 * Chelsio, Intel's in iWARP mode) has none.
 *
 * An atomic is a read at the responder: it takes one of the connection's
 * outbound reads (ORD) at the initiator and one of the peer's inbound reads
 * (IRD) there, so it counts against the read limits negotiated at connect,
 * exactly as an RDMA read does, and a send or write after it is fenced
 * where the endpoint's msg_order holds FI_ORDER_WAR or FI_ORDER_SAR.
 */
#ifndef ND_ATOMIC_H
#define ND_ATOMIC_H

#include <rdma/fi_atomic.h>

#include <cstddef>
#include <cstdint>

namespace nd::atomics {

/* Which of the three calls, as fi_query_atomic's flags name them. */
enum class Call { atomic, fetch, compare };

constexpr size_t kWordSize = sizeof(uint64_t);
/* The remote word's alignment the adapter requires (an unaligned atomic is
 * a remote error that ends the connection). */
constexpr uint64_t kAlignment = kWordSize;

const char *name_of(Call call) noexcept;
/* "FI_SUM", "FI_UINT64": for log lines (fi_tostr shares one buffer among
 * threads). */
const char *op_name(int op) noexcept;
const char *datatype_name(int datatype) noexcept;

/* 0 when nd carries `op` on `datatype` for `call` on a device with
 * atomics (`device_atomics`); -FI_EOPNOTSUPP otherwise, *why saying
 * why. */
int check(bool device_atomics, fi_datatype datatype, fi_op op, Call call, const char **why) noexcept;

/* fi_query_atomic's flags: 0, FI_FETCH_ATOMIC or FI_COMPARE_ATOMIC; with
 * FI_TAGGED (tagged atomics) -FI_EOPNOTSUPP, with both -FI_EBADFLAGS. */
int call_of_query_flags(uint64_t flags, Call *call, const char **why) noexcept;

} // namespace nd::atomics

#endif /* ND_ATOMIC_H */
