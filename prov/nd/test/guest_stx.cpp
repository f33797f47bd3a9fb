/*
 * guest_stx.cpp: the shared transmit context on a real device (suite stx):
 * its attributes, how endpoints bind it, and one budget of requests in
 * flight across its endpoints.
 */
#include <criterion/criterion.h>

#include "data_fixture.h"

#include <set>

using namespace nd::test;

TestSuite(stx, .timeout = 120);

/* fabtests shared_ctx -e msg: a shared transmit context is one budget of
 * requests in flight across its endpoints (nd_stx.h), and its attributes. */
Test(stx, shared_transmit_context_is_one_budget_for_its_endpoints)
{
	DataFixture f;
	f.open();
	fi_tx_attr tx = *f.info->tx_attr;
	tx.inject_size = f.info->tx_attr->inject_size + 1;
	fid_stx *stx = nullptr;
	cr_assert_eq(fi_stx_context(f.domain, &tx, &stx, nullptr), -FI_EINVAL,
		     "an inject size beyond the device's");
	cr_assert_null(stx);
	tx.inject_size = f.info->tx_attr->inject_size;
	tx.size = 8;
	cr_assert_eq(fi_stx_context(f.domain, &tx, &stx, nullptr), 0);
	cr_assert_eq(stx->fid.fclass, static_cast<size_t>(FI_CLASS_STX_CTX));

	/* Binding follows tx_ctx_cnt, both ways. */
	fid_ep *own = nullptr;
	cr_assert_eq(fi_endpoint(f.domain, f.info.get(), &own, nullptr), 0);
	cr_assert_eq(fi_ep_bind(own, &stx->fid, 0), -FI_EINVAL, "opened with its own context");
	cr_assert_eq(fi_close(&own->fid), 0);
	InfoPtr shared(fi_dupinfo(f.info.get()));
	shared->ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT;
	fid_ep *unbound = nullptr;
	cr_assert_eq(fi_endpoint(f.domain, shared.get(), &unbound, nullptr), 0);
	cr_assert_eq(fi_ep_bind(unbound, &f.eq->fid, 0), 0);
	cr_assert_eq(fi_enable(unbound), -FI_ENOENT, "no context bound");
	cr_assert_eq(fi_close(&unbound->fid), 0);

	DataOptions o;
	o.client_stx = stx;
	auto [c1, s1] = f.connect_data(o);
	auto [c2, s2] = f.connect_data(o);
	cr_assert_eq(fi_close(&stx->fid), -FI_EBUSY);
	Buffer &src = f.buffer(64 * 8, 0x5a);	/* a slot per send in flight */
	Buffer &dst = f.buffer(64 * 8);
	/* No receive is posted yet: the sends wait at the receiver (RNR), so
	 * all eight stay in flight, five on one connection, three on the other. */
	for (int i = 0; i < 8; i++) {
		Side &c = i < 5 ? c1 : c2;
		src.data()[64 * i] = static_cast<uint8_t>(i);
		cr_assert_eq(fi_send(c.ep, src.data() + 64 * i, 64, src.desc(), 0,
				     reinterpret_cast<void *>(uintptr_t(i + 1))),
			     0, "send %d within the budget", i);
	}
	for (fid_ep *ep : {c1.ep, c2.ep}) {
		cr_assert_eq(fi_send(ep, src.data(), 64, src.desc(), 0, nullptr), -FI_EAGAIN,
			     "the budget is spent across both endpoints");
		cr_assert_eq(fi_inject(ep, src.data(), 8, 0), -FI_EAGAIN);
	}
	for (int i = 0; i < 8; i++) {
		Side &s = i < 5 ? s1 : s2;
		cr_assert_eq(fi_recv(s.ep, dst.data() + 64 * i, 64, dst.desc(), 0, nullptr), 0);
	}
	std::set<uintptr_t> done;
	for (int i = 0; i < 8; i++) {
		done.insert(reinterpret_cast<uintptr_t>(wait_cq((i < 5 ? c1 : c2).cq).op_context));
		wait_cq((i < 5 ? s1 : s2).cq);
	}
	cr_assert_eq(done.size(), 8u);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(dst.bytes[64 * i], i, "message %d arrived in order, whole", i);
	cr_assert_eq(dst.bytes[64 * 7 + 63], 0x5a);
	/* Retired, the budget is whole again. */
	cr_assert_eq(fi_recv(s2.ep, dst.data(), 64, dst.desc(), 0, nullptr), 0);
	cr_assert_eq(fi_send(c2.ep, src.data(), 64, src.desc(), 0, nullptr), 0);
	wait_cq(c2.cq);
	wait_cq(s2.cq);
	for (Side x : {c1, s1, c2, s2})
		close_side(x);
	cr_assert_eq(fi_close(&stx->fid), 0);
	f.close_data();
}
