/*
 * guest_flow.cpp: ofi_rxm's credit-based flow control on a real device
 * (suite flow): the extension rxm opens on a domain ("ofix_flow_ctrl_v1"),
 * driven here as rxm drives it, with the test standing in for rxm's credit
 * messages (the handler hands the credits straight to the peer endpoint's
 * add_credits). What is checked: a message the peer told no receive for
 * waits at the call (-FI_EAGAIN), the last credit only for a priority
 * message; the receives posted are told to the peer, exactly, once at
 * least the threshold is owed; credits a handler could not send are told
 * with the next receive; and a sender held to its credits never meets the
 * device's receiver-not-ready answer, which the same stream without them
 * does (the device's hw_counters say so).
 *
 * Offered on Soft-RoCE (and InfiniBand/RoCE NICs) with a libfabric 1.x,
 * whose rxm marks its credit messages with FI_PRIORITY. On iWARP nd keeps
 * receive credits of its own, and an endpoint says it cannot keep rxm's;
 * on libfabric 2.x the domain does not offer them. Both are checked too.
 */
#include <criterion/criterion.h>

#include "data_fixture.h"

#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using namespace nd::test;

TestSuite(flow, .timeout = 120);

namespace {

/* The table as libfabric's internal include/ofi_util.h lays it out: what
 * rxm sees, written here from libfabric's header rather than nd's. */
struct FlowCtrlOps {
	size_t size;
	bool (*available)(fid_ep *ep);
	int (*enable)(fid_ep *ep, uint64_t threshold);
	void (*add_credits)(fid_ep *ep, uint64_t credits);
	void (*set_send_handler)(fid_domain *domain, ssize_t (*send_handler)(fid_ep *ep, uint64_t credits));
};

/* The handler's record (each test runs in a process of its own). */
struct Told {
	fid_ep *ep;
	uint64_t credits;
};
std::vector<Told> told;
FlowCtrlOps *ops_in_use;
fid_ep *client_ep;
fid_ep *server_ep;
int handler_failures_left; /* the next calls that fail, as a full rxm queue would */
bool hand_over = true;	   /* give told credits to the peer at once */

ssize_t record_credits(fid_ep *ep, uint64_t credits)
{
	if (handler_failures_left > 0) {
		--handler_failures_left;
		return -FI_EAGAIN;
	}
	told.push_back({ep, credits});
	if (hand_over)
		ops_in_use->add_credits(ep == client_ep ? server_ep : client_ep, credits);
	return 0;
}

/* rxm's credit messages' flag: public in libfabric 1.x only (where the
 * domain offers flow control at all). */
#ifdef FI_PRIORITY
constexpr uint64_t kPriority = FI_PRIORITY;
#else
constexpr uint64_t kPriority = 0;
#endif

bool on_iwarp() { return std::strncmp(device_name(), "siw", 3) == 0; }

/* The domain's flow-control table, or nullptr where the domain does not
 * offer one (libfabric 2.x, checked). */
FlowCtrlOps *open_flow_ctrl(DataFixture &f)
{
	void *ops = nullptr;
	const int rc = fi_open_ops(&f.domain->fid, "ofix_flow_ctrl_v1", 0, &ops, nullptr);
#ifdef FI_PRIORITY
	cr_assert_eq(rc, 0, "a libfabric 1.x domain offers rxm's flow control (%d)", rc);
	auto *table = static_cast<FlowCtrlOps *>(ops);
	cr_assert_geq(table->size, sizeof(FlowCtrlOps));
	ops_in_use = table;
	table->set_send_handler(f.domain, record_credits);
	return table;
#else
	cr_assert_eq(rc, -FI_ENOSYS, "libfabric 2.x: not offered, rxm goes on without (%d)", rc);
	static_cast<void>(&record_credits); /* the handler rxm would be given */
	return nullptr;
#endif
}

/* A connected pair whose server posts `server_receives` before flow
 * control starts, as rxm posts its receives before connecting. */
std::pair<Side, Side> connect_pair(DataFixture &f, Buffer &dst, size_t server_receives, size_t msg = 64)
{
	DataOptions o;
	o.rx_size = 64;
	o.tx_size = 64;
	auto [c, s] = f.connect_data(o);
	client_ep = c.ep;
	server_ep = s.ep;
	for (size_t i = 0; i < server_receives; i++)
		cr_assert_eq(fi_recv(s.ep, dst.data() + msg * i, msg, dst.desc(), 0, nullptr), 0);
	return {c, s};
}

/* The device's counter NAME of port 1 (rxe's hw_counters), or -1. */
long long hw_counter(const char *name)
{
	std::ifstream in(std::string("/sys/class/infiniband/") + device_name() + "/ports/1/hw_counters/" + name);
	long long value = -1;
	if (!(in >> value))
		return -1;
	return value;
}

void close_pair(DataFixture &f, Side c, Side s)
{
	close_side(c);
	close_side(s);
	f.close_data();
}

/* fi_sendmsg of 64 bytes of src with the given flags. */
ssize_t send_64(const Side &c, Buffer &src, size_t offset, uint64_t flags)
{
	iovec iov{src.data() + offset, 64};
	void *desc = src.desc();
	fi_msg msg{};
	msg.msg_iov = &iov;
	msg.desc = &desc;
	msg.iov_count = 1;
	return fi_sendmsg(c.ep, &msg, flags | FI_COMPLETION);
}

/* A stream of `count` 64-byte messages, client to server, the sender as
 * fast as its calls let it, the receiver reposting one receive a
 * millisecond. Returns the device's receiver-not-ready NAKs the sender
 * met (rcvd_rnr_err), and checks that every message arrived, in order. */
long long stream_to_a_slow_receiver(DataFixture &f, Side c, Side s, Buffer &src, Buffer &dst, int count,
				    int receives)
{
	const long long rnr_before = hw_counter("rcvd_rnr_err");
	cr_assert_geq(rnr_before, 0, "the device's hw_counters are readable");
	int sent = 0, sends_done = 0, arrived = 0;
	auto next_repost = std::chrono::steady_clock::now();
	const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
	while (arrived < count) {
		cr_assert(std::chrono::steady_clock::now() < deadline, "%d of %d arrived in 60 s", arrived, count);
		while (sent < count) {
			auto *word = reinterpret_cast<uint32_t *>(src.data() + 64 * sent);
			*word = static_cast<uint32_t>(sent);
			const ssize_t rc = fi_send(c.ep, word, 64, src.desc(), 0, nullptr);
			if (rc == -FI_EAGAIN)
				break;
			cr_assert_eq(rc, 0, "fi_send: %zd", rc);
			sent++;
		}
		fi_cq_data_entry e;
		while (fi_cq_read(c.cq, &e, 1) == 1)
			sends_done++;
		if (std::chrono::steady_clock::now() < next_repost)
			continue;
		next_repost += std::chrono::milliseconds(1);
		if (fi_cq_read(s.cq, &e, 1) != 1)
			continue;
		cr_assert_eq(e.len, 64u);
		const auto slot = static_cast<size_t>(arrived % receives);
		uint32_t got;
		std::memcpy(&got, dst.data() + 64 * slot, sizeof got);
		cr_assert_eq(got, static_cast<uint32_t>(arrived), "message %d in order (got %u)", arrived, got);
		arrived++;
		cr_assert_eq(fi_recv(s.ep, dst.data() + 64 * slot, 64, dst.desc(), 0, nullptr), 0);
	}
	while (sends_done < count) {
		fi_cq_data_entry e;
		if (fi_cq_read(c.cq, &e, 1) == 1)
			sends_done++;
		cr_assert(std::chrono::steady_clock::now() < deadline, "%d of %d sends completed", sends_done,
			  count);
	}
	return hw_counter("rcvd_rnr_err") - rnr_before;
}

/* rxm's order: receives posted, connected, enabled with a threshold on both
 * sides; the server's receives, less the one each side starts with, go to
 * the client in one credit message; the client then sends exactly that.
 * Under `threading`: FI_THREAD_DOMAIN (MPICH's) takes the one-buffer calls'
 * fast paths, FI_THREAD_SAFE the general ones under the endpoint's locks. */
void credits_gate_messages(fi_threading threading)
{
	DataFixture f;
	f.hint_threading = threading;
	f.open();
	FlowCtrlOps *ops = open_flow_ctrl(f);
	if (!ops)
		return f.close();
	Buffer &src = f.buffer(64 * 8, 0x5a);
	Buffer &dst = f.buffer(64 * 8, 0, FI_RECV | FI_REMOTE_WRITE);
	auto [c, s] = connect_pair(f, dst, 4);
	if (on_iwarp()) {
		cr_assert_not(ops->available(c.ep), "iWARP endpoints keep receive credits of their own");
		cr_assert_eq(ops->enable(c.ep, 2), -FI_ENOSYS);
		return close_pair(f, c, s);
	}
	cr_assert(ops->available(c.ep));
	cr_assert(ops->available(s.ep));
	hand_over = false; /* this test hands them over itself */
	cr_assert_eq(ops->enable(c.ep, 2), 0);
	cr_assert(told.empty(), "the client posted no receive: owes nothing");
	cr_assert_eq(ops->enable(s.ep, 2), 0);
	cr_assert_eq(told.size(), 1u, "the four receives posted before: one credit message");
	cr_assert_eq(told[0].ep, s.ep);
	cr_assert_eq(told[0].credits, 3u, "four receives less the one the client starts with");

	/* Before the credits reach it, the client has its one: kept for a
	 * priority message. */
	cr_assert_eq(send_64(c, src, 0, 0), -FI_EAGAIN);
	cr_assert_eq(fi_inject(c.ep, src.data(), 8, 0), -FI_EAGAIN, "an inject takes a receive too");
	ops->add_credits(c.ep, told[0].credits);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(send_64(c, src, 64 * i, 0), 0, "send %d of the three told", i);
	cr_assert_eq(send_64(c, src, 0, 0), -FI_EAGAIN, "the last credit is not for a plain message");
	cr_assert_eq(send_64(c, src, 64 * 3, kPriority), 0, "a priority message takes the last credit");
	cr_assert_eq(send_64(c, src, 0, kPriority), -FI_EAGAIN, "no credit left at all");

	/* An RDMA write takes no receive and needs no credit. */
	cr_assert_eq(fi_write(c.ep, src.data(), 64, src.desc(), 0, dst.addr(64 * 7), dst.key(), nullptr), 0);
	for (int i = 0; i < 4; i++) {
		fi_cq_data_entry e = wait_cq(s.cq);
		cr_assert_eq(e.len, 64u);
		cr_assert(std::memcmp(dst.data() + 64 * i, src.data() + 64 * i, 64) == 0, "message %d's bytes", i);
	}
	for (int i = 0; i < 5; i++)
		wait_cq(c.cq);
	cr_assert(std::memcmp(dst.data() + 64 * 7, src.data(), 64) == 0, "the write's bytes");

	/* One receive reposted is below the threshold: nothing told; the
	 * second makes two owed. */
	cr_assert_eq(fi_recv(s.ep, dst.data(), 64, dst.desc(), 0, nullptr), 0);
	cr_assert_eq(told.size(), 1u, "one owed, the threshold is two");
	cr_assert_eq(fi_recv(s.ep, dst.data() + 64, 64, dst.desc(), 0, nullptr), 0);
	cr_assert_eq(told.size(), 2u);
	cr_assert_eq(told[1].credits, 2u);
	ops->add_credits(c.ep, told[1].credits);
	cr_assert_eq(send_64(c, src, 0, 0), 0);
	cr_assert_eq(send_64(c, src, 64, kPriority), 0);
	cr_assert_eq(send_64(c, src, 0, kPriority), -FI_EAGAIN);
	for (int i = 0; i < 2; i++) {
		wait_cq(s.cq);
		wait_cq(c.cq);
	}
	expect_cq_empty(c.cq);
	expect_cq_empty(s.cq);
	close_pair(f, c, s);
}

} // namespace

Test(flow, credits_gate_messages_and_the_receives_posted_are_told)
{
	credits_gate_messages(FI_THREAD_DOMAIN);
}

Test(flow, credits_gate_messages_on_locked_endpoints_too)
{
	credits_gate_messages(FI_THREAD_SAFE);
}

/* Credits come before this side enabled (the peer was quicker): kept for
 * then. A handler that fails (rxm's queue full) leaves them owed, and the
 * next receive tells them all. */
Test(flow, early_credits_are_kept_and_unsent_ones_told_with_the_next_receive)
{
	DataFixture f;
	f.open();
	FlowCtrlOps *ops = open_flow_ctrl(f);
	if (!ops || on_iwarp())
		return f.close();
	Buffer &src = f.buffer(64 * 8, 0x33);
	Buffer &dst = f.buffer(64 * 8);
	auto [c, s] = connect_pair(f, dst, 6);
	hand_over = false;
	ops->add_credits(c.ep, 5); /* before enable: kept */
	cr_assert_eq(ops->enable(c.ep, 1), 0);
	for (int i = 0; i < 5; i++)
		cr_assert_eq(send_64(c, src, 0, 0), 0, "credit %d of the five kept", i);
	cr_assert_eq(send_64(c, src, 0, 0), -FI_EAGAIN, "one left, for a priority message");
	for (int i = 0; i < 5; i++) {
		wait_cq(s.cq);
		wait_cq(c.cq);
	}

	/* Six receives posted: five owed, and the handler fails. */
	handler_failures_left = 1;
	cr_assert_eq(ops->enable(s.ep, 4), 0);
	cr_assert(told.empty(), "the handler failed: nothing told");
	cr_assert_eq(fi_recv(s.ep, dst.data(), 64, dst.desc(), 0, nullptr), 0);
	cr_assert_eq(told.size(), 1u, "the next receive tells what is owed");
	cr_assert_eq(told[0].credits, 6u, "the five the handler failed to send and the one posted since");
	close_pair(f, c, s);
}

/* The point of it all: rxm over nd sends only into receives the peer
 * posted, so the device never answers receiver-not-ready (each answer
 * stalls the connection for the RNR timer). The same stream without flow
 * control meets it: the counter is shown to see it. Under MPICH's
 * FI_THREAD_DOMAIN: the fast paths, the handler called from fi_recv's. */
Test(flow, a_sender_held_to_credits_never_meets_receiver_not_ready)
{
	constexpr int kReceives = 8;
	constexpr int kMessages = 300;
	long long without = 0;
	{
		DataFixture f;
		f.hint_threading = FI_THREAD_DOMAIN;
		f.open();
		Buffer &src = f.buffer(64 * kMessages);
		Buffer &dst = f.buffer(64 * kReceives);
		auto [c, s] = connect_pair(f, dst, kReceives);
		if (on_iwarp()) /* no retry there: nd's own credits keep it */
			return close_pair(f, c, s);
		without = stream_to_a_slow_receiver(f, c, s, src, dst, kMessages, kReceives);
		close_pair(f, c, s);
	}
	DataFixture f;
	f.hint_threading = FI_THREAD_DOMAIN;
	f.open();
	FlowCtrlOps *ops = open_flow_ctrl(f);
	if (!ops)
		return f.close();
	told.clear();
	Buffer &src = f.buffer(64 * kMessages);
	Buffer &dst = f.buffer(64 * kReceives);
	auto [c, s] = connect_pair(f, dst, kReceives);
	cr_assert_eq(ops->enable(c.ep, kReceives / 2), 0);
	cr_assert_eq(ops->enable(s.ep, kReceives / 2), 0);
	const long long with = stream_to_a_slow_receiver(f, c, s, src, dst, kMessages, kReceives);
	cr_log_info("receiver-not-ready NAKs: %lld without flow control, %lld with; %zu credit messages\n",
		    without, with, told.size());
	cr_assert_gt(without, 0, "without credits a fast sender meets receiver-not-ready (%lld)", without);
	cr_assert_eq(with, 0, "with credits it never does (%lld)", with);
	close_pair(f, c, s);
}

/* Where the endpoint cannot keep them, it says so, and bad handles are
 * refused. */
Test(flow, not_offered_where_the_endpoint_keeps_no_ring_of_its_own)
{
	DataFixture f;
	f.open();
	FlowCtrlOps *ops = open_flow_ctrl(f);
	if (!ops)
		return f.close();
	DataOptions o;
	o.srx = f.shared_rx(16);
	auto [c, s] = f.connect_data(o);
	cr_assert_not(ops->available(c.ep), "receives from a shared context are not this endpoint's");
	cr_assert_eq(ops->enable(c.ep, 1), -FI_ENOSYS);
	cr_assert_not(ops->available(nullptr));
	cr_assert_eq(ops->enable(nullptr, 1), -FI_EINVAL);
	ops->add_credits(nullptr, 1); /* logged, nothing else */
	cr_assert_not(ops->available(reinterpret_cast<fid_ep *>(&f.domain->fid)), "a domain is no endpoint");
	close_side(c);
	close_side(s);
	cr_assert_eq(fi_close(&o.srx->fid), 0);
	f.close_data();
}
