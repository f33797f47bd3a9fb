/*
 * guest_atomic.cpp: the adapter's atomics through nd (nd_atomic.h), on the
 * device: 64-bit fetch-and-add, add and compare-and-swap, their values
 * checked at both ends; what nd refuses at the call; what the responder
 * refuses (a bad key) breaking the connection visibly; the read limits;
 * and on iWARP, which has no atomics, the refusals.
 */
#include <criterion/criterion.h>

#include "data_fixture.h"

#include <rdma/fi_atomic.h>
#include <rdma/fi_ext_nd.h>

#include <cstring>
#include <initializer_list>

using namespace nd::test;

TestSuite(atomic, .timeout = 120);

namespace {

bool device_is_iwarp()
{
	InfoPtr info;
	InfoPtr hints = nd_hints();
	cr_assert_eq(getinfo(guest_ip(), "0", FI_SOURCE, hints.get(), &info), 0);
	return info->ep_attr->protocol == FI_PROTO_IWARP;
}

/* The remote word at offset 8 of a region peers may write. */
uint64_t word_at(const Buffer &b, size_t offset = 8)
{
	uint64_t v;
	std::memcpy(&v, b.bytes.data() + offset, sizeof(v));
	return v;
}

void set_word(Buffer &b, uint64_t v, size_t offset = 8)
{
	std::memcpy(b.bytes.data() + offset, &v, sizeof(v));
}

/* The msg forms' description of one FI_UINT64 element at TARGET. */
fi_msg_atomic uint64_msg(const fi_ioc *operand, const fi_rma_ioc *target, fi_op op, void *context = nullptr)
{
	fi_msg_atomic msg{};
	msg.msg_iov = operand;
	msg.iov_count = 1;
	msg.rma_iov = target;
	msg.rma_iov_count = 1;
	msg.datatype = FI_UINT64;
	msg.op = op;
	msg.context = context;
	return msg;
}

/* Opens the fixture asking for atomics, where the device has them. */
void open_for_atomics(DataFixture &f)
{
	f.hint_caps = FI_ATOMIC;
	f.open();
	cr_assert(f.info->caps & FI_ATOMIC);
}

/* Runs BODY on a connected pair of a fixture opened for atomics, then
 * closes it; on iWARP nothing (atomic/iwarp_refuses_every_atomic). */
template <typename Body>
void on_connected_pair(Body body)
{
	if (device_is_iwarp())
		return;
	DataFixture f;
	open_for_atomics(f);
	auto [c, s] = f.connect_data();
	body(f, c, s);
	close_side(c);
	close_side(s);
	f.close_data();
}

} // namespace

Test(atomic, fetch_add_add_and_compare_swap_land_at_both_ends)
{
	on_connected_pair([](DataFixture &f, Side c, Side s) {
		Buffer &remote = f.buffer(64, 0, FI_REMOTE_READ | FI_REMOTE_WRITE);
		Buffer &result = f.buffer(64);
		Buffer &operands = f.buffer(64);
		uint64_t *ops = reinterpret_cast<uint64_t *>(operands.data());
		uint64_t *res = reinterpret_cast<uint64_t *>(result.data());
		set_word(remote, 1000);
		int ctx;

		/* Fetch-and-add: the old value comes back, the new one is there. */
		ops[0] = 5;
		cr_assert_eq(fi_fetch_atomic(c.ep, &ops[0], 1, operands.desc(), &res[0], result.desc(), 0, remote.addr(8),
					     remote.key(), FI_UINT64, FI_SUM, &ctx), 0);
		fi_cq_data_entry e = wait_cq(c.cq);
		cr_assert_eq(e.op_context, &ctx);
		cr_assert_eq(e.flags, FI_ATOMIC | FI_READ);
		cr_assert_eq(res[0], 1000u);
		cr_assert_eq(word_at(remote), 1005u);

		/* Add (fi_atomic): no old value asked for. */
		ops[1] = 7;
		cr_assert_eq(fi_atomic(c.ep, &ops[1], 1, operands.desc(), 0, remote.addr(8), remote.key(), FI_UINT64,
				       FI_SUM, &ctx), 0);
		e = wait_cq(c.cq);
		cr_assert_eq(e.flags, FI_ATOMIC | FI_WRITE);
		cr_assert_eq(word_at(remote), 1012u);

		/* FI_INT64: two's complement, the same addition. */
		int64_t minus = -12;
		cr_assert_eq(fi_fetch_atomic(c.ep, &minus, 1, nullptr, &res[1], result.desc(), 0, remote.addr(8),
					     remote.key(), FI_INT64, FI_SUM, &ctx), 0);
		wait_cq(c.cq);
		cr_assert_eq(res[1], 1012u);
		cr_assert_eq(word_at(remote), 1000u);

		/* Compare-and-swap: swapped when equal, left when not; the old value
		 * comes back either way. */
		uint64_t compare = 1000, swap = 42;
		cr_assert_eq(fi_compare_atomic(c.ep, &swap, 1, nullptr, &compare, nullptr, &res[2], result.desc(), 0,
					       remote.addr(8), remote.key(), FI_UINT64, FI_CSWAP, &ctx), 0);
		e = wait_cq(c.cq);
		cr_assert_eq(e.flags, FI_ATOMIC | FI_READ);
		cr_assert_eq(res[2], 1000u);
		cr_assert_eq(word_at(remote), 42u);
		compare = 7;
		swap = 99;
		cr_assert_eq(fi_compare_atomic(c.ep, &swap, 1, nullptr, &compare, nullptr, &res[3], result.desc(), 0,
					       remote.addr(8), remote.key(), FI_UINT64, FI_CSWAP, &ctx), 0);
		wait_cq(c.cq);
		cr_assert_eq(res[3], 42u);
		cr_assert_eq(word_at(remote), 42u, "not equal: not swapped");

		/* fi_inject_atomic: no completion; an RC queue pair executes in order,
		 * so a fetch posted behind it sees its sum. */
		uint64_t eight = 8;
		cr_assert_eq(fi_inject_atomic(c.ep, &eight, 1, 0, remote.addr(8), remote.key(), FI_UINT64, FI_SUM), 0);
		eight = 0; /* the buffer is the caller's again at once */
		uint64_t zero = 0;
		cr_assert_eq(fi_fetch_atomic(c.ep, &zero, 1, nullptr, &res[4], result.desc(), 0, remote.addr(8),
					     remote.key(), FI_UINT64, FI_SUM, &ctx), 0);
		cr_assert_eq(wait_cq(c.cq).op_context, &ctx);
		cr_assert_eq(res[4], 50u);

		/* The msg forms. */
		fi_ioc operand{&ops[2], 1};
		ops[2] = 1;
		fi_rma_ioc target{remote.addr(8), 1, remote.key()};
		fi_msg_atomic msg = uint64_msg(&operand, &target, FI_SUM, &ctx);
		fi_ioc fetched{&res[5], 1};
		void *result_desc = result.desc();
		cr_assert_eq(fi_fetch_atomicmsg(c.ep, &msg, &fetched, &result_desc, 1, FI_COMPLETION), 0);
		wait_cq(c.cq);
		cr_assert_eq(res[5], 50u);
		uint64_t want = 51;
		fi_ioc comparand{&want, 1};
		ops[3] = 0xfeedULL << 32;
		operand.addr = &ops[3];
		msg.op = FI_CSWAP;
		fetched.addr = &res[6];
		cr_assert_eq(fi_compare_atomicmsg(c.ep, &msg, &comparand, nullptr, 1, &fetched, &result_desc, 1,
						  FI_COMPLETION), 0);
		wait_cq(c.cq);
		cr_assert_eq(res[6], 51u);
		cr_assert_eq(word_at(remote), 0xfeedULL << 32);
		cr_assert_eq(word_at(remote, 0), 0u, "the words around it untouched");
		cr_assert_eq(word_at(remote, 16), 0u);

		/* The target's CQ sees none of it: atomics take no receive. */
		expect_cq_empty(s.cq, 50);
		expect_cq_empty(c.cq, 50);
		send_and_check(f, c, s, 32, 1);
	});
}

Test(atomic, the_valid_calls_and_fi_query_atomic_say_exactly_what_is_carried)
{
	on_connected_pair([](DataFixture &f, Side c, Side) {
		size_t count = 0;
		cr_assert_eq(fi_atomicvalid(c.ep, FI_UINT64, FI_SUM, &count), 0);
		cr_assert_eq(count, 1u);
		cr_assert_eq(fi_fetch_atomicvalid(c.ep, FI_INT64, FI_SUM, &count), 0);
		cr_assert_eq(fi_compare_atomicvalid(c.ep, FI_UINT64, FI_CSWAP, &count), 0);
		cr_assert_eq(fi_atomicvalid(c.ep, FI_UINT64, FI_MIN, &count), -FI_EOPNOTSUPP);
		cr_assert_eq(fi_atomicvalid(c.ep, FI_UINT32, FI_SUM, &count), -FI_EOPNOTSUPP);
		cr_assert_eq(fi_fetch_atomicvalid(c.ep, FI_UINT64, FI_ATOMIC_READ, &count), -FI_EOPNOTSUPP);
		cr_assert_eq(fi_compare_atomicvalid(c.ep, FI_UINT64, FI_MSWAP, &count), -FI_EOPNOTSUPP);
		cr_assert_eq(fi_compare_atomicvalid(c.ep, FI_DOUBLE, FI_CSWAP, &count), -FI_EOPNOTSUPP);
		fi_atomic_attr attr{};
		cr_assert_eq(fi_query_atomic(f.domain, FI_UINT64, FI_CSWAP, &attr, FI_COMPARE_ATOMIC), 0);
		cr_assert_eq(attr.size, 8u);
		cr_assert_eq(attr.count, 1u);
	});
}

/* What nd can see is wrong is refused at the call, with a log line, and the
 * connection carries on: the adapter would end it for a misaligned word. */
Test(atomic, bad_input_is_refused_at_the_call)
{
	on_connected_pair([](DataFixture &f, Side c, Side) {
		Buffer &remote = f.buffer(64, 0, FI_REMOTE_READ | FI_REMOTE_WRITE);
		Buffer &result = f.buffer(64);
		uint64_t one = 1, two[2] = {1, 2};
		uint64_t *res = reinterpret_cast<uint64_t *>(result.data());
		cr_assert_eq(fi_fetch_atomic(c.ep, &one, 1, nullptr, res, result.desc(), 0, remote.addr(4), remote.key(),
					     FI_UINT64, FI_SUM, nullptr), -FI_EINVAL, "misaligned");
		cr_assert_eq(fi_fetch_atomic(c.ep, two, 2, nullptr, res, result.desc(), 0, remote.addr(8), remote.key(),
					     FI_UINT64, FI_SUM, nullptr), -FI_EINVAL, "two elements");
		cr_assert_eq(fi_fetch_atomic(c.ep, &one, 1, nullptr, res, result.desc(), 0, remote.addr(8), remote.key(),
					     FI_UINT64, FI_MAX, nullptr), -FI_EOPNOTSUPP);
		cr_assert_eq(fi_atomic(c.ep, &one, 1, nullptr, 0, remote.addr(8), remote.key(), FI_UINT32, FI_SUM, nullptr),
			     -FI_EOPNOTSUPP);
		cr_assert_eq(fi_atomic(c.ep, &one, 1, nullptr, 0, remote.addr(8), remote.key(), FI_UINT64, FI_CSWAP,
				       nullptr), -FI_EOPNOTSUPP, "compare-and-swap is fi_compare_atomic's");
		cr_assert_eq(fi_fetch_atomic(c.ep, &one, 1, nullptr, res, nullptr, 0, remote.addr(8), remote.key(),
					     FI_UINT64, FI_SUM, nullptr), -FI_EINVAL, "FI_MR_LOCAL: the result needs its descriptor");
		cr_assert_eq(fi_fetch_atomic(c.ep, &one, 1, nullptr, nullptr, result.desc(), 0, remote.addr(8),
					     remote.key(), FI_UINT64, FI_SUM, nullptr), -FI_EINVAL, "no result buffer");
		cr_assert_eq(fi_compare_atomic(c.ep, &one, 1, nullptr, nullptr, nullptr, res, result.desc(), 0,
					       remote.addr(8), remote.key(), FI_UINT64, FI_CSWAP, nullptr), -FI_EINVAL,
			     "no compare buffer");
		cr_assert_eq(fi_atomic(c.ep, &one, 1, nullptr, 0, remote.addr(8), 1ULL << 40, FI_UINT64, FI_SUM, nullptr),
			     -FI_EINVAL, "keys are 4 bytes");
		fi_ioc operand{&one, 1};
		fi_rma_ioc target{remote.addr(8), 1, remote.key()};
		fi_msg_atomic msg = uint64_msg(&operand, &target, FI_SUM);
		msg.data = 5;
		cr_assert_eq(fi_atomicmsg(c.ep, &msg, FI_REMOTE_CQ_DATA), -FI_EOPNOTSUPP, "no immediate data with atomics");
		cr_assert_eq(fi_atomicmsg(c.ep, nullptr, 0), -FI_EINVAL);
		target.count = 2;
		cr_assert_eq(fi_atomicmsg(c.ep, &msg, 0), -FI_EINVAL, "two remote elements");
		expect_cq_empty(c.cq, 50);
		cr_assert_eq(word_at(remote), 0u, "nothing reached the peer");
		/* The connection still works. */
		cr_assert_eq(fi_fetch_atomic(c.ep, &one, 1, nullptr, res, result.desc(), 0, remote.addr(8), remote.key(),
					     FI_UINT64, FI_SUM, nullptr), 0);
		wait_cq(c.cq);
		cr_assert_eq(word_at(remote), 1u);
	});
}

/* What only the responder can see (a bad key, a region peers may not
 * write) is a remote access error: an error completion, and the connection
 * carries nothing more, as for RDMA. */
Test(atomic, bad_keys_and_read_only_regions_fail_as_errors)
{
	if (device_is_iwarp())
		return; /* atomic/iwarp_refuses_every_atomic */
	DataFixture f;
	open_for_atomics(f);
	for (int variant = 0; variant < 2; variant++) {
		auto [c, s] = f.connect_data();
		Buffer &remote = f.buffer(64, 0, variant == 0 ? FI_REMOTE_READ | FI_REMOTE_WRITE : FI_REMOTE_READ);
		Buffer &result = f.buffer(64);
		set_word(remote, 77);
		uint64_t one = 1;
		int ctx;
		const uint64_t key = variant == 0 ? remote.key() ^ 0x5a5a00 : remote.key();
		cr_assert_eq(fi_fetch_atomic(c.ep, &one, 1, nullptr, result.data(), result.desc(), 0, remote.addr(8),
					     key, FI_UINT64, FI_SUM, &ctx), 0);
		fi_cq_err_entry err = wait_cq_error(c.cq);
		cr_assert_eq(err.op_context, &ctx);
		cr_assert(err.err == FI_EACCES || err.err == FI_EIO, "variant %d: err %d (%s)", variant, err.err,
			  fi_strerror(err.err));
		cr_assert_eq(word_at(remote), 77u, "variant %d: the word is untouched", variant);
		ssize_t rc = fi_send(c.ep, result.data(), 8, result.desc(), 0, nullptr);
		cr_assert_eq(rc, -FI_ECONNABORTED, "later calls report the broken connection (rc %zd)", rc);
		close_side(c);
		close_side(s);
		while (next_event(f.eq, 300).rc != -FI_EAGAIN) {
		}
	}
	f.close_data();
}

/* ND counts an atomic as a read: it takes one of the negotiated outbound
 * reads, and none are allowed where the limit is 0. */
Test(atomic, atomics_count_against_the_negotiated_read_limit)
{
	if (device_is_iwarp())
		return; /* atomic/iwarp_refuses_every_atomic */
	DataFixture f;
	open_for_atomics(f);
	for (uint32_t limit : {0u, 1u}) {
		DataOptions o;
		o.before_enable = [limit](fid_ep *ep, bool client) {
			uint32_t value = limit;
			if (client)
				cr_assert_eq(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_ND_OUTBOUND_READ_LIMIT, &value,
						       sizeof(value)), 0);
		};
		auto [c, s] = f.connect_data(o);
		Buffer &remote = f.buffer(64, 0, FI_REMOTE_READ | FI_REMOTE_WRITE);
		Buffer &result = f.buffer(64);
		uint64_t *res = reinterpret_cast<uint64_t *>(result.data());
		uint64_t one = 1;
		int first, second;
		ssize_t rc = fi_fetch_atomic(c.ep, &one, 1, nullptr, &res[0], result.desc(), 0, remote.addr(8),
					     remote.key(), FI_UINT64, FI_SUM, &first);
		if (limit == 0) {
			cr_assert_eq(rc, -FI_EACCES, "no outbound reads, so no atomics");
		} else {
			cr_assert_eq(rc, 0);
			rc = fi_fetch_atomic(c.ep, &one, 1, nullptr, &res[1], result.desc(), 0, remote.addr(8),
					     remote.key(), FI_UINT64, FI_SUM, &second);
			if (rc == -FI_EAGAIN) {
				cr_assert_eq(wait_cq(c.cq).op_context, &first);
				cr_assert_eq(fi_fetch_atomic(c.ep, &one, 1, nullptr, &res[1], result.desc(), 0,
							     remote.addr(8), remote.key(), FI_UINT64, FI_SUM, &second),
					     0);
			} else {
				/* Only possible when the first had already completed. */
				cr_assert_eq(rc, 0);
				fi_cq_data_entry e{};
				cr_assert_eq(fi_cq_read(c.cq, &e, 1), 1, "the first was done before the second went");
				cr_assert_eq(e.op_context, &first);
			}
			cr_assert_eq(wait_cq(c.cq).op_context, &second);
			cr_assert_eq(res[0], 0u);
			cr_assert_eq(res[1], 1u);
			cr_assert_eq(word_at(remote), 2u);
		}
		close_side(c);
		close_side(s);
	}
	f.close_data();
}

/* iWARP has no atomics: nd offers none there (atomics_where_the_device_has_them
 * in guest_getinfo.cpp), and every call says so. */
Test(atomic, iwarp_refuses_every_atomic)
{
	if (!device_is_iwarp())
		return; /* the device's atomics are tested above */
	DataFixture f;
	f.open();
	cr_assert_not(f.info->caps & FI_ATOMIC);
	auto [c, s] = f.connect_data();
	Buffer &remote = f.buffer(64, 0, FI_REMOTE_READ | FI_REMOTE_WRITE);
	Buffer &result = f.buffer(64);
	uint64_t one = 1;
	size_t count;
	cr_assert_eq(fi_atomicvalid(c.ep, FI_UINT64, FI_SUM, &count), -FI_EOPNOTSUPP);
	cr_assert_eq(fi_fetch_atomic(c.ep, &one, 1, nullptr, result.data(), result.desc(), 0, remote.addr(8),
				     remote.key(), FI_UINT64, FI_SUM, nullptr), -FI_EOPNOTSUPP);
	cr_assert_eq(fi_compare_atomic(c.ep, &one, 1, nullptr, &one, nullptr, result.data(), result.desc(), 0,
				       remote.addr(8), remote.key(), FI_UINT64, FI_CSWAP, nullptr), -FI_EOPNOTSUPP);
	fi_atomic_attr attr;
	cr_assert_eq(fi_query_atomic(f.domain, FI_UINT64, FI_SUM, &attr, 0), -FI_EOPNOTSUPP);
	send_and_check(f, c, s, 32, 1);
	close_side(c);
	close_side(s);
	f.close_data();
}
