/* nd_unsupported.cpp: -FI_ENOSYS entry points, each saying what was asked. */
#include "nd_unsupported.h"
#include "nd.h"

#include <rdma/fi_collective.h>

namespace nd::unsupported {

namespace {

int not_implemented(const char *operation, const char *why) noexcept
{
	ND_WARN(FI_LOG_CORE, "%s is not implemented by the nd provider: %s\n", operation, why);
	return -FI_ENOSYS;
}

constexpr const char *kLater = "not implemented yet";

} // namespace

int av_open(fid_domain *, fi_av_attr *, fid_av **, void *) noexcept
{
	return not_implemented("fi_av_open", "FI_EP_MSG endpoints address peers by connection");
}

int scalable_ep(fid_domain *, fi_info *, fid_ep **, void *) noexcept
{
	return not_implemented("fi_scalable_ep", "FI_EP_MSG endpoints have one context each");
}

int query_collective(fid_domain *, fi_collective_op, fi_collective_attr *, uint64_t) noexcept
{
	return not_implemented("fi_query_collective", "collectives are not offered");
}

int ops_open(fid *, const char *name, uint64_t, void **, void *) noexcept
{
	ND_WARN(FI_LOG_CORE, "fi_open_ops: no extension ops named '%s'\n", name ? name : "(null)");
	return -FI_ENOSYS;
}

namespace {

const char *class_name(const fid *object) noexcept
{
	switch (object ? object->fclass : static_cast<size_t>(FI_CLASS_UNSPEC)) {
	case FI_CLASS_FABRIC: return "fabric";
	case FI_CLASS_DOMAIN: return "domain";
	case FI_CLASS_EQ: return "EQ";
	case FI_CLASS_CQ: return "CQ";
	case FI_CLASS_CNTR: return "counter";
	case FI_CLASS_WAIT: return "wait set";
	case FI_CLASS_POLL: return "poll set";
	case FI_CLASS_MR: return "memory region";
	case FI_CLASS_SRX_CTX: return "shared receive context";
	case FI_CLASS_STX_CTX: return "shared transmit context";
	case FI_CLASS_CONNREQ: return "connection request";
	case FI_CLASS_NIC: return "NIC";
	default: return "object";
	}
}

/* What an application that binds something to `object` should do
 * instead. */
const char *why_nothing_binds(const fid *object) noexcept
{
	switch (object ? object->fclass : static_cast<size_t>(FI_CLASS_UNSPEC)) {
	case FI_CLASS_FABRIC: return "a fabric binds to nothing";
	case FI_CLASS_DOMAIN: return "registration completes synchronously: a domain takes no EQ";
	case FI_CLASS_EQ: return "bind endpoints to the EQ instead";
	case FI_CLASS_CQ: case FI_CLASS_CNTR:
		return "bind endpoints to it instead (it joins a wait set when opened with FI_WAIT_SET)";
	case FI_CLASS_WAIT: return "CQs, EQs and counters join a wait set when opened (wait_obj FI_WAIT_SET)";
	case FI_CLASS_POLL: return "add CQs and counters with fi_poll_add";
	case FI_CLASS_MR:
		return "mr_mode has no FI_MR_ENDPOINT: a region serves every endpoint of its domain";
	case FI_CLASS_SRX_CTX: case FI_CLASS_STX_CTX:
		return "bind the endpoints to the context, not the context to a CQ";
	case FI_CLASS_CONNREQ: return "pass the request to fi_endpoint (info->handle), then bind the endpoint";
	default: return "this object binds to nothing";
	}
}

} // namespace

int control(fid *object, int command, void *) noexcept
{
	ND_WARN(FI_LOG_CORE, "fi_control(%s): command %d not supported\n", class_name(object), command);
	return -FI_ENOSYS;
}

int bind(fid *object, fid *, uint64_t) noexcept
{
	ND_WARN(FI_LOG_CORE, "fi_bind(%s): %s\n", class_name(object), why_nothing_binds(object));
	return -FI_ENOSYS;
}

ssize_t cancel(fid *, void *) noexcept
{
	return not_implemented("fi_cancel", kLater);
}

int tx_ctx(fid_ep *, int, fi_tx_attr *, fid_ep **, void *) noexcept
{
	return not_implemented("fi_tx_context", "only scalable endpoints have contexts");
}

int rx_ctx(fid_ep *, int, fi_rx_attr *, fid_ep **, void *) noexcept
{
	return not_implemented("fi_rx_context", "only scalable endpoints have contexts");
}

ssize_t rx_size_left(fid_ep *) noexcept
{
	return not_implemented("fi_rx_size_left", "deprecated by libfabric");
}

ssize_t tx_size_left(fid_ep *) noexcept
{
	return not_implemented("fi_tx_size_left", "deprecated by libfabric");
}

int setopt(fid *, int, int optname, const void *, size_t) noexcept
{
	ND_WARN(FI_LOG_EP_CTRL, "fi_setopt: option %d cannot be set on this object\n", optname);
	return -FI_ENOPROTOOPT;
}

int getopt(fid *, int, int optname, void *, size_t *) noexcept
{
	ND_WARN(FI_LOG_EP_CTRL, "fi_getopt: option %d is not defined on this object\n", optname);
	return -FI_ENOPROTOOPT;
}

int setname(fid *, void *, size_t) noexcept
{
	return not_implemented("fi_setname", "this object has no address of its own");
}

int getname(fid *, void *, size_t *) noexcept
{
	return not_implemented("fi_getname", "this object has no address of its own");
}

namespace {

ssize_t receive_only(const char *operation) noexcept
{
	ND_WARN(FI_LOG_EP_DATA, "%s on an object that only receives (a shared receive context)\n",
		operation);
	return -FI_ENOSYS;
}

} // namespace

ssize_t send(fid_ep *, const void *, size_t, void *, fi_addr_t, void *) noexcept
{
	return receive_only("fi_send");
}

ssize_t sendv(fid_ep *, const iovec *, void **, size_t, fi_addr_t, void *) noexcept
{
	return receive_only("fi_sendv");
}

ssize_t sendmsg(fid_ep *, const fi_msg *, uint64_t) noexcept
{
	return receive_only("fi_sendmsg");
}

ssize_t inject(fid_ep *, const void *, size_t, fi_addr_t) noexcept
{
	return receive_only("fi_inject");
}

ssize_t senddata(fid_ep *, const void *, size_t, void *, uint64_t, fi_addr_t, void *) noexcept
{
	return receive_only("fi_senddata");
}

ssize_t injectdata(fid_ep *, const void *, size_t, uint64_t, fi_addr_t) noexcept
{
	return receive_only("fi_injectdata");
}

int getpeer(fid_ep *, void *, size_t *) noexcept
{
	return not_implemented("fi_getpeer", "a passive endpoint has no peer");
}

int connect(fid_ep *, const void *, const void *, size_t) noexcept
{
	return not_implemented("fi_connect", "not an active endpoint");
}

int listen(fid_pep *) noexcept
{
	return not_implemented("fi_listen", "not a passive endpoint");
}

int accept(fid_ep *, const void *, size_t) noexcept
{
	return not_implemented("fi_accept", "not an active endpoint");
}

int reject(fid_pep *, fid_t, const void *, size_t) noexcept
{
	return not_implemented("fi_reject", "rejecting is the passive endpoint's");
}

int shutdown(fid_ep *, uint64_t) noexcept
{
	return not_implemented("fi_shutdown", "not an active endpoint");
}

int join(fid_ep *, const void *, uint64_t, fid_mc **, void *) noexcept
{
	return not_implemented("fi_join", "multicast is not offered");
}

namespace {

ssize_t data_path(const char *operation) noexcept
{
	return not_implemented(operation, kLater);
}

} // namespace

fi_ops_ep ep_ops = {
	.size = sizeof(fi_ops_ep),
	.cancel = cancel,
	.getopt = getopt,
	.setopt = setopt,
	.tx_ctx = tx_ctx,
	.rx_ctx = rx_ctx,
	.rx_size_left = rx_size_left,
	.tx_size_left = tx_size_left,
};

fi_ops_rma rma_ops = {
	.size = sizeof(fi_ops_rma),
	.read = [](fid_ep *, void *, size_t, void *, fi_addr_t, uint64_t, uint64_t, void *) noexcept { return data_path("fi_read"); },
	.readv = [](fid_ep *, const iovec *, void **, size_t, fi_addr_t, uint64_t, uint64_t, void *) noexcept { return data_path("fi_readv"); },
	.readmsg = [](fid_ep *, const fi_msg_rma *, uint64_t) noexcept { return data_path("fi_readmsg"); },
	.write = [](fid_ep *, const void *, size_t, void *, fi_addr_t, uint64_t, uint64_t, void *) noexcept { return data_path("fi_write"); },
	.writev = [](fid_ep *, const iovec *, void **, size_t, fi_addr_t, uint64_t, uint64_t, void *) noexcept { return data_path("fi_writev"); },
	.writemsg = [](fid_ep *, const fi_msg_rma *, uint64_t) noexcept { return data_path("fi_writemsg"); },
	.inject = [](fid_ep *, const void *, size_t, fi_addr_t, uint64_t, uint64_t) noexcept { return data_path("fi_inject_write"); },
	.writedata = [](fid_ep *, const void *, size_t, void *, uint64_t, fi_addr_t, uint64_t, uint64_t, void *) noexcept { return data_path("fi_writedata"); },
	.injectdata = [](fid_ep *, const void *, size_t, uint64_t, fi_addr_t, uint64_t, uint64_t) noexcept { return data_path("fi_inject_writedata"); },
};

namespace {
ssize_t no_tagged() noexcept
{
	return not_implemented("tagged messaging", "FI_TAGGED is not offered; use ofi_rxm over nd");
}
ssize_t no_atomic() noexcept
{
	return not_implemented("atomics", "a shared context carries no atomics: its endpoints do");
}
} // namespace

fi_ops_tagged tagged_ops = {
	.size = sizeof(fi_ops_tagged),
	.recv = [](fid_ep *, void *, size_t, void *, fi_addr_t, uint64_t, uint64_t, void *) noexcept { return no_tagged(); },
	.recvv = [](fid_ep *, const iovec *, void **, size_t, fi_addr_t, uint64_t, uint64_t, void *) noexcept { return no_tagged(); },
	.recvmsg = [](fid_ep *, const fi_msg_tagged *, uint64_t) noexcept { return no_tagged(); },
	.send = [](fid_ep *, const void *, size_t, void *, fi_addr_t, uint64_t, void *) noexcept { return no_tagged(); },
	.sendv = [](fid_ep *, const iovec *, void **, size_t, fi_addr_t, uint64_t, void *) noexcept { return no_tagged(); },
	.sendmsg = [](fid_ep *, const fi_msg_tagged *, uint64_t) noexcept { return no_tagged(); },
	.inject = [](fid_ep *, const void *, size_t, fi_addr_t, uint64_t) noexcept { return no_tagged(); },
	.senddata = [](fid_ep *, const void *, size_t, void *, uint64_t, fi_addr_t, uint64_t, void *) noexcept { return no_tagged(); },
	.injectdata = [](fid_ep *, const void *, size_t, uint64_t, fi_addr_t, uint64_t) noexcept { return no_tagged(); },
};

fi_ops_atomic atomic_ops = {
	.size = sizeof(fi_ops_atomic),
	.write = [](fid_ep *, const void *, size_t, void *, fi_addr_t, uint64_t, uint64_t, fi_datatype, fi_op, void *) noexcept { return no_atomic(); },
	.writev = [](fid_ep *, const fi_ioc *, void **, size_t, fi_addr_t, uint64_t, uint64_t, fi_datatype, fi_op, void *) noexcept { return no_atomic(); },
	.writemsg = [](fid_ep *, const fi_msg_atomic *, uint64_t) noexcept { return no_atomic(); },
	.inject = [](fid_ep *, const void *, size_t, fi_addr_t, uint64_t, uint64_t, fi_datatype, fi_op) noexcept { return no_atomic(); },
	.readwrite = [](fid_ep *, const void *, size_t, void *, void *, void *, fi_addr_t, uint64_t, uint64_t, fi_datatype, fi_op, void *) noexcept { return no_atomic(); },
	.readwritev = [](fid_ep *, const fi_ioc *, void **, size_t, fi_ioc *, void **, size_t, fi_addr_t, uint64_t, uint64_t, fi_datatype, fi_op, void *) noexcept { return no_atomic(); },
	.readwritemsg = [](fid_ep *, const fi_msg_atomic *, fi_ioc *, void **, size_t, uint64_t) noexcept { return no_atomic(); },
	.compwrite = [](fid_ep *, const void *, size_t, void *, const void *, void *, void *, void *, fi_addr_t, uint64_t, uint64_t, fi_datatype, fi_op, void *) noexcept { return no_atomic(); },
	.compwritev = [](fid_ep *, const fi_ioc *, void **, size_t, const fi_ioc *, void **, size_t, fi_ioc *, void **, size_t, fi_addr_t, uint64_t, uint64_t, fi_datatype, fi_op, void *) noexcept { return no_atomic(); },
	.compwritemsg = [](fid_ep *, const fi_msg_atomic *, const fi_ioc *, void **, size_t, fi_ioc *, void **, size_t, uint64_t) noexcept { return no_atomic(); },
	.writevalid = [](fid_ep *, fi_datatype, fi_op, size_t *) noexcept { return static_cast<int>(no_atomic()); },
	.readwritevalid = [](fid_ep *, fi_datatype, fi_op, size_t *) noexcept { return static_cast<int>(no_atomic()); },
	.compwritevalid = [](fid_ep *, fi_datatype, fi_op, size_t *) noexcept { return static_cast<int>(no_atomic()); },
};

} // namespace nd::unsupported
