/*
 * nd_ep.h: the active endpoint (fid_ep, FI_EP_MSG): ND's connector and
 * queue pair in one object.
 *
 * The queue pair is the provider's own (ibv_create_qp on the domain's PD),
 * never attached to the rdma_cm id: that keeps the id QP-less, which is what
 * lets rdma_cm report the peer's reply (RDMA_CM_EVENT_CONNECT_RESPONSE)
 * before the connection completes, so that the read limits the queue pair
 * gets are the negotiated ones and ND's explicit CompleteConnect can be
 * offered. The provider moves the queue pair through INIT/RTR/RTS itself
 * with the attributes rdma_init_qp_attr computes.
 *
 * Connection calls and CM event handlers run under the bound EQ's progress
 * lock (nd_cm.h); the state lives in an EpStateMachine (nd_ep_state.h).
 */
#ifndef ND_EP_H
#define ND_EP_H

#include "nd.h"
#include "nd_cm.h"
#include "nd_cm_data.h"
#include "nd_credits.h"
#include "nd_flow_ctrl.h"
#include "nd_ep_state.h"
#include "nd_eq.h"
#include "nd_multi_recv.h"
#include "nd_verbs.h"
#include "nd_wq.h"

#include <rdma/fi_endpoint.h>

#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <vector>

namespace nd {

class CompletionQueue;
struct Counter;
struct Domain;
struct EventQueue;
struct SharedRx;
struct SharedTx;

/* A receive posted before the queue pair could take it (before INIT). */
struct PendingRecv {
	ibv_recv_wr wr;
	std::vector<ibv_sge> sge;
};

/* A framed endpoint's message headers (nd_framing.h): one per send-queue
 * ring slot, kFrameHeaderSize each, registered. */
struct FrameHeaders {
	std::unique_ptr<uint8_t[]> bytes;
	VerbsHandle<ibv_mr, ibv_dereg_mr> mr;
};

/* One send-queue request as the msg and rma calls describe it. */

struct TxRequest {
	ibv_wr_opcode opcode;
	const iovec *iov;
	void **desc;
	size_t count;
	uint64_t remote_addr;
	uint64_t remote_key;
	uint32_t imm_data;		/* network order; for the _WITH_IMM opcodes */
	/* The operands of IBV_WR_ATOMIC_FETCH_AND_ADD (compare_add: the
	 * addend) and IBV_WR_ATOMIC_CMP_AND_SWP (compare_add, swap). */
	uint64_t compare_add = 0;
	uint64_t swap = 0;
	void *context;
	uint64_t flags;			/* FI_INJECT, FI_COMPLETION, FI_MORE, ... */
	uint64_t cq_flags;		/* FI_SEND | FI_MSG, FI_RMA | FI_WRITE, ... */
	bool report;			/* a CQ entry is wanted */
	const char *call;		/* for the log */
	/* A framed endpoint's message header (nd_framing.h), sent ahead of
	 * the data; nullptr for everything else. */
	const void *header = nullptr;	/* kFrameHeaderSize bytes */
};

/* An endpoint's options (fi_setopt, fi_ext_nd.h), and what it was opened
 * with that decides how it works. */
struct EndpointOptions {
	cm::ReadLimits wanted;			/* as set; capped when offered */
	bool manual_complete = false;
	bool shared_addr = false;
	/* Opened with FI_TAGGED: every message is framed (nd_framing.h). */
	bool framed = false;
};

/* What the endpoint reads of the info it was opened with, copied at
 * fi_endpoint. Not the info itself: fi_dupinfo's copy took eight
 * allocations of every endpoint's heap, which with thousands of endpoints
 * on one CQ counted in nd's memory per connection (docs/scale.md). */
struct TxAttributes {
	size_t size = 0;
	size_t iov_limit = 0;
	size_t inject_size = 0;
	uint64_t msg_order = 0;
	uint64_t op_flags = 0;
	static TxAttributes of(const fi_tx_attr &attr) noexcept
	{
		return {attr.size, attr.iov_limit, attr.inject_size, attr.msg_order, attr.op_flags};
	}
};
struct RxAttributes {
	size_t size = 0;
	size_t iov_limit = 0;
	uint64_t msg_order = 0;
	uint64_t op_flags = 0;
	static RxAttributes of(const fi_rx_attr &attr) noexcept
	{
		return {attr.size, attr.iov_limit, attr.msg_order, attr.op_flags};
	}
};
struct EndpointAttributes {
	uint64_t caps = 0;
	bool shared_tx = false;			/* ep_attr->tx_ctx_cnt == FI_SHARED_CONTEXT */
	bool resource_mgmt = false;		/* domain_attr->resource_mgmt == FI_RM_ENABLED */

	explicit EndpointAttributes(const fi_info &info) noexcept;
};

/*
 * What only connecting reads: made with the endpoint and freed once it is
 * connected with its own EQ bound (Endpoint::release_setup), so that a
 * connected endpoint, of which an MPI job holds thousands, keeps only what
 * its data path and its teardown read. They live in a SlabPool
 * (nd_slab.h), out of malloc's heap: thousands are made together at a
 * job's start and freed together as the connections come up, and in the
 * heap the holes they left among the endpoints stayed resident.
 */
struct ConnectionSetup {
	/* The info's, read at fi_enable (setup_data_path); a bound shared
	 * transmit context's replace tx. */
	TxAttributes tx;
	RxAttributes rx;
	size_t max_msg_size = 0;		/* ep_attr's; 0 when none was given */
	SockAddr source;			/* src_addr; length() 0 when none */
	SockAddr bound_address;			/* as bound, port assigned: kept for a retry */
	/* A passive-side endpoint not yet bound to an EQ: the listener's EQ,
	 * whose channel carries its id and whose progress lock its handlers
	 * run under; the events they report are held until fi_ep_bind. */
	EventQueue *cm_home = nullptr;
	std::vector<EqEntry> held_events;
	std::vector<uint8_t> connect_wire;	/* framed, until rdma_connect */
	/* iWARP (nd_credits.h): the requester's credit offer, from its
	 * connection request. */
	std::optional<cm::CreditOffer> request_credit_offer;
	/* Receives posted before the queue pair could take them (before
	 * INIT), under rx.lock. */
	std::vector<PendingRecv> pending_recvs;

	/* Needs info.tx_attr and info.rx_attr (fi_endpoint checks). */
	explicit ConnectionSetup(const fi_info &info) noexcept;
	/* From a SlabPool; throws std::bad_alloc. */
	static void *operator new(size_t size);
	static void operator delete(void *object) noexcept;
};

/* What few endpoints use, made by the first call that needs it (a counter
 * or a shared context bound, FI_OPT_MIN_MULTI_RECV set, a shared endpoint's
 * connect): with thousands of endpoints in a process, each of these words
 * in every endpoint was memory most never used. */
struct EndpointExtras {
	std::array<Counter *, kCounterKinds> counters{};	/* by CounterKind */
	SharedRx *srx = nullptr;
	SharedTx *stx = nullptr;			/* its attributes replace tx_attr's */
	size_t min_multi_recv = kDefaultMinMultiRecv;	/* FI_OPT_MIN_MULTI_RECV */
	/* A shared endpoint's local address, claimed with the peer's as its
	 * connection's tuple (released at the attempt's end or at close). */
	SockAddr tuple_local;
	bool tuple_claimed = false;
};

/* What fi_ep_bind attached (before fi_enable), and the CQs the endpoint
 * completes into: what the application bound, else internal CQs. */
struct EndpointBindings {
	CompletionQueue *tx_cq = nullptr;
	CompletionQueue *rx_cq = nullptr;
	CompletionQueue *user_tx_cq = nullptr;
	CompletionQueue *user_rx_cq = nullptr;
	/* The counters and shared contexts bound, and the endpoint's other
	 * rarely used parts; null while it has none. */
	std::unique_ptr<EndpointExtras> extras;
	bool tx_selective = false;
	bool rx_selective = false;
	bool counters_watch = false;		/* the bound counters watch tx_cq/rx_cq */

	/* The internal CQ made at fi_enable for a side the application bound
	 * none to (closed with the endpoint), or null. */
	CompletionQueue *own_cq() const noexcept; /* nd_ep_queues.cpp */
	/* The rarely used parts, made on first need; throws std::bad_alloc. */
	EndpointExtras &extras_made()
	{
		if (!extras)
			extras = std::make_unique<EndpointExtras>();
		return *extras;
	}
	/* The counter bound for a kind of request, or nullptr. */
	Counter *counter(CounterKind which) const noexcept
	{
		return extras ? extras->counters[static_cast<size_t>(which)] : nullptr;
	}
	SharedRx *srx() const noexcept { return extras ? extras->srx : nullptr; }
	SharedTx *stx() const noexcept { return extras ? extras->stx : nullptr; }
	size_t min_multi_recv() const noexcept { return extras ? extras->min_multi_recv : kDefaultMinMultiRecv; }
	/* Each distinct counter bound to the endpoint, once. */
	template <typename Fn>
	void for_each_counter(Fn &&fn) const
	{
		if (!extras)
			return;
		const std::array<Counter *, kCounterKinds> &all = extras->counters;
		for (size_t i = 0; i < all.size(); i++) {
			bool seen = !all[i];
			for (size_t j = 0; j < i && !seen; j++)
				seen = all[j] == all[i];
			if (!seen)
				fn(all[i]);
		}
	}
};

/* Why a send-queue post goes out of line (Link::slow_tx, beside the link
 * state in one word). */
namespace SlowTx {
constexpr uint8_t locked = 1;		/* the send lock (SAFE, ENDPOINT, FID) */
constexpr uint8_t shared = 2;		/* a shared transmit context's budget */
constexpr uint8_t credits = 4;		/* iWARP: receive credits first */
constexpr uint8_t held = 8;		/* FI_MORE holds requests back (SendBatch) */
/* The endpoint fences after reads (DataPath::read_fence) and reads were
 * posted since the last fenced request: the next send or write carries the
 * fence, which the fast paths never decide (Endpoint::sync_fence). */
constexpr uint8_t fence = 16;
/* A counter counts sends or writes: each of them is signaled, which the
 * fi_inject family's fast path never is (post_inline_slow signals them). */
constexpr uint8_t counted = 32;
/* ofi_rxm's flow control is on (nd_flow_ctrl.h): a message the peer has no
 * receive for waits at the call. */
constexpr uint8_t flow = 64;
/* iWARP, accepter: the connector has not spoken first yet (nd_credits.h,
 * "Who sends first"): nothing goes to the send queue until its ready
 * write lands (Endpoint::peer_spoke). */
constexpr uint8_t peer_first = 128;
} // namespace SlowTx

/* Whether a send-queue request takes one of the peer's receives (what
 * ofi_rxm's flow control counts): a message, or a write with immediate
 * data. */
constexpr bool takes_peer_receive(ibv_wr_opcode opcode) noexcept
{
	return opcode == IBV_WR_SEND || opcode == IBV_WR_SEND_WITH_IMM || opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
}

/* Why DataPath::slow_rx sends fi_recv to post_rx. */
namespace SlowRx {
constexpr uint8_t not_ready = 1;	/* before INIT: receives wait in nd */
constexpr uint8_t locked = 2;		/* the receive lock (SAFE, ENDPOINT, FID) */
constexpr uint8_t iwarp = 4;		/* receive sges as siw takes them; credits */
constexpr uint8_t multi = 8;		/* multi-receive buffers: in order behind them */
constexpr uint8_t other = 16;		/* a shared receive context, framing */
/* fi_recv's flags (rx.op_flags) hold FI_MULTI_RECV, or ask for a CQ entry
 * with no CQ bound for receives (the general path says why) */
constexpr uint8_t op_flags = 32;
/* ofi_rxm's flow control is on: each post may owe the peer credits. */
constexpr uint8_t flow = 64;
} // namespace SlowRx

/* What the one-buffer calls' fast paths keep themselves (nd_ep_post_one.h,
 * nd_ep_inject.h), each with entry points of its own, so that an endpoint
 * that keeps nothing tests nothing for them: nothing; iWARP's receive
 * credits (set at fi_enable); ofi_rxm's flow credits (set when rxm enables
 * them, nd_ep_flow.cpp). Where it is the endpoint's one reason for the
 * slow path, its bits are the ones those fast paths expect. */
enum class Keeps : uint8_t { nothing, receive_credits, flow_credits };

constexpr uint8_t slow_tx_kept(Keeps keeps) noexcept
{
	return keeps == Keeps::receive_credits ? SlowTx::credits : keeps == Keeps::flow_credits ? SlowTx::flow : 0;
}

constexpr uint8_t slow_rx_kept(Keeps keeps) noexcept
{
	return keeps == Keeps::receive_credits ? SlowRx::iwarp : keeps == Keeps::flow_credits ? SlowRx::flow : 0;
}

/*
 * Send-queue requests posted with FI_MORE: their ring slots are committed at
 * once, their work requests wait here, chained, and go to the device with
 * one ibv_post_send (one doorbell, which on Soft-RoCE is a system call) at
 * the endpoint's next send-queue call without FI_MORE, when the batch is
 * full, or when the queue pair is flushed. Inline data is copied in, since
 * the caller may reuse an FI_INJECT buffer at once. Allocated on the first
 * FI_MORE; used under the endpoint's tx.lock.
 */
struct SendBatch {
	static constexpr uint32_t kMaxRequests = 32;
	static constexpr uint32_t kMaxSges = 4 * kMaxSge;

	ibv_send_wr wr[kMaxRequests];
	ibv_sge sge[kMaxSges];
	std::unique_ptr<uint8_t[]> inline_bytes; /* kMaxRequests * max_inline */
	uint32_t inline_capacity = 0;
	uint32_t count = 0;
	uint32_t sges = 0;
	uint32_t inline_used = 0;

	/* Whether any request still fits (one with kMaxSge entries, or with
	 * max_inline bytes); when not, the batch is posted at once. */
	bool has_room(uint32_t max_inline) const noexcept
	{
		return count < kMaxRequests && sges + kMaxSge <= kMaxSges &&
		       inline_used + max_inline <= inline_capacity;
	}
};

/* One direction of the data path: its queue, the lock its posters take
 * where the threading model asks for one, what fi_enable fixed of its
 * calls, and the room it holds on the CQ it completes into. */
template <typename Queue>
struct QueueSide {
	explicit QueueSide(LockRank rank) noexcept : lock(rank) {}

	std::unique_ptr<Queue> queue;
	/* The verbs CQ of its CQ that the queue pair completes into (a CQ
	 * may chain several: nd_cq.h). */
	ibv_cq *verbs_cq = nullptr;
	uint64_t op_flags = 0;		/* tx_attr's or rx_attr's */
	OptionalLock lock;
	uint32_t iov_limit = 1;
	uint32_t reserved = 0;		/* entries reserved on its CQ */
	uint32_t promised = 0;		/* what those may grow to */
};

/* The data path, fixed at fi_enable (setup_data_path). The fields every
 * post reads come first, together; the queue pair comes last, so that it
 * is destroyed first. */
struct DataPath {
	QueueSide<SendQueue> tx{LockRank::endpoint_tx};
	QueueSide<ReceiveQueue> rx{LockRank::endpoint_rx};
	std::unique_ptr<SendBatch> batch;	/* FI_MORE requests not yet posted */
	/* Its state, and the SlowTx bits that send posts out of line (fixed
	 * at fi_enable, and while FI_MORE holds requests back): one word, so
	 * that the fast path tests everything it defers with one compare. */
	Link link;
	/* Non-zero where fi_recv goes to post_rx (SlowRx bits); not_ready
	 * until the queue pair takes receives (INIT or later). Atomic (relaxed,
	 * a plain load) since connection progress clears a bit that posters
	 * read without the receive lock. */
	std::atomic<uint8_t> slow_rx{SlowRx::not_ready};
	bool recv_ready() const noexcept
	{
		return !(slow_rx.load(std::memory_order_relaxed) & SlowRx::not_ready);
	}
	void set_slow_rx(uint8_t bit, bool on) noexcept
	{
		if (on)
			slow_rx.fetch_or(bit, std::memory_order_relaxed);
		else
			slow_rx.fetch_and(static_cast<uint8_t>(~bit), std::memory_order_relaxed);
	}
	bool marker_reserved = true;		/* tx.reserved counts the close marker's */
	bool lingered = false;			/* fi_close's linger marker is still out */
	bool moved_to_error = false;		/* flush_queue_pair's ibv_modify_qp succeeded */
	/* Whether fi_recv's receives report a CQ entry: rx's op_flags and the
	 * CQ binding decide it at fi_enable (post_recv_one). */
	bool recv_reports = true;
	/* Every read_signal_every-th read is signaled: half the negotiated
	 * outbound read limit (Endpoint::post_tx says why), fixed when the
	 * queue pair goes to RTS; on iWARP every read (nd_wq.h: a read may
	 * complete after requests behind it, which wait for it to retire). */
	uint32_t read_signal_every = 1;
	/* IBV_SEND_FENCE where the endpoint's msg_order holds FI_ORDER_WAR or
	 * FI_ORDER_SAR, else 0: an RC responder may run a send or write that
	 * follows a read before the read has fetched its data, unless the
	 * later request carries the fence (SendQueue::fence_after_reads). */
	uint32_t read_fence = 0;
	uint32_t max_inline = 0;		/* bytes a send may carry inline (a
						 * framed send's header included) */
	/* Framed endpoints: each send-queue ring slot's header, registered. */
	std::unique_ptr<FrameHeaders> tx_headers;
	size_t max_msg = 0;
	/* iWARP (nd_credits.h): this side's receive credits, from fi_enable. */
	std::unique_ptr<ReceiveCredits> credits;
	/* ofi_rxm's flow control (nd_flow_ctrl.h): the sender's half under
	 * tx.lock, the receiver's under rx.lock. */
	FlowCredits flow;

	/* Created at fi_enable (create_queue_pair); last, so destroyed first. */
	UniqueQp qp;
};

/* The connection: the peer, what was negotiated with it, and how it ended. */
struct Connection {
	SockAddr peer;
	cm::ReadLimits effective;
	cm::ReadLimits peer_offer;
	bool negotiated = false;
	/* Passive side: a connection request was taken from a listener. */
	bool has_request = false;
	bool request_peer_gone = false;
	/* A verbs asynchronous event ended the queue pair (reported once). */
	std::atomic<bool> async_failed{false};
	/* A request failed because the peer stopped answering, or a framed
	 * message came without its frame: the EQ's progress was asked to end
	 * the connection (once). */
	std::atomic<bool> peer_lost_noted{false};
};

/* Every member starts from the default given here; the constructor sets
 * only what comes from its arguments. */
struct Endpoint {
	fid_ep ep;				/* first: from_fid<Endpoint> */
	Domain *domain;
	EndpointAttributes attr;
	EventQueue *eq = nullptr;
	CmTarget target;
	CmIdHolder cm;
	/* The connection's state, and the object's own lifecycle (fi_setname,
	 * fi_enable, fi_close). */
	EpStateMachine fsm;
	/* Null once connected with an EQ bound (release_setup). */
	std::unique_ptr<ConnectionSetup> setup;

	/* Its parts, held by value: a field of a part costs what a field of
	 * the endpoint costs. The options last, after the connection: both
	 * are 4-byte aligned, so together they leave no padding. */
	EndpointBindings bindings;
	DataPath data;
	Connection conn;
	EndpointOptions options;

	Endpoint(Domain *domain, const fi_info &info, cm::Side side);
	int close();
	cm::ReadLimits offered() const noexcept; /* wanted, capped */

	/* Connection management (nd_ep_cm.cpp). */
	int connect(const void *addr, const void *param, size_t paramlen);
	int accept(const void *param, size_t paramlen);
	int shutdown(uint64_t flags);
	int complete_connect();
	int reject_connect(const void *param, size_t paramlen);
	void on_cm_event(const CmEventCopy &event);
	/* Queues an event on the endpoint's EQ, or holds it until one is
	 * bound (under the progress lock the handlers run under). */
	void post_event(EqEntry &&entry);
	/* The EQ whose progress lock guards this endpoint's connection state. */
	EventQueue *progress_eq() const noexcept { return eq ? eq : cm_home(); }
	EventQueue *cm_home() const noexcept { return setup ? setup->cm_home : nullptr; }
	/* Frees the connection-setup state once nothing reads it any more:
	 * connected, an EQ of its own bound (under its progress lock). */
	void release_setup() noexcept;
	/* A shared endpoint's tuple, claimed at fi_connect, given back at the
	 * attempt's end or at close (nothing where none is claimed). */
	void release_claimed_tuple() noexcept;
	/* A retryable attempt ended (EpStateMachine::attempt_failed): a fresh
	 * rdma_cm id, bound where the old one was, replaces the used one, which
	 * rdma_cm cannot connect again (nd_ep.cpp). Returns 0 or -FI_E*. */
	int renew_cm_id();

	/* Queue pair (nd_ep_cm.cpp). */
	int create_queue_pair();
	int move_queue_pair(ibv_qp_state state);
	int ready_queue_pair();
	void flush_queue_pair() noexcept;

	/* Binding (nd_ep_bind.cpp). */
	int bind_cq(CompletionQueue *cq, uint64_t flags);
	int bind_cntr(Counter *cntr, uint64_t flags);
	int bind_srx(SharedRx *rx);
	int bind_stx(SharedTx *tx);
	void unbind_all() noexcept;

	/* The data path's queues, set up at fi_enable, released at close
	 * (nd_ep_queues.cpp). */
	int setup_data_path();
	void release_queues() noexcept;
	void post_drain_marker() noexcept;
	void linger() noexcept;
	bool reserve_close_marker(const char *otherwise) noexcept;
	ibv_send_wr claim_close_marker(ibv_wr_opcode opcode) noexcept;
	/* Its send queue is in its CQ's StallWatch (nd_cq.h). */
	bool watches_stalls() const noexcept;
	bool send_queue_idle() noexcept;

	/* Sending (nd_ep_send.cpp). */
	ssize_t post_tx(const TxRequest &request);
	/*
	 * The one way send-queue requests reach the queue pair: what FI_MORE
	 * held back first (their slots are earlier), then `chain`, claimed
	 * (SendQueue::claim) and ready. When posting fails, what was not
	 * posted is unclaimed (SendQueue::unclaim) and logged, at warn level
	 * for the application's requests and at info level for nd's own
	 * (`own`), and -FI_E* comes back. `Single`: a fast path's one
	 * request, which knows that nothing is held back (the link's
	 * slow-transmit bits say so).
	 */
	template <bool Single = false>
	[[gnu::always_inline]] ssize_t submit(ibv_send_wr &chain, const char *call, bool own = false)
	{
		if (!Single && __builtin_expect(data.batch && data.batch->count, 0))
			return post_batch(&chain, call, own);
		ibv_send_wr *bad; /* set where posting fails; a single request's is itself */
		if constexpr (!Single)
			bad = nullptr; /* a device that sets none: all of it */
		const int rc = post_send(data.qp.get(), &chain, &bad);
		if (__builtin_expect(rc == 0, 1))
			return 0;
		/* A single request is the last claimed: what it was is all
		 * the failure needs (nothing of it lives across the post). */
		if constexpr (Single)
			return single_failed(rc, chain.opcode, call, own);
		return submit_failed(rc, bad, &chain, call, own);
	}
	/* Where the endpoint fences after reads (read_fence), the link's
	 * SlowTx::fence says whether the next send or write must fence: set
	 * by a read, cleared by the fence, set again by an unclaim that took
	 * the fence back. The poster's, after every claim that may change it;
	 * nothing where the endpoint does not fence. */
	void sync_fence() noexcept
	{
		if (__builtin_expect(data.read_fence != 0, 0))
			sync_fence_bit();
	}
	void sync_fence_bit() noexcept;
	/* submit's failure: `unposted` is what ibv_post_send named (null:
	 * all of it, from `first`). */
	ssize_t submit_failed(int rc, ibv_send_wr *unposted, ibv_send_wr *first, const char *call, bool own) noexcept;
	/* The same, for a fast path's single request (the last claimed). */
	ssize_t single_failed(int rc, ibv_wr_opcode opcode, const char *call, bool own) noexcept;
	/* iWARP's remote CQ data: the slot write, then the message (nd_credits.h). */
	ssize_t post_with_data_slot(const TxRequest &r, ibv_sge *sge, int num_sge, uint32_t total, bool inline_data,
				    bool counted);
	/* fi_injectdata and fi_inject_writedata on iWARP: through post_tx. */
	ssize_t inject_with_data_slot(ibv_wr_opcode opcode, const void *buf, size_t len, uint32_t imm_data,
				      uint64_t remote_addr, uint64_t remote_key);
	bool start_batch() noexcept;
	void hold_injects(bool held) noexcept;
	ssize_t defer(const ibv_send_wr &wr, bool copy_inline, const char *call);
	ssize_t post_batch(ibv_send_wr *last, const char *call, bool own = false);
	ssize_t post_deferred(const char *call);
	ssize_t free_send_slots(const char *call);
	/* A full ring that started small grows, with its CQ reservation
	 * (CompletionQueue::grow); false when it cannot (at its depth, the
	 * verbs CQ at the device's largest). Under the queue's lock. */
	bool grow_queue(bool send) noexcept;
	void update_signal_intervals() noexcept;
	void credits_after_post(bool took_receive) noexcept;
	ssize_t link_error(const char *call) const;
	/* fi_inject and its kin (nd_ep_inject.h), and their slow paths. */
	/* K: what the entry point's fast path keeps (Keeps). */
	template <ibv_wr_opcode Op, Keeps K = Keeps::nothing>
	ssize_t post_inline(const void *buf, size_t len, uint32_t imm_data, uint64_t remote_addr,
			    uint64_t remote_key);
	template <ibv_wr_opcode Op>
	ssize_t post_inline_slow(const void *buf, size_t len, uint32_t imm_data, uint64_t remote_addr,
				 uint64_t remote_key);
	template <ibv_wr_opcode Op, bool MaybeHeld>
	ssize_t post_inline_request(SendQueue &queue, uint64_t head, const void *buf, size_t len, uint32_t imm_data,
				     uint64_t remote_addr, uint64_t remote_key);
	ssize_t inject_refused(const void *buf, size_t len, uint64_t remote_key, const char *call) const;
	/* fi_send, fi_write, fi_read and fi_recv of one buffer
	 * (nd_ep_post_one.h), and where what they do not take goes. */
	template <ibv_wr_opcode Op, Keeps K = Keeps::nothing, typename General>
	ssize_t post_one(const void *buf, size_t len, void *desc, uint64_t remote_addr, uint64_t remote_key,
			 void *context, uint64_t flags, bool report, const char *call, General &&general);
	template <Keeps K = Keeps::nothing>
	ssize_t post_recv_one(void *buf, size_t len, void *desc, void *context);
	/* post_recv_one's way to post_rx, out of its frame. */
	[[gnu::noinline]] ssize_t post_rx_one_general(void *buf, size_t len, void *desc, void *context, uint64_t flags);
	ssize_t post_recv_failed(int rc);
	ssize_t no_immediate_data(const char *call) const;

	/* Receiving, and fi_cancel (nd_ep_recv.cpp). */
	ssize_t post_rx(const iovec *iov, void **desc, size_t count, void *context, uint64_t flags);
	void post_pending_receives() noexcept;
	void post_pending_receives_locked() noexcept; /* under rx.lock */
	ssize_t cancel(void *context);
	void set_min_multi_recv(size_t bytes);

	/* Receive credits on iWARP (nd_ep_credits.cpp). */
	bool wants_credits() const noexcept;
	/* `accepting`: this side is the accepter (the offer it takes is the
	 * connector's, and the one it makes answers it). */
	void add_credit_offer(std::vector<uint8_t> *wire, cm::ReadLimits limits, bool accepting);
	void take_credit_offer(const std::optional<cm::CreditOffer> &offer, bool accepting);
	/* Who sends first (nd_credits.h): the connector's first request, and
	 * the accepter's test before any of its own (under the send lock;
	 * `wait`: a post, which gives the write a moment to land). */
	void write_ready() noexcept;
	void repeat_ready() noexcept;
	void post_ready_write(const char *why) noexcept;
	bool peer_spoke(bool wait) noexcept
	{
		return __builtin_expect(!(data.link.slow_tx() & SlowTx::peer_first), 1) || peer_spoke_slow(wait);
	}
	bool peer_spoke_slow(bool wait) noexcept;
	ssize_t peer_not_ready(const char *call) const noexcept;
	void advertise_credits(bool from_progress) noexcept;
	void write_credits() noexcept;
	/* The write of the count, and a receive's fast way to it
	 * (nd_ep_post_one.h). */
	template <bool Single>
	void post_credit_write(uint64_t posted) noexcept;
	void tell_peer_posted(uint64_t posted) noexcept;
	void flush_pending_credits() noexcept;
	/* ofi_rxm's flow control (nd_ep_flow.cpp): the receives the peer is
	 * owed, reckoned under the receive lock (counted as told), and told
	 * through rxm's handler with no lock of nd's held. */
	uint64_t flow_credits_due() noexcept;
	void send_flow_credits(uint64_t credits) noexcept;
	bool flow_available() const noexcept;
	ssize_t no_credit(const char *call) const noexcept;
	ssize_t no_flow_credit(const char *call) const noexcept;

	/* Framed endpoints (nd_ep_tagged.cpp). */
	int setup_framing(uint32_t rx);
	ssize_t post_framed_rx(const iovec *iov, size_t count, void *context, uint64_t flags, bool tagged,
			       uint64_t tag, uint64_t ignore, const char *call);
};

/* The endpoint behind a libfabric handle: one way for every file of the
 * endpoint, through from_fid (which checks the layout). */
inline Endpoint *ep_of(fid_ep *ep) noexcept { return from_fid<Endpoint>(ep); }
inline Endpoint *ep_of(fid *fid) noexcept { return from_fid<Endpoint>(fid); }

/* Declared before a send-lock guard, so that it runs after the unlock: a
 * credit count marked pending while the lock was held goes now
 * (Endpoint::flush_pending_credits). */
struct CreditsAfterUnlock {
	Endpoint *ep;
	~CreditsAfterUnlock()
	{
		if (ep->data.credits && ep->data.credits->write_pending())
			ep->flush_pending_credits();
	}
};

/* The receive lock over a receive post. On a flow-controlled endpoint
 * (ofi_rxm's flow control) the receives just posted may owe the peer
 * credits: reckoned before the unlock, under the same hold, and handed to
 * rxm's handler after it, which sends them with a call of its own. */
class RecvPostLock {
public:
	explicit RecvPostLock(Endpoint *ep) noexcept : ep_(ep) { ep_->data.rx.lock.lock(); }
	~RecvPostLock()
	{
		const uint64_t credits = (ep_->data.slow_rx.load(std::memory_order_relaxed) & SlowRx::flow)
						 ? ep_->flow_credits_due()
						 : 0;
		ep_->data.rx.lock.unlock();
		if (credits)
			ep_->send_flow_credits(credits);
	}
	RecvPostLock(const RecvPostLock &) = delete;
	RecvPostLock &operator=(const RecvPostLock &) = delete;

private:
	Endpoint *ep_;
};

/* The queue pair's asynchronous events (nd_async.h). */
void ep_async_event(void *owner, ibv_event_type type, int error);
/* A request failed with its retries exhausted (QueueHooks::peer_lost),
 * from the poller: asks the endpoint's EQ to end the connection. */
void ep_peer_lost(void *owner);
/* A framed endpoint received a message without nd's frame (Framing::
 * unframed), from the poller: the same, with its own reason. */
void ep_peer_broke_framing(void *owner) noexcept;

/* Data transfer tables of a connected endpoint (nd_ep_msg.cpp, nd_ep_rma.cpp). */
extern fi_ops_msg ep_msg_ops;
extern fi_ops_rma ep_rma_ops;
/* The same for an endpoint with receive credits (iWARP), set at fi_enable:
 * their fast paths keep the credits (nd_ep_post_one.h, nd_ep_inject.h). */
extern fi_ops_msg ep_credit_msg_ops;
extern fi_ops_rma ep_credit_rma_ops;
/* And for one with ofi_rxm's flow control on, set when rxm enables it
 * (nd_ep_flow.cpp): their fast paths keep its credits. */
extern fi_ops_msg ep_flow_msg_ops;
extern fi_ops_rma ep_flow_rma_ops;
/* nd_ep_atomic.cpp: the adapter's atomics (nd_atomic.h). */
extern fi_ops_atomic ep_atomic_ops;
/* A framed endpoint's (nd_ep_tagged.cpp). */
extern fi_ops_msg ep_framed_msg_ops;
extern fi_ops_tagged ep_tagged_ops;


} // namespace nd

#endif /* ND_EP_H */
