/*
 * guest_srx.cpp: the shared receive context on a real device (suite srx):
 * one pool of receives serves several connections, each buffer taken once.
 * (A multi-receive buffer on it: guest_multi_recv.cpp.)
 */
#include <criterion/criterion.h>

#include "data_fixture.h"

#include <set>

using namespace nd::test;

TestSuite(srx, .timeout = 120);

Test(srx, shared_receive_context_serves_several_connections)
{
	DataFixture f;
	f.open();
	fid_ep *srx = f.shared_rx(64);
	DataOptions o;
	o.srx = srx;
	auto [c1, s1] = f.connect_data(o);
	auto [c2, s2] = f.connect_data(o);
	Buffer &pool = f.buffer(64 * 8);
	Buffer &src = f.buffer(64);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(fi_recv(srx, pool.data() + 64 * i, 64, pool.desc(), 0,
				     reinterpret_cast<void *>(uintptr_t(100 + i))), 0);
	cr_assert_eq(fi_recv(s1.ep, pool.data(), 64, pool.desc(), 0, nullptr), -FI_EOPNOTSUPP,
		     "receives go to the shared context");
	std::set<void *> contexts;
	for (int i = 0; i < 4; i++) {
		src.data()[0] = static_cast<uint8_t>(i);
		cr_assert_eq(fi_send(c1.ep, src.data(), 64, src.desc(), 0, nullptr), 0);
		wait_cq(c1.cq);
		contexts.insert(wait_cq(s1.cq).op_context);
		src.data()[0] = static_cast<uint8_t>(0x80 | i);
		cr_assert_eq(fi_send(c2.ep, src.data(), 64, src.desc(), 0, nullptr), 0);
		wait_cq(c2.cq);
		contexts.insert(wait_cq(s2.cq).op_context);
	}
	cr_assert_eq(contexts.size(), 8u, "every pooled buffer used once");
	std::multiset<uint8_t> firsts;
	for (int i = 0; i < 8; i++)
		firsts.insert(pool.bytes[64 * i]);
	cr_assert_eq(firsts.count(0x80), 1u);
	cr_assert_eq(firsts.count(3), 1u);
	cr_assert_eq(fi_close(&srx->fid), -FI_EBUSY);
	for (Side x : {c1, s1, c2, s2})
		close_side(x);
	cr_assert_eq(fi_close(&srx->fid), 0);
	f.close_data();
}
