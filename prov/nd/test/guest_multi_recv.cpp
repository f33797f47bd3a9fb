/*
 * guest_multi_recv.cpp: multi-receive buffers on a real device (suite
 * multi_recv): messages packed into one buffer until less than the minimum
 * is left, on an endpoint and on a shared receive context. (Cancelling what
 * waits behind such a buffer: guest_msg.cpp; the bookkeeping on the host:
 * unit_multi_recv.cpp.)
 */
#include <criterion/criterion.h>

#include "data_fixture.h"

#include <cstring>

using namespace nd::test;

TestSuite(multi_recv, .timeout = 120);

/* fabtests multi_recv: one buffer takes message after message, packed, and
 * is released (FI_MULTI_RECV) when less than the minimum is left; a receive
 * posted behind it takes the message after that. */
Test(multi_recv, multi_receive_buffer_packs_messages_until_released)
{
	DataFixture f;
	f.open();
	{
		/* The flag needs the capability, asked when the endpoint opens. */
		fid_ep *plain = nullptr;
		cr_assert_eq(fi_endpoint(f.domain, f.info.get(), &plain, nullptr), 0);
		fid_cq *cq = f.open_cq();
		cr_assert_eq(fi_ep_bind(plain, &f.eq->fid, 0), 0);
		cr_assert_eq(fi_ep_bind(plain, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
		cr_assert_eq(fi_enable(plain), 0);
		Buffer &b = f.buffer(64);
		iovec iov{b.data(), 64};
		void *desc = b.desc();
		fi_msg msg{};
		msg.msg_iov = &iov;
		msg.desc = &desc;
		msg.iov_count = 1;
		cr_assert_eq(fi_recvmsg(plain, &msg, FI_MULTI_RECV), -FI_EBADFLAGS);
		cr_assert_eq(fi_close(&plain->fid), 0);
	}
	DataOptions o;
	o.rx_caps = FI_MULTI_RECV;
	auto [c, s] = f.connect_data(o);
	size_t min = 64, got = 0, len = sizeof(got);
	cr_assert_eq(fi_setopt(&s.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)), 0);
	cr_assert_eq(fi_getopt(&s.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &got, &len), 0);
	cr_assert_eq(got, 64u);

	Buffer &pool = f.buffer(256, 0xee);
	Buffer &after = f.buffer(64, 0xee);
	iovec iov[2] = {{pool.data(), 128}, {pool.data() + 128, 128}};
	void *descs[2] = {pool.desc(), pool.desc()};
	fi_msg msg{};
	msg.msg_iov = iov;
	msg.desc = descs;
	msg.iov_count = 2;
	msg.context = &pool;
	cr_assert_eq(fi_recvmsg(s.ep, &msg, FI_MULTI_RECV), -FI_EINVAL, "one iov per buffer");
	iov[0].iov_len = 256;
	msg.iov_count = 1;
	cr_assert_eq(fi_recvmsg(s.ep, &msg, FI_MULTI_RECV), 0);
	cr_assert_eq(fi_recv(s.ep, after.data(), 64, after.desc(), 0, &after), 0);

	/* Three messages back to back: 100 and 100 bytes fill the buffer to
	 * 56 free bytes (< 64: released), and 30 go to the receive behind it. */
	Buffer &src = f.buffer(230);
	for (size_t i = 0; i < 230; i++)
		src.data()[i] = static_cast<uint8_t>(i);
	cr_assert_eq(fi_send(c.ep, src.data(), 100, src.desc(), 0, nullptr), 0);
	cr_assert_eq(fi_send(c.ep, src.data() + 100, 100, src.desc(), 0, nullptr), 0);
	cr_assert_eq(fi_send(c.ep, src.data() + 200, 30, src.desc(), 0, nullptr), 0);
	fi_cq_data_entry first = wait_cq(s.cq);
	fi_cq_data_entry second = wait_cq(s.cq);
	fi_cq_data_entry third = wait_cq(s.cq);
	for (int i = 0; i < 3; i++)
		wait_cq(c.cq);
	cr_assert_eq(first.op_context, &pool);
	cr_assert_eq(first.buf, pool.data());
	cr_assert_eq(first.len, 100u);
	cr_assert_eq(first.flags, FI_RECV | FI_MSG, "not released yet");
	cr_assert_eq(second.op_context, &pool);
	cr_assert_eq(second.buf, pool.data() + 100, "packed right after the first");
	cr_assert_eq(second.len, 100u);
	cr_assert_eq(second.flags, FI_RECV | FI_MSG | FI_MULTI_RECV, "56 bytes left: released");
	cr_assert_eq(third.op_context, &after);
	cr_assert_eq(third.len, 30u);
	cr_assert_not(third.flags & FI_MULTI_RECV);
	cr_assert_eq(std::memcmp(pool.data(), src.data(), 200), 0, "both messages whole, in order");
	cr_assert_eq(pool.bytes[200], 0xee, "nothing beyond them");
	cr_assert_eq(std::memcmp(after.data(), src.data() + 200, 30), 0);
	close_side(c);
	close_side(s);
	f.close_data();
}

/* The same through a shared receive context, fed by two connections. */
Test(multi_recv, multi_receive_buffer_on_a_shared_receive_context)
{
	DataFixture f;
	f.open();
	fid_ep *srx = f.shared_rx(64);
	size_t min = 64;
	cr_assert_eq(fi_setopt(&srx->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)), 0);
	DataOptions o;
	o.srx = srx;
	auto [c1, s1] = f.connect_data(o);
	auto [c2, s2] = f.connect_data(o);
	Buffer &pool = f.buffer(256, 0xee);
	Buffer &after = f.buffer(64, 0xee);
	iovec iov{pool.data(), 256};
	void *desc = pool.desc();
	fi_msg msg{};
	msg.msg_iov = &iov;
	msg.desc = &desc;
	msg.iov_count = 1;
	msg.context = &pool;
	cr_assert_eq(fi_recvmsg(srx, &msg, FI_MULTI_RECV), 0);
	cr_assert_eq(fi_recv(srx, after.data(), 64, after.desc(), 0, &after), 0);
	cr_assert_eq(fi_cancel(&srx->fid, &after), -FI_ENOENT, "no CQ to report it on");
	Buffer &src = f.buffer(230);
	std::memset(src.data(), 1, 100);
	std::memset(src.data() + 100, 2, 100);
	std::memset(src.data() + 200, 3, 30);
	cr_assert_eq(fi_send(c1.ep, src.data(), 100, src.desc(), 0, nullptr), 0);
	fi_cq_data_entry one = wait_cq(s1.cq);
	cr_assert_eq(fi_send(c2.ep, src.data() + 100, 100, src.desc(), 0, nullptr), 0);
	fi_cq_data_entry two = wait_cq(s2.cq);
	cr_assert_eq(fi_send(c1.ep, src.data() + 200, 30, src.desc(), 0, nullptr), 0);
	fi_cq_data_entry three = wait_cq(s1.cq);
	cr_assert_eq(one.buf, pool.data());
	cr_assert_eq(one.flags, FI_RECV | FI_MSG);
	cr_assert_eq(two.buf, pool.data() + 100);
	cr_assert_eq(two.flags, FI_RECV | FI_MSG | FI_MULTI_RECV);
	cr_assert_eq(three.op_context, &after);
	cr_assert_eq(pool.bytes[0], 1);
	cr_assert_eq(pool.bytes[199], 2);
	cr_assert_eq(after.bytes[29], 3);
	for (Side x : {c1, s1, c2, s2})
		close_side(x);
	cr_assert_eq(fi_close(&srx->fid), 0);
	f.close_data();
}
