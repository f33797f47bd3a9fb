/*
 * nd_ep_atomic.cpp: fi_atomic, fi_fetch_atomic and fi_compare_atomic (and
 * their v, msg and inject forms) on the adapter's own 64-bit fetch-and-add
 * and compare-and-swap, and fi_query_atomic and the *valid calls that say
 * exactly which (nd_atomic.h). Everything is checked before the adapter
 * sees it: an atomic the responder refuses (a bad key) ends the connection,
 * as a bad RDMA key does, but one nd can see is wrong (a misaligned address,
 * more than one element, an operation the adapter lacks) is refused here
 * with -FI_E* and a log line, and the connection carries on.
 */
#include "nd_atomic.h"
#include "nd_domain.h"
#include "nd_ep.h"
#include "nd_mr.h"

#include <rdma/fi_atomic.h>

#include <cstring>

namespace nd {

namespace {

using atomics::Call;


bool wants_completion(const Endpoint *ep, uint64_t flags)
{
	return !ep->bindings.tx_selective || (flags & FI_COMPLETION);
}

/* One atomic as the calls give it, before checking. */
struct AtomicRequest {
	Call call;
	fi_datatype datatype;
	fi_op op;
	const void *operand;		/* the addend, or the value swapped in */
	size_t count;			/* elements: nd does 1 */
	const void *compare;		/* fi_compare_atomic */
	void *result;			/* fi_fetch_atomic, fi_compare_atomic */
	void *result_desc;
	uint64_t addr;
	uint64_t key;
	void *context;
	uint64_t flags;
	bool report;
	const char *call_name;
};

/* The *valid calls ask; they log what is not carried as information. */
int valid(Endpoint *ep, Call call, fi_datatype datatype, fi_op op, size_t *count, const char *name)
{
	const char *why = nullptr;
	if (int ret = atomics::check(ep->domain->atomics, datatype, op, call, &why)) {
		ND_INFO(FI_LOG_EP_DATA, "%s: %s on %s not supported: %s\n", name, atomics::op_name(op),
			atomics::datatype_name(datatype), why);
		return ret;
	}
	if (!count) {
		ND_WARN(FI_LOG_EP_DATA, "%s: count is NULL\n", name);
		return -FI_EINVAL;
	}
	*count = 1;
	return 0;
}

ssize_t post_atomic(Endpoint *ep, const AtomicRequest &a)
{
	const char *call = a.call_name;
	const char *why = nullptr;
	if (int ret = atomics::check(ep->domain->atomics, a.datatype, a.op, a.call, &why)) {
		ND_WARN(FI_LOG_EP_DATA, "%s: %s on %s not supported: %s\n", call, atomics::op_name(a.op),
			atomics::datatype_name(a.datatype), why);
		return ret;
	}
	if (a.count != 1) {
		ND_WARN(FI_LOG_EP_DATA, "%s: %zu elements; the adapter does one 64-bit word a call "
			"(fi_query_atomic's count is 1)\n", call, a.count);
		return -FI_EINVAL;
	}
	if (!a.operand || (a.call == Call::compare && !a.compare) || (a.call != Call::atomic && !a.result)) {
		ND_WARN(FI_LOG_EP_DATA, "%s: the %s buffer is NULL\n", call,
			!a.operand ? "operand" : (a.call == Call::compare && !a.compare) ? "compare" : "result");
		return -FI_EINVAL;
	}
	if (a.addr % atomics::kAlignment) {
		ND_WARN(FI_LOG_EP_DATA, "%s: remote address 0x%llx is not 8-byte aligned (the adapter "
			"would end the connection)\n", call, static_cast<unsigned long long>(a.addr));
		return -FI_EINVAL;
	}
	if (a.key > UINT32_MAX) {
		ND_WARN(FI_LOG_EP_DATA, "%s: key 0x%llx is wider than the 4 bytes of mr_key_size\n", call,
			static_cast<unsigned long long>(a.key));
		return -FI_EINVAL;
	}
	if (a.flags & FI_REMOTE_CQ_DATA) {
		ND_WARN(FI_LOG_EP_DATA, "%s: FI_REMOTE_CQ_DATA: the adapter carries no immediate data with an atomic\n",
			call);
		return -FI_EOPNOTSUPP;
	}
	if ((a.flags & FI_INJECT) && a.call != Call::atomic) {
		ND_WARN(FI_LOG_EP_DATA, "%s: FI_INJECT with a result to land\n", call);
		return -FI_EINVAL;
	}
	/* The old value lands locally: in the caller's result buffer, or for
	 * fi_atomic in the domain's word that nobody reads. */
	iovec local;
	void *desc;
	MrDescriptor sink_desc;
	if (a.call == Call::atomic) {
		const Domain::AtomicSink *sink = ep->domain->atomic_sink();
		if (!sink)
			return -FI_ENOMEM;
		local = {const_cast<uint64_t *>(&sink->word), atomics::kWordSize};
		sink_desc.lkey = sink->mr->lkey;
		desc = &sink_desc;
	} else {
		local = {a.result, atomics::kWordSize};
		desc = a.result_desc;
	}
	uint64_t operand = 0, compare = 0;
	std::memcpy(&operand, a.operand, sizeof(operand));
	if (a.call == Call::compare)
		std::memcpy(&compare, a.compare, sizeof(compare));

	TxRequest r;
	r.opcode = a.call == Call::compare ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD;
	r.iov = &local;
	r.desc = &desc;
	r.count = 1;
	r.remote_addr = a.addr;
	r.remote_key = a.key;
	r.imm_data = 0;
	r.compare_add = a.call == Call::compare ? compare : operand;
	r.swap = a.call == Call::compare ? operand : 0;
	r.context = a.context;
	r.flags = a.flags;
	r.cq_flags = FI_ATOMIC | (a.call == Call::atomic ? FI_WRITE : FI_READ);
	r.report = a.report;
	r.call = call;
	return ep->post_tx(r);
}

/* The one element of an fi_ioc list (nd does one a call). */
ssize_t single(const fi_ioc *iov, size_t count, const char *call, const char *what, const void **addr,
	       size_t *elements)
{
	if (count != 1 || !iov) {
		ND_WARN(FI_LOG_EP_DATA, "%s: %zu %s entries; nd does one element a call\n", call,
			iov ? count : 0, what);
		return -FI_EINVAL;
	}
	*addr = iov[0].addr;
	*elements = iov[0].count;
	return 0;
}

/* The remote word of an fi_msg_atomic. */
ssize_t remote_of(const fi_msg_atomic *msg, const char *call, uint64_t *addr, uint64_t *key)
{
	if (!msg) {
		ND_WARN(FI_LOG_EP_DATA, "%s: msg is NULL\n", call);
		return -FI_EINVAL;
	}
	if (msg->rma_iov_count != 1 || !msg->rma_iov || msg->rma_iov[0].count != 1) {
		ND_WARN(FI_LOG_EP_DATA, "%s: %zu remote entries of %zu elements; nd does one element a call\n",
			call, msg->rma_iov ? msg->rma_iov_count : 0,
			msg->rma_iov && msg->rma_iov_count ? msg->rma_iov[0].count : 0);
		return -FI_EINVAL;
	}
	*addr = msg->rma_iov[0].addr;
	*key = msg->rma_iov[0].key;
	return 0;
}

void *first_desc(void **desc) { return desc ? desc[0] : nullptr; }

/* The calls without a flags argument: the endpoint's op_flags, and a CQ
 * entry unless the endpoint's completions are selective. */
ssize_t post_with_op_flags(fid_ep *fep, AtomicRequest a)
{
	Endpoint *ep = ep_of(fep);
	a.flags = ep->data.tx.op_flags;
	a.report = wants_completion(ep, a.flags);
	return post_atomic(ep, a);
}

/* fi_atomic and its forms. */

ssize_t ep_atomic(fid_ep *fep, const void *buf, size_t count, void *, fi_addr_t, uint64_t addr,
		  uint64_t key, fi_datatype datatype, fi_op op, void *context) noexcept
{
	return post_with_op_flags(fep, {Call::atomic, datatype, op, buf, count, nullptr, nullptr, nullptr, addr, key,
				       context, 0, false, "fi_atomic"});
}

ssize_t ep_atomicv(fid_ep *fep, const fi_ioc *iov, void **, size_t count, fi_addr_t, uint64_t addr,
		   uint64_t key, fi_datatype datatype, fi_op op, void *context) noexcept
{
	const void *buf;
	size_t elements;
	if (ssize_t ret = single(iov, count, "fi_atomicv", "operand", &buf, &elements))
		return ret;
	return post_with_op_flags(fep, {Call::atomic, datatype, op, buf, elements, nullptr, nullptr, nullptr, addr,
				       key, context, 0, false, "fi_atomicv"});
}

ssize_t ep_atomicmsg(fid_ep *fep, const fi_msg_atomic *msg, uint64_t flags) noexcept
{
	uint64_t addr, key;
	if (ssize_t ret = remote_of(msg, "fi_atomicmsg", &addr, &key))
		return ret;
	const void *buf;
	size_t elements;
	if (ssize_t ret = single(msg->msg_iov, msg->iov_count, "fi_atomicmsg", "operand", &buf, &elements))
		return ret;
	Endpoint *ep = ep_of(fep);
	return post_atomic(ep, {Call::atomic, msg->datatype, msg->op, buf, elements, nullptr, nullptr, nullptr,
				addr, key, msg->context, flags, wants_completion(ep, flags), "fi_atomicmsg"});
}

ssize_t ep_inject_atomic(fid_ep *fep, const void *buf, size_t count, fi_addr_t, uint64_t addr, uint64_t key,
			 fi_datatype datatype, fi_op op) noexcept
{
	Endpoint *ep = ep_of(fep);
	return post_atomic(ep, {Call::atomic, datatype, op, buf, count, nullptr, nullptr, nullptr, addr, key,
				nullptr, ep->data.tx.op_flags | FI_INJECT, false, "fi_inject_atomic"});
}

/* fi_fetch_atomic and its forms. */

ssize_t ep_fetch_atomic(fid_ep *fep, const void *buf, size_t count, void *, void *result, void *result_desc,
			fi_addr_t, uint64_t addr, uint64_t key, fi_datatype datatype, fi_op op,
			void *context) noexcept
{
	return post_with_op_flags(fep, {Call::fetch, datatype, op, buf, count, nullptr, result, result_desc, addr,
				       key, context, 0, false, "fi_fetch_atomic"});
}

ssize_t ep_fetch_atomicv(fid_ep *fep, const fi_ioc *iov, void **, size_t count, fi_ioc *resultv,
			 void **result_desc, size_t result_count, fi_addr_t, uint64_t addr, uint64_t key,
			 fi_datatype datatype, fi_op op, void *context) noexcept
{
	const void *buf, *result;
	size_t elements, result_elements;
	if (ssize_t ret = single(iov, count, "fi_fetch_atomicv", "operand", &buf, &elements))
		return ret;
	if (ssize_t ret = single(resultv, result_count, "fi_fetch_atomicv", "result", &result, &result_elements))
		return ret;
	return post_with_op_flags(fep, {Call::fetch, datatype, op, buf, elements, nullptr,
				       const_cast<void *>(result), first_desc(result_desc), addr, key, context, 0,
				       false, "fi_fetch_atomicv"});
}

ssize_t ep_fetch_atomicmsg(fid_ep *fep, const fi_msg_atomic *msg, fi_ioc *resultv, void **result_desc,
			   size_t result_count, uint64_t flags) noexcept
{
	uint64_t addr, key;
	if (ssize_t ret = remote_of(msg, "fi_fetch_atomicmsg", &addr, &key))
		return ret;
	const void *buf, *result;
	size_t elements, result_elements;
	if (ssize_t ret = single(msg->msg_iov, msg->iov_count, "fi_fetch_atomicmsg", "operand", &buf, &elements))
		return ret;
	if (ssize_t ret = single(resultv, result_count, "fi_fetch_atomicmsg", "result", &result, &result_elements))
		return ret;
	Endpoint *ep = ep_of(fep);
	return post_atomic(ep, {Call::fetch, msg->datatype, msg->op, buf, elements, nullptr,
				const_cast<void *>(result), first_desc(result_desc), addr, key, msg->context, flags,
				wants_completion(ep, flags), "fi_fetch_atomicmsg"});
}

/* fi_compare_atomic and its forms. */

ssize_t ep_compare_atomic(fid_ep *fep, const void *buf, size_t count, void *, const void *compare, void *,
			  void *result, void *result_desc, fi_addr_t, uint64_t addr, uint64_t key,
			  fi_datatype datatype, fi_op op, void *context) noexcept
{
	return post_with_op_flags(fep, {Call::compare, datatype, op, buf, count, compare, result, result_desc, addr,
				       key, context, 0, false, "fi_compare_atomic"});
}

ssize_t ep_compare_atomicv(fid_ep *fep, const fi_ioc *iov, void **, size_t count, const fi_ioc *comparev,
			   void **, size_t compare_count, fi_ioc *resultv, void **result_desc,
			   size_t result_count, fi_addr_t, uint64_t addr, uint64_t key, fi_datatype datatype,
			   fi_op op, void *context) noexcept
{
	const void *buf, *compare, *result;
	size_t elements, compare_elements, result_elements;
	if (ssize_t ret = single(iov, count, "fi_compare_atomicv", "operand", &buf, &elements))
		return ret;
	if (ssize_t ret = single(comparev, compare_count, "fi_compare_atomicv", "compare", &compare,
				 &compare_elements))
		return ret;
	if (ssize_t ret = single(resultv, result_count, "fi_compare_atomicv", "result", &result, &result_elements))
		return ret;
	return post_with_op_flags(fep, {Call::compare, datatype, op, buf, elements, compare,
				       const_cast<void *>(result), first_desc(result_desc), addr, key, context, 0,
				       false, "fi_compare_atomicv"});
}

ssize_t ep_compare_atomicmsg(fid_ep *fep, const fi_msg_atomic *msg, const fi_ioc *comparev, void **,
			     size_t compare_count, fi_ioc *resultv, void **result_desc, size_t result_count,
			     uint64_t flags) noexcept
{
	uint64_t addr, key;
	if (ssize_t ret = remote_of(msg, "fi_compare_atomicmsg", &addr, &key))
		return ret;
	const void *buf, *compare, *result;
	size_t elements, compare_elements, result_elements;
	if (ssize_t ret = single(msg->msg_iov, msg->iov_count, "fi_compare_atomicmsg", "operand", &buf, &elements))
		return ret;
	if (ssize_t ret = single(comparev, compare_count, "fi_compare_atomicmsg", "compare", &compare,
				 &compare_elements))
		return ret;
	if (ssize_t ret = single(resultv, result_count, "fi_compare_atomicmsg", "result", &result,
				 &result_elements))
		return ret;
	Endpoint *ep = ep_of(fep);
	return post_atomic(ep, {Call::compare, msg->datatype, msg->op, buf, elements, compare,
				const_cast<void *>(result), first_desc(result_desc), addr, key, msg->context, flags,
				wants_completion(ep, flags), "fi_compare_atomicmsg"});
}

int ep_atomic_valid(fid_ep *fep, fi_datatype datatype, fi_op op, size_t *count) noexcept
{
	return valid(ep_of(fep), Call::atomic, datatype, op, count, "fi_atomicvalid");
}

int ep_fetch_atomic_valid(fid_ep *fep, fi_datatype datatype, fi_op op, size_t *count) noexcept
{
	return valid(ep_of(fep), Call::fetch, datatype, op, count, "fi_fetch_atomicvalid");
}

int ep_compare_atomic_valid(fid_ep *fep, fi_datatype datatype, fi_op op, size_t *count) noexcept
{
	return valid(ep_of(fep), Call::compare, datatype, op, count, "fi_compare_atomicvalid");
}

} // namespace

int query_atomic(fid_domain *fdomain, fi_datatype datatype, fi_op op, fi_atomic_attr *attr,
		 uint64_t flags) noexcept
{
	if (!attr) {
		ND_WARN(FI_LOG_DOMAIN, "fi_query_atomic: attr is NULL\n");
		return -FI_EINVAL;
	}
	const Domain *domain = from_fid<Domain>(&fdomain->fid);
	Call call;
	const char *why = nullptr;
	int ret = atomics::call_of_query_flags(flags, &call, &why);
	if (!ret)
		ret = atomics::check(domain->atomics, datatype, op, call, &why);
	if (ret) {
		ND_INFO(FI_LOG_DOMAIN, "fi_query_atomic(%s, %s, flags 0x%llx): not supported: %s\n",
			atomics::op_name(op), atomics::datatype_name(datatype), static_cast<unsigned long long>(flags),
			why);
		return ret;
	}
	attr->size = atomics::kWordSize;
	attr->count = 1;
	return 0;
}

fi_ops_atomic ep_atomic_ops = {
	.size = sizeof(fi_ops_atomic),
	.write = ep_atomic,
	.writev = ep_atomicv,
	.writemsg = ep_atomicmsg,
	.inject = ep_inject_atomic,
	.readwrite = ep_fetch_atomic,
	.readwritev = ep_fetch_atomicv,
	.readwritemsg = ep_fetch_atomicmsg,
	.compwrite = ep_compare_atomic,
	.compwritev = ep_compare_atomicv,
	.compwritemsg = ep_compare_atomicmsg,
	.writevalid = ep_atomic_valid,
	.readwritevalid = ep_fetch_atomic_valid,
	.compwritevalid = ep_compare_atomic_valid,
};

} // namespace nd
