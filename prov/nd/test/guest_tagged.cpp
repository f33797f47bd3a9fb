/*
 * guest_tagged.cpp: FI_TAGGED on connected endpoints on a real device
 * (suite tagged; nd frames each message, nd_framing.h): matching by tag in
 * any order, expected and unexpected, beside untagged messages, truncation,
 * cancel, bursts past nd's receive buffers, and a raw verbs peer whose
 * frames lie. (The framing's parsing on the host: unit_framing.cpp.)
 */
#include <criterion/criterion.h>

#include "data_fixture.h"

#include <rdma/fi_tagged.h>
#include <rdma/rdma_cma.h>
#include <infiniband/verbs.h>

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <chrono>
#include <tuple>

using namespace nd::test;

TestSuite(tagged, .timeout = 120);

namespace {

fi_cq_tagged_entry wait_tagged(fid_cq *cq)
{
	return wait_cq<fi_cq_tagged_entry>(cq);
}

struct TaggedPair {
	DataFixture f;
	Side c, s;
	TaggedPair()
	{
		f.hint_caps = FI_TAGGED;
		f.open();
		cr_assert(f.info->caps & FI_TAGGED, "asked for: offered");
		DataOptions o;
		o.cq_format = FI_CQ_FORMAT_TAGGED;
		std::tie(c, s) = f.connect_data(o);
	}
	~TaggedPair()
	{
		close_side(c);
		close_side(s);
		f.close_data();
	}
};

} // namespace

Test(tagged, messages_sent_before_their_receives_match_by_tag_in_any_order)
{
	TaggedPair p;
	Buffer &src = p.f.buffer(4 * 4096);
	Buffer &dst = p.f.buffer(4 * 4096, 0xee);
	const size_t sizes[4] = {1, 100, 1000, 3000};
	for (int i = 0; i < 4; i++) {
		std::vector<uint8_t> bytes = pattern(sizes[i], static_cast<uint8_t>(i + 1));
		std::copy(bytes.begin(), bytes.end(), src.data() + 4096 * i);
		cr_assert_eq(fi_tsend(p.c.ep, src.data() + 4096 * i, sizes[i], src.desc(), 0, 0x100 + i, nullptr), 0);
	}
	for (int i = 0; i < 4; i++)
		cr_assert(wait_tagged(p.c.cq).flags & FI_TAGGED);
	/* Every message is unexpected now: receives posted in reverse order
	 * each complete at once with their own message. */
	int ctx[4];
	for (int i = 3; i >= 0; i--) {
		cr_assert_eq(fi_trecv(p.s.ep, dst.data() + 4096 * i, 4096, dst.desc(), 0, 0x100 + i, 0, &ctx[i]), 0);
		fi_cq_tagged_entry e = wait_tagged(p.s.cq);
		cr_assert_eq(e.op_context, &ctx[i]);
		cr_assert_eq(e.tag, 0x100u + i);
		cr_assert_eq(e.len, sizes[i]);
		cr_assert_eq(e.flags, FI_RECV | FI_TAGGED);
		cr_assert(dst.holds(pattern(sizes[i], static_cast<uint8_t>(i + 1)), 4096 * i));
	}
	/* Expected: the receive waits first; ignore bits widen the match. */
	cr_assert_eq(fi_trecv(p.s.ep, dst.data(), 1024, dst.desc(), 0, 0x200, 0xff, &ctx[0]), 0);
	expect_cq_empty(p.s.cq, 50);
	cr_assert_eq(fi_tsend(p.c.ep, src.data(), 10, src.desc(), 0, 0x2ab, nullptr), 0);
	fi_cq_tagged_entry e = wait_tagged(p.s.cq);
	cr_assert_eq(e.op_context, &ctx[0]);
	cr_assert_eq(e.tag, 0x2abu);
	wait_tagged(p.c.cq);
}

Test(tagged, untagged_data_inject_and_zero_bytes_keep_their_kinds)
{
	TaggedPair p;
	Buffer &src = p.f.buffer(256);
	Buffer &dst = p.f.buffer(1024, 0xee);
	int untagged, tagged;
	/* A plain receive never takes a tagged message, nor the reverse. */
	cr_assert_eq(fi_recv(p.s.ep, dst.data(), 512, dst.desc(), 0, &untagged), 0);
	cr_assert_eq(fi_trecv(p.s.ep, dst.data() + 512, 512, dst.desc(), 0, 7, 0, &tagged), 0);
	/* As much as inject_size allows, up to 64 (soft-iWARP's is 40 once
	 * the frame header is inline too). */
	const size_t injected = std::min<size_t>(64, p.f.info->tx_attr->inject_size);
	std::vector<uint8_t> a = pattern(injected, 3), b = pattern(32, 9);
	std::copy(b.begin(), b.end(), src.data() + 128);
	cr_assert_eq(fi_tinject(p.c.ep, a.data(), a.size(), 0, 7), 0, "inject: the buffer is ours again at once");
	std::fill(a.begin(), a.end(), 0);
	cr_assert_eq(fi_senddata(p.c.ep, src.data() + 128, b.size(), src.desc(), 0xfeedbeefcafeull, 0, nullptr), 0);
	fi_cq_tagged_entry first = wait_tagged(p.s.cq), second = wait_tagged(p.s.cq);
	cr_assert_eq(first.op_context, &tagged);
	cr_assert_eq(first.len, injected);
	cr_assert(dst.holds(pattern(injected, 3), 512));
	cr_assert_eq(second.op_context, &untagged);
	cr_assert_eq(second.flags, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
	cr_assert_eq(second.data, 0xfeedbeefcafeull, "all 64 bits of the data travel in the header");
	cr_assert(dst.holds(b));
	wait_tagged(p.c.cq); /* the senddata; the inject reports nothing */
	expect_cq_empty(p.c.cq, 50);
	/* Zero bytes, with a NULL buffer on both sides. */
	cr_assert_eq(fi_trecv(p.s.ep, nullptr, 0, nullptr, 0, 1, 0, &tagged), 0);
	cr_assert_eq(fi_tsend(p.c.ep, nullptr, 0, nullptr, 0, 1, nullptr), 0);
	fi_cq_tagged_entry zero = wait_tagged(p.s.cq);
	cr_assert_eq(zero.op_context, &tagged);
	cr_assert_eq(zero.len, 0u);
	wait_tagged(p.c.cq);
}

Test(tagged, short_buffers_sizes_and_cancel_fail_as_the_man_pages_say)
{
	TaggedPair p;
	const size_t max = p.f.info->ep_attr->max_msg_size;
	Buffer &src = p.f.buffer(max + 1);
	Buffer &dst = p.f.buffer(max, 0xee);
	std::vector<uint8_t> bytes = pattern(100, 5);
	std::copy(bytes.begin(), bytes.end(), src.data());
	int ctx;
	cr_assert_eq(fi_trecv(p.s.ep, dst.data(), 8, dst.desc(), 0, 3, 0, &ctx), 0);
	cr_assert_eq(fi_tsend(p.c.ep, src.data(), 100, src.desc(), 0, 3, nullptr), 0);
	fi_cq_err_entry err = wait_cq_error(p.s.cq);
	cr_assert_eq(err.err, FI_ETRUNC);
	cr_assert_eq(err.op_context, &ctx);
	cr_assert_eq(err.len, 8u);
	cr_assert_eq(err.olen, 92u);
	cr_assert_eq(err.tag, 3u);
	cr_assert(dst.holds(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 8)));
	cr_assert_eq(dst.bytes[8], 0xee, "nothing past the buffer");
	wait_tagged(p.c.cq);

	/* max_msg_size is a receive buffer's payload: exactly that fits. */
	cr_assert_eq(fi_tsend(p.c.ep, src.data(), max + 1, src.desc(), 0, 4, nullptr), -FI_EMSGSIZE);
	cr_assert_eq(fi_tsend(p.c.ep, src.data(), max, src.desc(), 0, 4, nullptr), 0);
	cr_assert_eq(fi_trecv(p.s.ep, dst.data(), max, dst.desc(), 0, 4, 0, &ctx), 0);
	cr_assert_eq(wait_tagged(p.s.cq).len, max);
	wait_tagged(p.c.cq);

	/* A waiting receive can be cancelled; a completed one cannot. */
	cr_assert_eq(fi_trecv(p.s.ep, dst.data(), 64, dst.desc(), 0, 9, 0, &ctx), 0);
	cr_assert_eq(fi_cancel(&p.s.ep->fid, &ctx), 0);
	err = wait_cq_error(p.s.cq);
	cr_assert_eq(err.err, FI_ECANCELED);
	cr_assert_eq(err.op_context, &ctx);
	cr_assert(err.flags & FI_TAGGED);
	cr_assert_eq(fi_cancel(&p.s.ep->fid, &ctx), -FI_ENOENT);
	cr_assert_eq(fi_trecvmsg(p.s.ep, nullptr, 0), -FI_EINVAL);
	/* A receive still waiting when the endpoint closes completes then. */
	cr_assert_eq(fi_trecv(p.s.ep, dst.data(), 64, dst.desc(), 0, 10, 0, &ctx), 0);
}

Test(tagged, a_burst_beyond_the_receive_buffers_arrives_whole_and_in_order)
{
	TaggedPair p;
	constexpr int kMessages = 300; /* more than nd's 64 buffers */
	Buffer &src = p.f.buffer(kMessages * 16);
	Buffer &dst = p.f.buffer(kMessages * 16, 0xee);
	for (int i = 0; i < kMessages; i++) {
		std::memset(src.data() + 16 * i, i & 0xff, 16);
		ssize_t rc;
		while ((rc = fi_tsend(p.c.ep, src.data() + 16 * i, 16, src.desc(), 0, 0x5000 + i, nullptr)) == -FI_EAGAIN) {
			fi_cq_tagged_entry e;
			while (fi_cq_read(p.c.cq, &e, 1) == 1) {
			}
			while (fi_cq_read(p.s.cq, &e, 1) == 1) { /* progress the receiver too */
			}
		}
		cr_assert_eq(rc, 0);
		fi_cq_tagged_entry e;
		(void)fi_cq_read(p.s.cq, &e, 1); /* nothing is posted: keeps nd's buffers flowing */
	}
	for (int i = kMessages - 1; i >= 0; i--) {
		int ctx;
		ssize_t rc;
		while ((rc = fi_trecv(p.s.ep, dst.data() + 16 * i, 16, dst.desc(), 0, 0x5000 + i, 0, &ctx)) == -FI_EAGAIN) {
			fi_cq_tagged_entry e;
			(void)fi_cq_read(p.c.cq, &e, 1);
		}
		cr_assert_eq(rc, 0);
		fi_cq_tagged_entry e{};
		const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
		while (fi_cq_read(p.s.cq, &e, 1) != 1) {
			cr_assert(std::chrono::steady_clock::now() < end, "message %d never matched", i);
			fi_cq_tagged_entry t;
			(void)fi_cq_read(p.c.cq, &t, 1);
		}
		cr_assert_eq(e.tag, 0x5000u + i);
		cr_assert_eq(dst.bytes[16 * i], i & 0xff);
		cr_assert_eq(dst.bytes[16 * i + 15], i & 0xff);
	}
}

namespace {

/* A peer that speaks raw verbs (librdmacm and an RC queue pair of its own)
 * to a framed endpoint, as a foreign or hostile host would. */
struct RawVerbsPeer {
	rdma_event_channel *channel = nullptr;
	rdma_cm_id *id = nullptr;
	ibv_cq *cq = nullptr;
	ibv_mr *mr = nullptr;
	uint8_t buf[256] = {};

	rdma_cm_event_type next_event(int timeout_ms = 10000)
	{
		pollfd pfd{channel->fd, POLLIN, 0};
		cr_assert_eq(poll(&pfd, 1, timeout_ms), 1, "raw peer: no CM event in %d ms", timeout_ms);
		rdma_cm_event *e = nullptr;
		cr_assert_eq(rdma_get_cm_event(channel, &e), 0);
		const rdma_cm_event_type type = e->event;
		rdma_ack_cm_event(e);
		return type;
	}
	/* Resolves, makes its queue pair and sends the connection request
	 * (nd's private data framing: a length byte, 0). */
	void connect(const sockaddr_storage &to)
	{
		channel = rdma_create_event_channel();
		cr_assert_not_null(channel);
		cr_assert_eq(rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP), 0);
		sockaddr_storage dest = to;
		cr_assert_eq(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr *>(&dest), 2000), 0);
		cr_assert_eq(next_event(), RDMA_CM_EVENT_ADDR_RESOLVED);
		cr_assert_eq(rdma_resolve_route(id, 2000), 0);
		cr_assert_eq(next_event(), RDMA_CM_EVENT_ROUTE_RESOLVED);
		cq = ibv_create_cq(id->verbs, 8, nullptr, nullptr, 0);
		cr_assert_not_null(cq);
		ibv_qp_init_attr attr{};
		attr.send_cq = attr.recv_cq = cq;
		attr.qp_type = IBV_QPT_RC;
		attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
		attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
		cr_assert_eq(rdma_create_qp(id, nullptr, &attr), 0, "rdma_create_qp: %s", strerror(errno));
		mr = ibv_reg_mr(id->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
		cr_assert_not_null(mr);
		static const uint8_t no_data[1] = {0};
		rdma_conn_param param{};
		param.private_data = no_data;
		param.private_data_len = sizeof(no_data);
		param.responder_resources = param.initiator_depth = 1;
		param.retry_count = 7;
		param.rnr_retry_count = 7;
		cr_assert_eq(rdma_connect(id, &param), 0);
	}
	/* `len` bytes of buf as one message; waits for its completion. */
	void send(size_t len)
	{
		ibv_sge sge{reinterpret_cast<uintptr_t>(buf), static_cast<uint32_t>(len), mr->lkey};
		ibv_send_wr wr{}, *bad = nullptr;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_SIGNALED;
		cr_assert_eq(ibv_post_send(id->qp, &wr, &bad), 0);
		ibv_wc wc{};
		const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
		while (ibv_poll_cq(cq, 1, &wc) == 0)
			cr_assert(std::chrono::steady_clock::now() < end, "raw peer: its send never completed");
		cr_assert_eq(wc.status, IBV_WC_SUCCESS, "raw peer: send %s", ibv_wc_status_str(wc.status));
	}
	~RawVerbsPeer()
	{
		if (id && id->qp)
			rdma_disconnect(id);
		if (mr)
			ibv_dereg_mr(mr);
		if (id && id->qp)
			rdma_destroy_qp(id);
		if (cq)
			ibv_destroy_cq(cq);
		if (id)
			rdma_destroy_id(id);
		if (channel)
			rdma_destroy_event_channel(channel);
	}
};

} // namespace

/* Bytes from the wire that are not nd's frame: a foreign magic, fewer bytes
 * than a header, a kind nd never sends. Each ends the connection
 * (FI_SHUTDOWN once, the posted receive flushed), delivers nothing into the
 * application's buffer and leaves the endpoint closable; the ASan build
 * checks that nothing was read or written outside nd's buffers. */
Test(tagged, a_peer_that_lies_in_its_frames_loses_the_connection)
{
	DataFixture f;
	f.hint_caps = FI_TAGGED;
	f.open();
	struct Lie {
		const char *what;
		size_t len;
		void (*write)(uint8_t *buf);
	};
	static const Lie lies[] = {
		{"a foreign magic", 64, [](uint8_t *b) { std::memset(b, 0x5a, 64); }},
		{"three bytes", 3, [](uint8_t *b) { b[0] = 0x44; b[1] = 0x4e; b[2] = 2; }},
		{"an unknown kind", 48, [](uint8_t *b) {
			 std::memset(b, 0, 48);
			 b[0] = 0x44; /* "ND", little-endian */
			 b[1] = 0x4e;
			 b[2] = 9;
		 }},
	};
	for (const Lie &lie : lies) {
		RawVerbsPeer peer;
		peer.connect(f.listen_addr);
		Event req = expect_event(f.eq, FI_CONNREQ, &f.pep->fid);
		DataOptions o;
		o.cq_format = FI_CQ_FORMAT_TAGGED;
		Side s;
		s.ep = f.make_ep(req.info, o, &s.cq);
		fi_freeinfo(req.info);
		cr_assert_eq(fi_enable(s.ep), 0);
		cr_assert_eq(fi_accept(s.ep, nullptr, 0), 0);
		cr_assert_eq(peer.next_event(), RDMA_CM_EVENT_ESTABLISHED, "%s", lie.what);
		expect_event(f.eq, FI_CONNECTED, &s.ep->fid);

		Buffer &dst = f.buffer(256, 0xee);
		int ctx;
		cr_assert_eq(fi_trecv(s.ep, dst.data(), 256, dst.desc(), 0, 0, ~0ull, &ctx), 0);
		lie.write(peer.buf);
		peer.send(lie.len);

		/* The message is looked at by the CQ read that finds it (framed
		 * endpoints match in software); the end of the connection comes
		 * through the EQ. An application reads both, as here. */
		bool shutdown_seen = false, receive_ended = false;
		const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
		while (!shutdown_seen || !receive_ended) {
			cr_assert(std::chrono::steady_clock::now() < end, "%s: FI_SHUTDOWN %s, the receive %s",
				  lie.what, shutdown_seen ? "seen" : "missing", receive_ended ? "ended" : "still waits");
			fi_cq_tagged_entry entry{};
			const ssize_t rc = fi_cq_read(s.cq, &entry, 1);
			cr_assert(rc == -FI_EAGAIN || rc == -FI_EAVAIL, "%s: the receive completed (%zd)", lie.what, rc);
			if (rc == -FI_EAVAIL) {
				cr_assert_not(receive_ended, "%s: two error entries", lie.what);
				fi_cq_err_entry err{};
				cr_assert_eq(fi_cq_readerr(s.cq, &err, 0), 1);
				cr_assert_eq(err.op_context, &ctx);
				cr_assert_eq(err.err, FI_ECANCELED, "%s: %s", lie.what, fi_strerror(err.err));
				receive_ended = true;
			}
			Event ev = next_event(f.eq, 0);
			if (ev.rc == -FI_EAGAIN)
				continue;
			cr_assert_geq(ev.rc, 0, "%s: an EQ error entry (%s)", lie.what, fi_strerror(ev.err.err));
			cr_assert_eq(ev.type, FI_SHUTDOWN, "%s: event %u", lie.what, ev.type);
			cr_assert_eq(ev.fid, &s.ep->fid);
			cr_assert_not(shutdown_seen, "%s: FI_SHUTDOWN twice", lie.what);
			shutdown_seen = true;
		}
		cr_assert(std::all_of(dst.bytes.begin(), dst.bytes.end(), [](uint8_t b) { return b == 0xee; }),
			  "%s: bytes reached the application's buffer", lie.what);
		cr_assert_lt(fi_tsend(s.ep, dst.data(), 8, dst.desc(), 0, 1, nullptr), 0, "%s: still sends", lie.what);
		close_side(s);
	}
	f.close_data();
}
