/*
 * data_fixture.h: data-path test helpers for the device tests that the
 * guest_<object>.cpp files of nd_guest_data share: registered buffers,
 * connected endpoint pairs with CQs (and optionally counters or a shared
 * receive context) bound before fi_enable, bounded CQ waits, and requests
 * built of one iov. A helper one file uses stays in that file.
 */
#ifndef ND_TEST_DATA_FIXTURE_H
#define ND_TEST_DATA_FIXTURE_H

#include "cm_fixture.h"

#include <rdma/fi_rma.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>

namespace nd::test {

/* A buffer registered with the domain. */
struct Buffer {
	std::vector<uint8_t> bytes;
	fid_mr *mr = nullptr;

	Buffer(fid_domain *domain, size_t len, uint8_t fill = 0, uint64_t access = 0) : bytes(len, fill)
	{
		cr_assert_eq(fi_mr_reg(domain, bytes.data(), len, access, 0, 0, 0, &mr, nullptr), 0);
	}
	~Buffer()
	{
		if (mr)
			fi_close(&mr->fid);
	}
	Buffer(const Buffer &) = delete;
	Buffer &operator=(const Buffer &) = delete;
	void *desc() const { return fi_mr_desc(mr); }
	uint64_t key() const { return fi_mr_key(mr); }
	uint64_t addr(size_t offset = 0) const
	{
		return reinterpret_cast<uintptr_t>(bytes.data()) + offset;
	}
	uint8_t *data() { return bytes.data(); }
	void fill(const std::vector<uint8_t> &v) { std::copy(v.begin(), v.end(), bytes.begin()); }
	bool holds(const std::vector<uint8_t> &v, size_t offset = 0) const
	{
		return std::equal(v.begin(), v.end(), bytes.begin() + offset);
	}
};

struct Side {
	fid_ep *ep = nullptr;
	fid_cq *cq = nullptr;
};

struct DataOptions {
	size_t tx_size = 0;
	size_t rx_size = 0;
	size_t cq_size = 0;
	bool selective = false;
	bool bind_cq = true;
	fid_ep *srx = nullptr;				/* bound on both sides */
	fid_stx *client_stx = nullptr;			/* the client's send side */
	uint64_t rx_caps = 0;				/* asked on both sides (FI_MULTI_RECV) */
	uint64_t msg_order = 0;				/* tx_attr->msg_order, both sides */
	fi_cq_format cq_format = FI_CQ_FORMAT_DATA;
	fi_wait_obj cq_wait = FI_WAIT_NONE;		/* both sides' CQs */
	std::function<void(fid_ep *, bool client)> before_enable; /* counters */
	std::function<void(fid_ep *)> before_connect;	/* after fi_enable */
};

/* Reads one completion within `timeout_ms`; an error entry fails the test.
 * `Entry` is the CQ's format (fi_cq_tagged_entry for FI_CQ_FORMAT_TAGGED). */
template <typename Entry = fi_cq_data_entry>
Entry wait_cq(fid_cq *cq, int timeout_ms = 10000)
{
	Entry entry{};
	const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
	for (;;) {
		ssize_t rc = fi_cq_read(cq, &entry, 1);
		if (rc == 1)
			return entry;
		if (rc == -FI_EAVAIL) {
			fi_cq_err_entry err{};
			fi_cq_readerr(cq, &err, 0);
			cr_assert_fail("error completion: %s (%s, prov_errno %d, flags 0x%llx), context %p",
				       fi_strerror(err.err), fi_cq_strerror(cq, err.prov_errno, nullptr, nullptr, 0),
				       err.prov_errno, static_cast<unsigned long long>(err.flags), err.op_context);
		}
		cr_assert_eq(rc, -FI_EAGAIN, "fi_cq_read: %zd", rc);
		cr_assert(std::chrono::steady_clock::now() < end, "no completion in %d ms", timeout_ms);
		std::this_thread::yield();
	}
}

/* Reads one error completion within `timeout_ms`. */
inline fi_cq_err_entry wait_cq_error(fid_cq *cq, int timeout_ms = 10000)
{
	const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
	for (;;) {
		fi_cq_data_entry entry{};
		ssize_t rc = fi_cq_read(cq, &entry, 1);
		if (rc == -FI_EAVAIL) {
			fi_cq_err_entry err{};
			cr_assert_eq(fi_cq_readerr(cq, &err, 0), 1);
			return err;
		}
		cr_assert_eq(rc, -FI_EAGAIN, "expected an error completion, got rc %zd (context %p)", rc,
			     rc == 1 ? entry.op_context : nullptr);
		cr_assert(std::chrono::steady_clock::now() < end, "no error completion in %d ms",
			  timeout_ms);
		std::this_thread::yield();
	}
}

/* Nothing completes on `cq` within `ms`. */
inline void expect_cq_empty(fid_cq *cq, int ms = 200)
{
	const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
	do {
		fi_cq_data_entry entry{};
		ssize_t rc = fi_cq_read(cq, &entry, 1);
		cr_assert_eq(rc, -FI_EAGAIN, "unexpected completion: rc %zd, context %p", rc,
			     rc == 1 ? entry.op_context : nullptr);
		std::this_thread::yield();
	} while (std::chrono::steady_clock::now() < end);
}

struct DataFixture : CmFixture {
	std::vector<fid_cq *> cqs;
	std::vector<std::unique_ptr<Buffer>> buffers;	/* closed before the domain */

	Buffer &buffer(size_t len, uint8_t fill = 0, uint64_t access = 0)
	{
		buffers.push_back(std::make_unique<Buffer>(domain, len, fill, access));
		return *buffers.back();
	}

	fid_cq *open_cq(size_t size = 0, fi_wait_obj wait = FI_WAIT_NONE,
			fi_cq_format format = FI_CQ_FORMAT_DATA)
	{
		fi_cq_attr attr{};
		attr.format = format;
		attr.size = size;
		attr.wait_obj = wait;
		fid_cq *cq = nullptr;
		cr_assert_eq(fi_cq_open(domain, &attr, &cq, nullptr), 0);
		cqs.push_back(cq);
		return cq;
	}

	fid_ep *make_ep(fi_info *from, const DataOptions &o, fid_cq **cq_out, fid_stx *stx = nullptr)
	{
		InfoPtr copy(fi_dupinfo(from));
		if (stx)
			copy->ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT;
		copy->caps |= o.rx_caps;
		copy->rx_attr->caps |= o.rx_caps;
		if (o.msg_order)
			copy->tx_attr->msg_order = o.msg_order;
		if (o.tx_size)
			copy->tx_attr->size = o.tx_size;
		if (o.rx_size)
			copy->rx_attr->size = o.rx_size;
		fid_ep *ep = nullptr;
		cr_assert_eq(fi_endpoint(domain, copy.get(), &ep, nullptr), 0);
		cr_assert_eq(fi_ep_bind(ep, &eq->fid, 0), 0);
		if (o.bind_cq) {
			*cq_out = open_cq(o.cq_size, o.cq_wait, o.cq_format);
			uint64_t flags = FI_TRANSMIT | FI_RECV | (o.selective ? FI_SELECTIVE_COMPLETION : 0);
			cr_assert_eq(fi_ep_bind(ep, &(*cq_out)->fid, flags), 0);
		}
		if (o.srx)
			cr_assert_eq(fi_ep_bind(ep, &o.srx->fid, 0), 0);
		if (stx)
			cr_assert_eq(fi_ep_bind(ep, &stx->fid, 0), 0);
		return ep;
	}

	/* A shared receive context of `size` receives (the caller closes it). */
	fid_ep *shared_rx(size_t size)
	{
		fi_rx_attr rx = *info->rx_attr;
		rx.size = size;
		fid_ep *srx = nullptr;
		cr_assert_eq(fi_srx_context(domain, &rx, &srx, nullptr), 0);
		return srx;
	}

	/* A connected pair with its CQs: {client, server}. */
	std::pair<Side, Side> connect_data(const DataOptions &o = {})
	{
		Side c, s;
		c.ep = make_ep(info.get(), o, &c.cq, o.client_stx);
		if (o.before_enable)
			o.before_enable(c.ep, true);
		cr_assert_eq(fi_enable(c.ep), 0);
		if (o.before_connect)
			o.before_connect(c.ep);
		cr_assert_eq(fi_connect(c.ep, &listen_addr, nullptr, 0), 0);
		Event req = expect_event(eq, FI_CONNREQ, &pep->fid);
		s.ep = make_ep(req.info, o, &s.cq);
		fi_freeinfo(req.info);
		if (o.before_enable)
			o.before_enable(s.ep, false);
		cr_assert_eq(fi_enable(s.ep), 0);
		if (o.before_connect)
			o.before_connect(s.ep);
		cr_assert_eq(fi_accept(s.ep, nullptr, 0), 0);
		for (int i = 0; i < 2; i++)
			expect_event(eq, FI_CONNECTED, nullptr);
		return {c, s};
	}

	void close_data()
	{
		buffers.clear();
		for (fid_cq *cq : cqs)
			cr_assert_eq(fi_close(&cq->fid), 0);
		cqs.clear();
		close();
	}
};

/* What the process writes to stderr (libfabric's log) while it lives. */
class StderrCapture {
public:
	StderrCapture() : file_(std::tmpfile()), saved_(dup(STDERR_FILENO))
	{
		cr_assert_not_null(file_);
		std::fflush(stderr);
		cr_assert_geq(dup2(fileno(file_), STDERR_FILENO), 0);
	}
	~StderrCapture() { restore(); }
	std::string text()
	{
		restore();
		std::string out;
		std::rewind(file_);
		char chunk[512];
		for (size_t got; (got = std::fread(chunk, 1, sizeof(chunk), file_)) > 0;)
			out.append(chunk, got);
		return out;
	}

private:
	void restore()
	{
		if (saved_ < 0)
			return;
		std::fflush(stderr);
		dup2(saved_, STDERR_FILENO);
		close(saved_);
		saved_ = -1;
	}
	FILE *file_;
	int saved_;
};

inline void close_side(Side s) { cr_assert_eq(fi_close(&s.ep->fid), 0); }

/* An fi_msg_rma of one iov and one remote range (fi_readmsg, fi_writemsg
 * with flags of their own). */
inline fi_msg_rma one_iov_rma_msg(iovec *iov, void **desc, fi_rma_iov *rma, void *context)
{
	fi_msg_rma msg{};
	msg.msg_iov = iov;
	msg.desc = desc;
	msg.iov_count = 1;
	msg.rma_iov = rma;
	msg.rma_iov_count = 1;
	msg.context = context;
	return msg;
}

/* Sends `len` bytes client → server and checks both completions. */
inline void send_and_check(DataFixture &f, Side from, Side to, size_t len, uint8_t seed)
{
	Buffer &src = f.buffer(len ? len : 1);
	Buffer &dst = f.buffer(len + 16, 0xee);
	auto want = pattern(len, seed);
	src.fill(want);
	int recv_ctx, send_ctx;
	cr_assert_eq(fi_recv(to.ep, dst.data(), len + 16, dst.desc(), 0, &recv_ctx), 0);
	cr_assert_eq(fi_send(from.ep, src.data(), len, src.desc(), 0, &send_ctx), 0);
	fi_cq_data_entry r = wait_cq(to.cq);
	cr_assert_eq(r.op_context, &recv_ctx);
	cr_assert_eq(r.flags, FI_RECV | FI_MSG, "recv flags 0x%llx", (unsigned long long)r.flags);
	cr_assert_eq(r.len, len, "received %zu bytes, sent %zu", r.len, len);
	cr_assert(dst.holds(want), "%zu bytes arrived intact", len);
	cr_assert_eq(dst.bytes[len], 0xee, "nothing written past the message");
	fi_cq_data_entry s = wait_cq(from.cq);
	cr_assert_eq(s.op_context, &send_ctx);
	cr_assert_eq(s.flags, FI_SEND | FI_MSG);
}

} // namespace nd::test

#endif /* ND_TEST_DATA_FIXTURE_H */
