/* nd_ep.cpp: the active endpoint object: open, bind, enable, options, names, close. */
#include "nd_ep.h"
#include "nd_async.h"
#include "nd_cntr.h"
#include "nd_cq.h"
#include "nd_srx.h"
#include "nd_stx.h"
#include "nd_domain.h"
#include "nd_eq.h"
#include "nd_info.h"
#include "nd_pep.h"
#include "nd_slab.h"
#include "nd_unsupported.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_ext_nd.h>

#include <cstring>
#include <memory>
#include <new>

namespace nd {

EndpointAttributes::EndpointAttributes(const fi_info &info) noexcept
	: caps(info.caps), shared_tx(info.ep_attr && info.ep_attr->tx_ctx_cnt == FI_SHARED_CONTEXT),
	  resource_mgmt(info.domain_attr && api::enum_value(info.domain_attr->resource_mgmt) == FI_RM_ENABLED)
{
}

ConnectionSetup::ConnectionSetup(const fi_info &info) noexcept
	: tx(TxAttributes::of(*info.tx_attr)), rx(RxAttributes::of(*info.rx_attr)),
	  max_msg_size(info.ep_attr ? info.ep_attr->max_msg_size : 0)
{
	if (info.src_addr && sockaddr_copy(info.src_addr, info.src_addrlen, &source) != 0)
		source = SockAddr{};
}

namespace {

/* Never destroyed: an endpoint the application leaves open at exit may
 * still be closed by a later destructor. */
SlabPool &setup_pool()
{
	alignas(SlabPool) static unsigned char storage[sizeof(SlabPool)];
	static SlabPool *pool = new (storage) SlabPool(sizeof(ConnectionSetup));
	return *pool;
}

} // namespace

void *ConnectionSetup::operator new(size_t size)
{
	if (size != sizeof(ConnectionSetup))
		throw std::bad_alloc();
	return setup_pool().allocate();
}

void ConnectionSetup::operator delete(void *object) noexcept
{
	setup_pool().deallocate(object);
}

Endpoint::Endpoint(Domain *d, const fi_info &info, cm::Side side)
	: ep{}, domain(d), attr(info), target{CmTargetKind::endpoint, this}, cm{}, fsm(side, false),
	  setup(std::make_unique<ConnectionSetup>(info)), options{.wanted = d->adapter_read_limits}
{
	fsm.set_iwarp(d->iwarp);
	/* Fixed before the endpoint is visible: fi_cancel may take the receive
	 * lock from another thread at once. They lock wherever another thread
	 * may touch the endpoint while the application posts: under
	 * FI_THREAD_SAFE, and under FI_THREAD_ENDPOINT and FI_THREAD_FID too,
	 * where the thread reading the EQ posts the receives that waited for
	 * the connection and flushes the FI_MORE batch. Under FI_THREAD_DOMAIN
	 * and FI_THREAD_COMPLETION the application serializes its EQ reads with
	 * the endpoint, as with any of its completion structures (fi_nd(7),
	 * THREADS). */
	const bool locked = d->shared_objects_lock();
	data.rx.lock.enable(locked);
	data.tx.lock.enable(locked);
}

void Endpoint::release_claimed_tuple() noexcept
{
	EndpointExtras *extras = bindings.extras.get();
	if (!extras || !extras->tuple_claimed)
		return;
	release_tuple(extras->tuple_local, conn.peer);
	extras->tuple_claimed = false;
}

void Endpoint::release_setup() noexcept
{
	if (!setup || setup->cm_home || fsm.state() != EpState::connected)
		return;
	/* fi_cancel reads the pending receives under rx.lock; none is left
	 * once the queue pair took receives, which it did before connecting. */
	std::lock_guard<OptionalLock> guard(data.rx.lock);
	if (data.recv_ready() && setup->pending_recvs.empty() && setup->held_events.empty())
		setup.reset();
}

cm::ReadLimits Endpoint::offered() const noexcept
{
	return cm::cap(options.wanted, domain->adapter_read_limits);
}

namespace {

int bind_eq(Endpoint *ep, EventQueue *eq)
{
	if (ep->eq) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: the endpoint already has an EQ\n");
		return -FI_EINVAL;
	}
	/* A passive-side endpoint's events came through the listener's EQ
	 * until now, under that EQ's progress lock, and were held: they go to
	 * its own EQ before any later one can. */
	return bind_cm_to_eq(eq, ep->cm, &ep->eq, ep->cm_home(), [ep] {
		if (!ep->setup)
			return;
		ep->setup->cm_home = nullptr;
		for (EqEntry &entry : ep->setup->held_events)
			ep->eq->push(std::move(entry));
		ep->setup->held_events.clear();
		/* Accepted before the EQ was bound: nothing else is left. */
		ep->release_setup();
	});
}

int ep_bind(struct fid *fid, struct fid *bfid, uint64_t flags) noexcept
{
	Endpoint *ep = ep_of(fid);
	if (!bfid) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: NULL fid\n");
		return -FI_EINVAL;
	}
	switch (bfid->fclass) {
	case FI_CLASS_EQ:
		return guarded("fi_ep_bind(eq)",
			       [&] { return bind_eq(ep, from_fid<EventQueue>(bfid)); });
	case FI_CLASS_CQ:
		return guarded("fi_ep_bind(cq)", [&] {
			return under_progress_lock(ep->progress_eq(), [&] {
				return ep->bind_cq(from_fid<CompletionQueue>(bfid), flags);
			});
		});
	case FI_CLASS_CNTR:
		return guarded("fi_ep_bind(cntr)", [&] {
			return under_progress_lock(ep->progress_eq(), [&] {
				return ep->bind_cntr(from_fid<Counter>(bfid), flags);
			});
		});
	case FI_CLASS_SRX_CTX:
		return guarded("fi_ep_bind(srx)", [&] {
			return under_progress_lock(ep->progress_eq(), [&] {
				return ep->bind_srx(from_fid<SharedRx>(bfid));
			});
		});
	case FI_CLASS_STX_CTX:
		return guarded("fi_ep_bind(stx)", [&] {
			return under_progress_lock(ep->progress_eq(), [&] {
				return ep->bind_stx(from_fid<SharedTx>(bfid));
			});
		});
	default:
		ND_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: cannot bind a fid of class %zu\n", bfid->fclass);
		return -FI_EINVAL;
	}
}

int enable(Endpoint *ep)
{
	if (!ep->eq) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_enable: bind an EQ first\n");
		return -FI_ENOEQ;
	}
	if (ep->fsm.enabled())
		return 0;
	if (ep->attr.shared_tx && !ep->bindings.stx()) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_enable: the endpoint was opened with a shared transmit "
			"context (tx_ctx_cnt FI_SHARED_CONTEXT); bind one (fi_stx_context) first\n");
		return -FI_ENOENT;
	}
	int ret = ep->create_queue_pair();
	if (ret)
		return ret;
	ep->fsm.mark_enabled();
	return 0;
}

int peer_read_limits(Endpoint *ep, void *arg)
{
	if (!arg)
		return -FI_EINVAL;
	if (!ep->conn.negotiated && !ep->conn.has_request) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_nd_peer_read_limits: the peer has not answered yet\n");
		return -FI_ENOTCONN;
	}
	*static_cast<fi_nd_read_limits *>(arg) = {ep->conn.peer_offer.inbound, ep->conn.peer_offer.outbound};
	return 0;
}

int qp_read_limits(Endpoint *ep, void *arg)
{
	if (!arg)
		return -FI_EINVAL;
	if (!ep->data.qp) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_nd_qp_read_limits: no queue pair before fi_enable\n");
		return -FI_EOPBADSTATE;
	}
	ibv_qp_attr attr{};
	ibv_qp_init_attr init{};
	int rc = ibv_query_qp(ep->data.qp.get(), &attr, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC,
			      &init);
	if (rc) {
		ND_WARN(FI_LOG_EP_CTRL, "ibv_query_qp: %s\n", std::strerror(rc));
		return fi_error_of_errno(rc);
	}
	*static_cast<fi_nd_read_limits *>(arg) = {attr.max_dest_rd_atomic, attr.max_rd_atomic};
	return 0;
}

int ep_control(struct fid *fid, int command, void *arg) noexcept
{
	Endpoint *ep = ep_of(fid);
	return guarded("fi_control(ep)", [&] {
		switch (command) {
		case FI_ENABLE:
			return under_progress_lock(ep->progress_eq(), [&] { return enable(ep); });
		case FI_ND_COMPLETE_CONNECT:
			return ep->complete_connect();
		case FI_ND_REJECT_CONNECT: {
			if (!arg) {
				ND_WARN(FI_LOG_EP_CTRL, "fi_nd_reject_connect: no fi_nd_cm_data\n");
				return -FI_EINVAL;
			}
			auto *data = static_cast<const fi_nd_cm_data *>(arg);
			return ep->reject_connect(data->data, data->len);
		}
		case FI_ND_GET_PEER_READ_LIMITS:
			return under_progress_lock(ep->progress_eq(), [&] { return peer_read_limits(ep, arg); });
		case FI_ND_GET_QP_READ_LIMITS:
			return under_progress_lock(ep->progress_eq(), [&] { return qp_read_limits(ep, arg); });
		default:
			ND_WARN(FI_LOG_EP_CTRL, "fi_control(ep): command %d not supported\n", command);
			return -FI_ENOSYS;
		}
	});
}

int ep_close(struct fid *fid) noexcept
{
	return guarded("fi_close(ep)", [&] { return ep_of(fid)->close(); });
}

/* ---- options ---- */

template <typename T>
int put_option(const T &value, void *optval, size_t *optlen)
{
	if (!optval || !optlen)
		return -FI_EINVAL;
	if (*optlen < sizeof(T)) {
		*optlen = sizeof(T);
		return -FI_ETOOSMALL;
	}
	std::memcpy(optval, &value, sizeof(T));
	*optlen = sizeof(T);
	return 0;
}

template <typename T>
int take_option(const void *optval, size_t optlen, T *value)
{
	if (!optval || optlen != sizeof(T)) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_setopt: the value must be %zu bytes, not %zu\n", sizeof(T),
			optlen);
		return -FI_EINVAL;
	}
	std::memcpy(value, optval, sizeof(T));
	return 0;
}

int ep_getopt(struct fid *fid, int level, int optname, void *optval, size_t *optlen) noexcept
{
	Endpoint *ep = ep_of(fid);
	if (level != FI_OPT_ENDPOINT)
		return -FI_ENOPROTOOPT;
	return guarded("fi_getopt(ep)", [&] {
		return under_progress_lock(ep->progress_eq(), [&]() -> int {
			const CmDataLimits &limits = ep->domain->cm_limits;
			const cm::ReadLimits limits_now = ep->conn.negotiated ? ep->conn.effective : ep->offered();
			switch (optname) {
			case FI_OPT_CM_DATA_SIZE:
				return put_option<size_t>(limits.connect, optval, optlen);
			case FI_OPT_ND_ACCEPT_DATA_SIZE:
				return put_option<size_t>(limits.accept, optval, optlen);
			case FI_OPT_ND_REJECT_DATA_SIZE:
				return put_option<size_t>(limits.reject, optval, optlen);
			case FI_OPT_ND_INBOUND_READ_LIMIT:
				return put_option<uint32_t>(limits_now.inbound, optval, optlen);
			case FI_OPT_ND_OUTBOUND_READ_LIMIT:
				return put_option<uint32_t>(limits_now.outbound, optval, optlen);
			case FI_OPT_ND_MANUAL_COMPLETE:
				return put_option<int>(ep->options.manual_complete ? 1 : 0, optval, optlen);
			case FI_OPT_ND_SHARED_ADDR:
				return put_option<int>(ep->options.shared_addr ? 1 : 0, optval, optlen);
			case FI_OPT_MIN_MULTI_RECV:
				return put_option<size_t>(ep->bindings.min_multi_recv(), optval, optlen);
			default:
				return -FI_ENOPROTOOPT;
			}
		});
	});
}

int ep_setopt(struct fid *fid, int level, int optname, const void *optval, size_t optlen) noexcept
{
	Endpoint *ep = ep_of(fid);
	if (level != FI_OPT_ENDPOINT)
		return -FI_ENOPROTOOPT;
	return guarded("fi_setopt(ep)", [&] {
		return under_progress_lock(ep->progress_eq(), [&]() -> int {
			const bool before_connecting = ep->fsm.state() == EpState::idle;
			int ret;
			switch (optname) {
			case FI_OPT_ND_INBOUND_READ_LIMIT:
			case FI_OPT_ND_OUTBOUND_READ_LIMIT: {
				uint32_t value = 0;
				if ((ret = take_option(optval, optlen, &value)))
					return ret;
				if (!before_connecting) {
					ND_WARN(FI_LOG_EP_CTRL, "read limits are set before fi_connect/fi_accept\n");
					return -FI_EOPBADSTATE;
				}
				(optname == FI_OPT_ND_INBOUND_READ_LIMIT ? ep->options.wanted.inbound
									 : ep->options.wanted.outbound) = value;
				return 0;
			}
			case FI_OPT_ND_MANUAL_COMPLETE: {
				int value = 0;
				if ((ret = take_option(optval, optlen, &value)))
					return ret;
				if (!before_connecting)
					return -FI_EOPBADSTATE;
				if (ep->fsm.side() == cm::Side::passive) {
					ND_WARN(FI_LOG_EP_CTRL, "manual completion is for the connecting side\n");
					return -FI_EINVAL;
				}
				ep->options.manual_complete = value != 0;
				ep->fsm.set_manual(ep->options.manual_complete);
				return 0;
			}
			case FI_OPT_ND_SHARED_ADDR: {
				int value = 0;
				if ((ret = take_option(optval, optlen, &value)))
					return ret;
				if (ep->fsm.bound() || !before_connecting) {
					ND_WARN(FI_LOG_EP_CTRL, "share the address before fi_setname\n");
					return -FI_EOPBADSTATE;
				}
				ep->options.shared_addr = value != 0;
				return 0;
			}
			case FI_OPT_MIN_MULTI_RECV: {
				size_t value = 0;
				if ((ret = take_option(optval, optlen, &value)))
					return ret;
				ep->set_min_multi_recv(value);
				return 0;
			}
			default:
				ND_INFO(FI_LOG_EP_CTRL, "fi_setopt: option %d is not one of the provider's\n", optname);
				return -FI_ENOPROTOOPT;
			}
		});
	});
}

/* ---- names ---- */

/* Binds the endpoint's id, made just before, to `address`, shared when
 * the endpoint asked for it. Under the progress lock. */
int bind_id(Endpoint *ep, const SockAddr &address, const char *call)
{
	if (ep->options.shared_addr) {
		int one = 1;
		if (rdma_set_option(ep->cm.id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one,
				    sizeof(one))) {
			int err = errno;
			ND_WARN(FI_LOG_EP_CTRL, "%s: cannot share the address: %s\n", call,
				std::strerror(err));
			return fi_error_of_errno(err);
		}
	}
	SockAddr bind_to = address;
	if (rdma_bind_addr(ep->cm.id, &bind_to.sa)) {
		int err = errno;
		ND_INFO(FI_LOG_EP_CTRL, "%s(%s): %s\n", call, address.to_string().c_str(),
			std::strerror(err));
		/* A failed bind leaves the id unusable for another try. */
		ep->cm.reset();
		return fi_error_of_errno(err);
	}
	if (ep->cm.id->verbs && ep->cm.id->verbs != ep->domain->context) {
		ND_WARN(FI_LOG_EP_CTRL, "%s(%s): the address is on another device\n", call,
			address.to_string().c_str());
		ep->cm.reset();
		return -FI_EINVAL;
	}
	return 0;
}

/* Binds the endpoint's id to `address` (fi_setname, or the address taken
 * from a passive endpoint at fi_endpoint). Under the progress lock. */
int bind_endpoint(Endpoint *ep, const SockAddr &address, const char *call)
{
	if (ep->fsm.bound() || ep->fsm.state() != EpState::idle || ep->conn.has_request || !ep->setup) {
		ND_WARN(FI_LOG_EP_CTRL, "%s: the endpoint already has an address\n", call);
		return -FI_EOPBADSTATE;
	}
	int ret = ensure_cm_id(ep->eq, ep->cm, &ep->target);
	if (ret)
		return ret;
	if ((ret = bind_id(ep, address, call)))
		return ret;
	ep->fsm.mark_bound();
	ep->setup->bound_address = local_address(ep->cm.id);
	return 0;
}

int ep_setname(struct fid *fid, void *addr, size_t addrlen) noexcept
{
	Endpoint *ep = ep_of(fid);
	return guarded("fi_setname(ep)", [&] {
		SockAddr address;
		if (sockaddr_copy(addr, addrlen, &address)) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_setname: not an IPv4/IPv6 address of %zu bytes\n", addrlen);
			return -FI_EINVAL;
		}
		return under_progress_lock(ep->progress_eq(), [&] { return bind_endpoint(ep, address, "fi_setname"); });
	});
}

int ep_getname(struct fid *fid, void *addr, size_t *addrlen) noexcept
{
	Endpoint *ep = ep_of(fid);
	return guarded("fi_getname(ep)", [&] {
		return under_progress_lock(ep->progress_eq(), [&] {
			SockAddr local = local_address(ep->cm.id);
			if (!local.length() && ep->setup)
				local = ep->setup->source;
			return copy_out_address(local, addr, addrlen);
		});
	});
}

int ep_getpeer(fid_ep *fep, void *addr, size_t *addrlen) noexcept
{
	Endpoint *ep = ep_of(fep);
	return guarded("fi_getpeer", [&] {
		return under_progress_lock(ep->progress_eq(), [&] {
			EpState s = ep->fsm.state();
			if (s == EpState::idle && !ep->conn.has_request) {
				ND_INFO(FI_LOG_EP_CTRL, "fi_getpeer: not connected\n");
				return -FI_ENOTCONN;
			}
			if (s == EpState::failed || s == EpState::disconnected) {
				ND_INFO(FI_LOG_EP_CTRL, "fi_getpeer: the connection is %s\n", to_string(s));
				return -FI_ENOTCONN;
			}
			return copy_out_address(ep->conn.peer, addr, addrlen);
		});
	});
}

int ep_connect(fid_ep *fep, const void *addr, const void *param, size_t paramlen) noexcept
{
	return guarded("fi_connect", [&] { return ep_of(fep)->connect(addr, param, paramlen); });
}

int ep_accept(fid_ep *fep, const void *param, size_t paramlen) noexcept
{
	return guarded("fi_accept", [&] { return ep_of(fep)->accept(param, paramlen); });
}

int ep_shutdown(fid_ep *fep, uint64_t flags) noexcept
{
	return guarded("fi_shutdown", [&] { return ep_of(fep)->shutdown(flags); });
}

fi_ops ep_fid_ops = {
	.size = sizeof(fi_ops),
	.close = ep_close,
	.bind = ep_bind,
	.control = ep_control,
	.ops_open = unsupported::ops_open,
	.tostr = nullptr,
	.ops_set = nullptr,
};

ssize_t ep_cancel(fid *fid, void *context) noexcept
{
	return guarded("fi_cancel", [&] { return ep_of(fid)->cancel(context); });
}

fi_ops_ep ep_ops = {
	.size = sizeof(fi_ops_ep),
	.cancel = ep_cancel,
	.getopt = ep_getopt,
	.setopt = ep_setopt,
	.tx_ctx = unsupported::tx_ctx,
	.rx_ctx = unsupported::rx_ctx,
	.rx_size_left = unsupported::rx_size_left,
	.tx_size_left = unsupported::tx_size_left,
};

fi_ops_cm ep_cm_ops = {
	.size = sizeof(fi_ops_cm),
	.setname = ep_setname,
	.getname = ep_getname,
	.getpeer = ep_getpeer,
	.connect = ep_connect,
	.listen = unsupported::listen,
	.accept = ep_accept,
	.reject = unsupported::reject,
	.shutdown = ep_shutdown,
	.join = unsupported::join,
};

int open_endpoint_impl(fid_domain *fdomain, fi_info *info, fid_ep **out, void *context)
{
	if (!fdomain || !info || !out) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_endpoint: domain, info and ep must not be NULL\n");
		return -FI_EINVAL;
	}
	if (info->ep_attr && api::enum_value(info->ep_attr->type) != FI_EP_MSG &&
	    api::enum_value(info->ep_attr->type) != FI_EP_UNSPEC) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_endpoint: FI_EP_MSG only\n");
		return -FI_EINVAL;
	}
	if (!info->tx_attr || !info->rx_attr) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_endpoint: info without tx/rx attributes\n");
		return -FI_EINVAL;
	}
	Domain *domain = from_fid<Domain>(fdomain);
	ConnRequest *request = nullptr;
	SockAddr taken_address;
	bool takes_address = false;
	if (info->handle) {
		/* A passive endpoint hands over its address (fi_getinfo(3)
		 * handle); anything else must be a live connection request.
		 * Both are checked by address against the live objects before
		 * anything reads them: a handle already rejected, taken or
		 * closed is freed memory. */
		int ret = take_pep_address(info->handle, &taken_address);
		if (ret == 0)
			takes_address = true;
		else if (ret != -FI_ENOENT)
			return ret;
	}
	const bool from_request = info->handle && !takes_address;
	auto ep = std::make_unique<Endpoint>(domain, *info,
					     from_request ? cm::Side::passive : cm::Side::active);
	if (from_request) {
		/* The id moves to the endpoint under the listener EQ's progress
		 * lock: an event of the request (the requester giving up) is seen
		 * either by the request, before, or by the endpoint, after. Its
		 * events are dispatched by the listener's EQ until the endpoint
		 * binds one of its own (cm_home). */
		bool other_device = false;
		request = take_request(info->handle, [&](ConnRequest &r) {
			if (r.id->verbs != domain->context) {
				other_device = true;
				return false;
			}
			ep->cm.adopt(r.id, &ep->target);
			ep->setup->cm_home = r.pep->eq;
			ep->setup->cm_home->bound.acquire();
			ep->conn.has_request = true;
			ep->conn.request_peer_gone = r.peer_gone;
			ep->conn.peer_offer = r.offer();
			ep->setup->request_credit_offer = r.credit_offer;
			if (domain->iwarp && r.credit_offer)
				ep->conn.peer_offer = cm::peer_offer(r.credit_offer->outbound, r.credit_offer->inbound);
			ep->conn.peer = peer_address(r.id);
			return true;
		});
		if (!request)
			return -FI_EINVAL;
		if (other_device) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_endpoint: the request arrived on another device than this domain's\n");
			rdma_reject(request->id, nullptr, 0);
			rdma_destroy_id(request->id);
			release_request(request);
			return -FI_EINVAL;
		}
		release_request(request);
	}
	ep->ep.fid.fclass = FI_CLASS_EP;
	ep->ep.fid.context = context;
	ep->ep.fid.ops = &ep_fid_ops;
	ep->ep.ops = &ep_ops;
	ep->ep.cm = &ep_cm_ops;
	/* FI_TAGGED frames every message (nd_framing.h); without it, messages
	 * go to the adapter as they are. */
	ep->options.framed = ep->attr.caps & FI_TAGGED;
	ep->ep.msg = ep->options.framed ? &ep_framed_msg_ops : &ep_msg_ops;
	ep->ep.rma = &ep_rma_ops;
	ep->ep.tagged = ep->options.framed ? &ep_tagged_ops : &unsupported::tagged_ops;
	ep->ep.atomic = &ep_atomic_ops;
	if (takes_address) {
		int ret = bind_endpoint(ep.get(), taken_address, "fi_endpoint");
		if (ret) {
			ep->cm.reset();
			return ret;
		}
	}
	domain->children.acquire();
	*out = &ep.release()->ep;
	return 0;
}

} // namespace

int Endpoint::renew_cm_id()
{
	cm.reset();
	conn.negotiated = false;
	conn.effective = {};
	conn.peer_offer = {};
	if (!setup)
		return -FI_EOPBADSTATE; /* never: only an attempt that did not connect is retried */
	setup->connect_wire.clear();
	int ret = ensure_cm_id(eq, cm, &target);
	if (ret)
		return ret;
	/* The application's address (port included) stays the endpoint's. */
	return fsm.bound() ? bind_id(this, setup->bound_address, "fi_connect retry") : 0;
}

int Endpoint::close()
{
	/* What it posted reaches a connected peer first (bounded). */
	linger();
	/* No asynchronous event reaches the endpoint (or queues an entry
	 * naming it) from here on. */
	if (data.qp)
		async::remove_qp(data.qp.get());
	auto teardown = [&] {
		fsm.mark_closing();
		EpState s = fsm.state();
		if (cm.id && (s == EpState::connected || s == EpState::shutting_down ||
			      s == EpState::accepting || s == EpState::response_pending))
			rdma_disconnect(cm.id); /* the peer learns at once, not at a timeout */
		release_claimed_tuple();
		/* Everything outstanding completes with FI_ECANCELED. */
		flush_queue_pair();
		/* Events of this id not yet read die with it: no FI_SHUTDOWN
		 * is ever reported after a local close. */
		cm.reset();
	};
	if (EventQueue *home = cm_home()) {
		/* Never bound: its id still lives on the listener's channel. */
		under_progress_lock(home, teardown);
		home->bound.release();
		setup->held_events.clear();
	} else {
		teardown_and_unbind(eq, &ep.fid, teardown);
	}
	release_queues();
	/* No request is left to fail now (orphaned queues forget their
	 * endpoint): what the poller deferred for it goes. */
	if (eq)
		eq->cancel_deferred(this);
	unbind_all();
	domain->children.release();
	delete this;
	return 0;
}

int open_endpoint(fid_domain *domain, fi_info *info, fid_ep **ep, void *context) noexcept
{
	return guarded("fi_endpoint", [&] { return open_endpoint_impl(domain, info, ep, context); });
}

} // namespace nd
