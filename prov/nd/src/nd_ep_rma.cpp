/*
 * nd_ep_rma.cpp: RMA on the device's own RDMA READ and WRITE (fi_read ...
 * fi_inject_writedata). The _data variants are RDMA WRITE with immediate,
 * which consumes a posted receive at the target, as libfabric specifies.
 * Remote addresses are virtual addresses (FI_MR_VIRT_ADDR) and keys are
 * rkeys (FI_MR_PROV_KEY, 4 bytes).
 */
#include "nd_domain.h"
#include "nd_ep.h"
#include "nd_ep_inject.h"
#include "nd_ep_post_one.h"

#include <rdma/fi_rma.h>

#include <arpa/inet.h>

namespace nd {

namespace {


struct Remote {
	uint64_t addr;
	uint64_t key;
};

ssize_t rma(Endpoint *ep, ibv_wr_opcode opcode, const iovec *iov, void **desc, size_t count,
	    Remote remote, uint64_t data, void *context, uint64_t flags, bool report,
	    const char *call)
{
	if (remote.key > UINT32_MAX) {
		ND_WARN(FI_LOG_EP_DATA, "%s: key 0x%llx is wider than the 4 bytes of mr_key_size\n", call,
			static_cast<unsigned long long>(remote.key));
		return -FI_EINVAL;
	}
	if (opcode == IBV_WR_RDMA_READ && count > ep->domain->max_read_sge) {
		/* The device would read into the first buffers only (soft-iWARP
		 * reads into one): refused rather than silently short. */
		ND_WARN(FI_LOG_EP_DATA, "%s: %zu local buffers; the device reads into at most %u (max_sge_rd)\n",
			call, count, ep->domain->max_read_sge);
		return -FI_EINVAL;
	}
	TxRequest r;
	r.opcode = opcode;
	r.iov = iov;
	r.desc = desc;
	r.count = count;
	r.remote_addr = remote.addr;
	r.remote_key = remote.key;
	r.imm_data = opcode == IBV_WR_RDMA_WRITE_WITH_IMM ? htonl(static_cast<uint32_t>(data)) : 0;
	r.context = context;
	r.flags = flags;
	r.cq_flags = FI_RMA | (opcode == IBV_WR_RDMA_READ ? FI_READ : FI_WRITE);
	r.report = report;
	r.call = call;
	return ep->post_tx(r);
}

bool wants_completion(const Endpoint *ep, uint64_t flags)
{
	return !ep->bindings.tx_selective || (flags & FI_COMPLETION);
}

/* The single remote range of an fi_msg_rma (rma_iov_limit is 1). */
ssize_t remote_of(const fi_msg_rma *msg, const char *call, Remote *out)
{
	if (!msg) {
		ND_WARN(FI_LOG_EP_DATA, "%s: msg is NULL\n", call);
		return -FI_EINVAL;
	}
	if (msg->rma_iov_count != 1 || !msg->rma_iov) {
		ND_WARN(FI_LOG_EP_DATA, "%s: %zu remote iovs; rma_iov_limit is 1\n", call,
			msg->rma_iov_count);
		return -FI_EINVAL;
	}
	uint64_t local = 0;
	for (size_t i = 0; i < msg->iov_count && msg->msg_iov; i++)
		local += msg->msg_iov[i].iov_len;
	if (local > msg->rma_iov[0].len) {
		ND_WARN(FI_LOG_EP_DATA, "%s: %llu local bytes for a remote range of %zu\n", call,
			static_cast<unsigned long long>(local), msg->rma_iov[0].len);
		return -FI_EINVAL;
	}
	*out = {msg->rma_iov[0].addr, msg->rma_iov[0].key};
	return 0;
}

/* fi_read and fi_write of one buffer, and their iov and msg forms: one
 * body per form, the opcode its only difference. */
template <ibv_wr_opcode Op, Keeps K>
[[gnu::always_inline]] inline ssize_t rma_one(fid_ep *fep, void *buf, size_t len, void *desc, uint64_t addr,
					      uint64_t key, void *context, const char *call)
{
	Endpoint *ep = ep_of(fep);
	const uint64_t flags = ep->data.tx.op_flags;
	const bool report = wants_completion(ep, flags);
	return ep->post_one<Op, K>(buf, len, desc, addr, key, context, flags, report, call, [&] {
		iovec iov{buf, len};
		return rma(ep, Op, &iov, &desc, 1, {addr, key}, 0, context, flags, report, call);
	});
}

template <ibv_wr_opcode Op>
ssize_t rma_vector(fid_ep *fep, const iovec *iov, void **desc, size_t count, uint64_t addr, uint64_t key,
		   void *context, const char *call)
{
	Endpoint *ep = ep_of(fep);
	const uint64_t flags = ep->data.tx.op_flags;
	return rma(ep, Op, iov, desc, count, {addr, key}, 0, context, flags, wants_completion(ep, flags), call);
}

/* fi_readmsg and fi_writemsg: the message's one remote range. */
ssize_t rma_message(fid_ep *fep, const fi_msg_rma *msg, uint64_t flags, ibv_wr_opcode opcode, const char *call)
{
	Remote remote;
	if (ssize_t ret = remote_of(msg, call, &remote))
		return ret;
	Endpoint *ep = ep_of(fep);
	return rma(ep, opcode, msg->msg_iov, msg->desc, msg->iov_count, remote, msg->data, msg->context, flags,
		   wants_completion(ep, flags), call);
}

template <Keeps K>
ssize_t ep_read(fid_ep *fep, void *buf, size_t len, void *desc, fi_addr_t, uint64_t addr,
		uint64_t key, void *context) noexcept
{
	return rma_one<IBV_WR_RDMA_READ, K>(fep, buf, len, desc, addr, key, context, "fi_read");
}

ssize_t ep_readv(fid_ep *fep, const iovec *iov, void **desc, size_t count, fi_addr_t,
		 uint64_t addr, uint64_t key, void *context) noexcept
{
	return rma_vector<IBV_WR_RDMA_READ>(fep, iov, desc, count, addr, key, context, "fi_readv");
}

ssize_t ep_readmsg(fid_ep *fep, const fi_msg_rma *msg, uint64_t flags) noexcept
{
	return rma_message(fep, msg, flags, IBV_WR_RDMA_READ, "fi_readmsg");
}

template <Keeps K>
ssize_t ep_write(fid_ep *fep, const void *buf, size_t len, void *desc, fi_addr_t, uint64_t addr,
		 uint64_t key, void *context) noexcept
{
	/* Never written through: the device reads it. */
	return rma_one<IBV_WR_RDMA_WRITE, K>(fep, const_cast<void *>(buf), len, desc, addr, key, context, "fi_write");
}

ssize_t ep_writev(fid_ep *fep, const iovec *iov, void **desc, size_t count, fi_addr_t,
		  uint64_t addr, uint64_t key, void *context) noexcept
{
	return rma_vector<IBV_WR_RDMA_WRITE>(fep, iov, desc, count, addr, key, context, "fi_writev");
}

ssize_t ep_writemsg(fid_ep *fep, const fi_msg_rma *msg, uint64_t flags) noexcept
{
	const bool with_data = flags & FI_REMOTE_CQ_DATA;
	return rma_message(fep, msg, flags, with_data ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
			   "fi_writemsg");
}

template <Keeps K>
ssize_t ep_inject_write(fid_ep *fep, const void *buf, size_t len, fi_addr_t, uint64_t addr,
			uint64_t key) noexcept
{
	return ep_of(fep)->post_inline<IBV_WR_RDMA_WRITE, K>(buf, len, 0, addr, key);
}

ssize_t ep_writedata(fid_ep *fep, const void *buf, size_t len, void *desc, uint64_t data,
		     fi_addr_t, uint64_t addr, uint64_t key, void *context) noexcept
{
	Endpoint *ep = ep_of(fep);
	iovec iov{const_cast<void *>(buf), len};
	return rma(ep, IBV_WR_RDMA_WRITE_WITH_IMM, &iov, &desc, 1, {addr, key}, data, context,
		   ep->data.tx.op_flags, wants_completion(ep, ep->data.tx.op_flags), "fi_writedata");
}

ssize_t ep_inject_writedata(fid_ep *fep, const void *buf, size_t len, uint64_t data, fi_addr_t,
			    uint64_t addr, uint64_t key) noexcept
{
	return ep_of(fep)->post_inline<IBV_WR_RDMA_WRITE_WITH_IMM>(
		buf, len, htonl(static_cast<uint32_t>(data)), addr, key);
}

/* K: what the table's fast paths keep (nd_ep.h). */
template <Keeps K>
constexpr fi_ops_rma rma_ops() noexcept
{
	return {
		.size = sizeof(fi_ops_rma),
		.read = ep_read<K>,
		.readv = ep_readv,
		.readmsg = ep_readmsg,
		.write = ep_write<K>,
		.writev = ep_writev,
		.writemsg = ep_writemsg,
		.inject = ep_inject_write<K>,
		.writedata = ep_writedata,
		.injectdata = ep_inject_writedata,
	};
}

} // namespace

fi_ops_rma ep_rma_ops = rma_ops<Keeps::nothing>();
fi_ops_rma ep_credit_rma_ops = rma_ops<Keeps::receive_credits>();
fi_ops_rma ep_flow_rma_ops = rma_ops<Keeps::flow_credits>();

} // namespace nd
