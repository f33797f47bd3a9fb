/* nd_pep.cpp: the passive endpoint (ND Listen / GetConnectionRequest / Reject);
 * the connection requests it hands out are nd_conn_request.cpp's. */
#include "nd_pep.h"
#include "nd_eq.h"
#include "nd_fabric.h"
#include "nd_info.h"
#include "nd_unsupported.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_ext_nd.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <set>

namespace nd {

namespace {

/* Every open passive endpoint, so that one named as fi_info's handle (its
 * address handed to an active endpoint) is checked before it is used. */
std::set<PassiveEndpoint *> live_peps;

constexpr int kDefaultBacklog = 128;

/* Private data limits of the transport a passive endpoint's info is for. */
CmDataLimits limits_of(const fi_info *info)
{
	return user_cm_limits(info->ep_attr && info->ep_attr->protocol == FI_PROTO_IWARP);
}

PassiveEndpoint *pep_of(fid *fid) { return from_fid<PassiveEndpoint>(fid); }

/* ---- events ---- */

/* The info of a request: the listener's, with the request's addresses and
 * the handle. */
fi_info *request_info(PassiveEndpoint *pep, ConnRequest *request)
{
	UniqueInfo info(fi_dupinfo(pep->info));
	if (!info)
		throw std::bad_alloc();
	SockAddr local = local_address(request->id);
	SockAddr peer = peer_address(request->id);
	void *src = malloc_copy(local);
	std::free(info->src_addr);
	info->src_addr = src;
	info->src_addrlen = local.length();
	std::free(info->dest_addr);
	info->dest_addr = nullptr;
	info->dest_addr = malloc_copy(peer);
	info->dest_addrlen = peer.length();
	info->addr_format = format_of(local);
	info->handle = &request->handle;
	return info.release();
}

/* EqEntry::make_info of a request's FI_CONNREQ, when it is first read. The
 * request may have gone with its listener between fi_close's teardown and
 * the removal of its events: it is read only while live, under
 * request_lock (a leaf lock: the EQ's lock may be held). */
int make_request_info(void *arg, fi_info **out) noexcept
{
	auto *request = static_cast<ConnRequest *>(arg);
	std::lock_guard<Mutex> guard(request_lock);
	if (!live_requests.count(request))
		return -FI_ENOENT;
	try {
		*out = request_info(request->pep, request);
	} catch (const std::bad_alloc &) {
		return -FI_ENOMEM;
	}
	return 0;
}

void on_connect_request(PassiveEndpoint *pep, const CmEventCopy &event)
{
	/* ND's backlog: the requests the listener holds that nobody took or
	 * refused yet. One more is refused now (the requester sees
	 * FI_ECONNREFUSED), as ND says a full backlog does. */
	if (pep->backlog > 0 && pep->pending.size() >= static_cast<size_t>(pep->backlog)) {
		ND_INFO(FI_LOG_EP_CTRL, "listener: backlog of %d full; request from %s refused\n",
			pep->backlog, peer_address(event.id).to_string().c_str());
		event.id->context = nullptr;
		rdma_reject(event.id, nullptr, 0);
		rdma_destroy_id(event.id);
		return;
	}
	cm::Unframed data = cm::unframe(event.private_data.data(), event.private_data.size());
	if (!data.well_formed)
		ND_WARN(FI_LOG_EP_CTRL, "connection request from %s: private data length byte %u "
			"exceeds the %zu bytes received; delivering %zu\n",
			peer_address(event.id).to_string().c_str(), event.private_data[0],
			event.private_data.size(), data.len);

	std::unique_ptr<ConnRequest> request;
	EqEntry entry;
	try {
		request = std::make_unique<ConnRequest>();
		request->handle.fclass = FI_CLASS_CONNREQ;
		request->handle.context = nullptr;
		request->handle.ops = &request_ops;
		request->target = {CmTargetKind::connection_request, request.get()};
		request->pep = pep;
		request->id = event.id;
		request->responder_resources = event.responder_resources;
		request->initiator_depth = event.initiator_depth;
		request->peer_gone = false;
		request->credit_offer = cm::credit_offer_of(event.private_data);

		entry.event = FI_CONNREQ;
		entry.data.resize(sizeof(fi_eq_cm_entry) + data.len);
		entry.make_info = make_request_info;
		entry.make_info_arg = request.get();
		fi_eq_cm_entry cm_entry{};
		cm_entry.fid = &pep->pep.fid;
		cm_entry.info = nullptr; /* made when read (make_request_info) */
		std::memcpy(entry.data.data(), &cm_entry, sizeof(cm_entry));
		if (data.len)
			std::memcpy(entry.data.data() + sizeof(cm_entry), data.data, data.len);
	} catch (...) {
		/* Nobody will ever see this request: refuse it now. */
		rdma_reject(event.id, nullptr, 0);
		rdma_destroy_id(event.id);
		throw;
	}
	event.id->context = &request->target;
	ConnRequest *raw = request.release();
	try {
		{
			std::lock_guard<Mutex> guard(request_lock);
			live_requests.insert(raw);
			pep->pending.push_back(raw);
		}
		pep->eq->push(std::move(entry));
	} catch (...) {
		{
			std::lock_guard<Mutex> guard(request_lock);
			live_requests.erase(raw);
			std::erase(pep->pending, raw);
		}
		drop_request(raw, "out of memory queueing the event");
		throw;
	}
}

void push_pep_error(PassiveEndpoint *pep, int err, int prov_errno)
{
	EqEntry entry;
	entry.is_error = true;
	entry.error.fid = &pep->pep.fid;
	entry.error.context = pep->pep.fid.context;
	entry.error.err = err;
	entry.error.prov_errno = prov_errno;
	pep->eq->push(std::move(entry));
}

} // namespace

void pep_cm_event(void *owner, const CmEventCopy &event)
{
	auto *pep = static_cast<PassiveEndpoint *>(owner);
	try {
		switch (event.type) {
		case RDMA_CM_EVENT_CONNECT_REQUEST:
			on_connect_request(pep, event);
			break;
		case RDMA_CM_EVENT_DEVICE_REMOVAL:
			ND_WARN(FI_LOG_EP_CTRL, "listener: device removed\n");
			push_pep_error(pep, FI_ENODEV,
				       cm::prov_errno_of(event.type, event.status, FI_ENODEV));
			break;
		default:
			ND_INFO(FI_LOG_EP_CTRL, "listener: %s absorbed\n", cm::event_name(event.type));
			break;
		}
	} catch (...) {
		ND_WARN(FI_LOG_EP_CTRL, "listener: out of memory handling %s; the request was refused\n",
			cm::event_name(event.type));
	}
}

/* Takes a live request of `pep` (any listener when pep is null) out of the
 * live set and its listener's list; nullptr when the handle is not one. */
ConnRequest *unlist_request(fid *handle, PassiveEndpoint *pep)
{
	auto *request = reinterpret_cast<ConnRequest *>(handle);
	std::lock_guard<Mutex> guard(request_lock);
	if (!handle || !live_requests.count(request) || (pep && request->pep != pep))
		return nullptr;
	live_requests.erase(request);
	std::erase(request->pep->pending, request);
	return request;
}

ConnRequest *take_request(fid *handle, const std::function<bool(ConnRequest &)> &adopt)
{
	/* Take it under its listener's progress lock, so that no event
	 * handler of the request runs while it changes hands. */
	EventQueue *eq = nullptr;
	{
		std::lock_guard<Mutex> guard(request_lock);
		auto *request = reinterpret_cast<ConnRequest *>(handle);
		if (handle && live_requests.count(request))
			eq = request->pep->eq;
	}
	if (!eq) {
		ND_WARN(FI_LOG_EP_CTRL, "info->handle is not a live connection request\n");
		return nullptr;
	}
	std::lock_guard<Mutex> progress(eq->progress_lock());
	ConnRequest *request = unlist_request(handle, nullptr);
	if (!request) {
		ND_WARN(FI_LOG_EP_CTRL, "info->handle is not a live connection request\n");
		return nullptr;
	}
	if (!adopt(*request))
		request->id->context = nullptr; /* the caller rejects it; nobody owns its events */
	return request;
}

namespace {

/* ---- operations ---- */

int pep_bind(struct fid *fid, struct fid *bfid, uint64_t flags) noexcept
{
	PassiveEndpoint *pep = pep_of(fid);
	if (!bfid || bfid->fclass != FI_CLASS_EQ) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_pep_bind: a passive endpoint binds to an EQ only\n");
		return -FI_EINVAL;
	}
	if (flags) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_pep_bind: flags 0x%llx not supported\n",
			static_cast<unsigned long long>(flags));
		return -FI_EBADFLAGS;
	}
	if (pep->eq) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_pep_bind: already bound to an EQ\n");
		return -FI_EINVAL;
	}
	return guarded("fi_pep_bind", [&] {
		return bind_cm_to_eq(from_fid<EventQueue>(bfid), pep->cm, &pep->eq);
	});
}

int bind_address(PassiveEndpoint *pep, const SockAddr &address)
{
	/* The id exists from the first call that needs one (setname or listen). */
	int ret = ensure_cm_id(pep->eq, pep->cm, &pep->target);
	if (ret)
		return ret;
	SockAddr bind_to = address;
	if (rdma_bind_addr(pep->cm.id, &bind_to.sa)) {
		int err = errno;
		ND_WARN(FI_LOG_EP_CTRL, "listener: cannot bind %s: %s\n", address.to_string().c_str(),
			std::strerror(err));
		return fi_error_of_errno(err);
	}
	pep->bound = true;
	return 0;
}

int pep_setname(fid *fid, void *addr, size_t addrlen) noexcept
{
	PassiveEndpoint *pep = pep_of(fid);
	return guarded("fi_setname(pep)", [&] {
		SockAddr address;
		if (sockaddr_copy(addr, addrlen, &address)) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_setname: not an IPv4/IPv6 address of %zu bytes\n", addrlen);
			return -FI_EINVAL;
		}
		if (pep->bound || pep->listening) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_setname: the listener already has an address\n");
			return -FI_EOPBADSTATE;
		}
		return bind_address(pep, address);
	});
}

int pep_getname(fid *fid, void *addr, size_t *addrlen) noexcept
{
	PassiveEndpoint *pep = pep_of(fid);
	return guarded("fi_getname(pep)", [&] {
		if (pep->bound)
			return copy_out_address(local_address(pep->cm.id), addr, addrlen);
		SockAddr configured;
		if (pep->info->src_addr)
			sockaddr_copy(pep->info->src_addr, pep->info->src_addrlen, &configured);
		return copy_out_address(configured, addr, addrlen);
	});
}

int pep_listen(fid_pep *fpep) noexcept
{
	PassiveEndpoint *pep = pep_of(&fpep->fid);
	return guarded("fi_listen", [&] {
		if (!pep->eq) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_listen: bind an EQ first\n");
			return -FI_ENOEQ;
		}
		std::lock_guard<Mutex> guard(pep->eq->progress_lock());
		if (pep->listening) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_listen: already listening\n");
			return -FI_EOPBADSTATE;
		}
		if (!pep->bound) {
			SockAddr address;
			if (!pep->info->src_addr ||
			    sockaddr_copy(pep->info->src_addr, pep->info->src_addrlen, &address) != 0)
				address.in.sin_family = AF_INET; /* any address, any port */
			int ret = bind_address(pep, address);
			if (ret)
				return ret;
		}
		if (rdma_listen(pep->cm.id, pep->backlog)) {
			int err = errno;
			ND_WARN(FI_LOG_EP_CTRL, "fi_listen on %s: %s\n",
				local_address(pep->cm.id).to_string().c_str(), std::strerror(err));
			return fi_error_of_errno(err);
		}
		pep->listening = true;
		ND_INFO(FI_LOG_EP_CTRL, "listening on %s, backlog %d\n",
			local_address(pep->cm.id).to_string().c_str(), pep->backlog);
		return 0;
	});
}

int pep_reject(fid_pep *fpep, fid_t handle, const void *param, size_t paramlen) noexcept
{
	PassiveEndpoint *pep = pep_of(&fpep->fid);
	return guarded("fi_reject", [&] {
		const CmDataLimits limits = limits_of(pep->info);
		std::vector<uint8_t> wire;
		if (cm::frame(param, paramlen, limits.reject, &wire)) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_reject: %zu bytes of private data; the limit is %u\n",
				paramlen, limits.reject);
			return -FI_EINVAL;
		}
		if (!pep->eq)
			return -FI_ENOEQ;
		std::lock_guard<Mutex> guard(pep->eq->progress_lock());
		ConnRequest *request = unlist_request(handle, pep);
		if (!request) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_reject: not a pending request of this listener\n");
			return -FI_EINVAL;
		}
		int ret = 0;
		if (request->peer_gone) {
			ND_INFO(FI_LOG_EP_CTRL, "fi_reject: the requester already gave up\n");
			ret = -FI_ECONNABORTED;
		} else if (rdma_reject(request->id, wire.data(), static_cast<uint8_t>(wire.size()))) {
			int err = errno;
			if (requester_gave_up(err)) {
				ND_INFO(FI_LOG_EP_CTRL, "fi_reject: the requester already gave up (rdma_reject: %s)\n",
					std::strerror(err));
				ret = -FI_ECONNABORTED;
			} else {
				ND_WARN(FI_LOG_EP_CTRL, "fi_reject: rdma_reject: %s\n", std::strerror(err));
				ret = fi_error_of_errno(err);
			}
		}
		rdma_destroy_id(request->id);
		release_request(request);
		return ret;
	});
}

int pep_control(fid *fid, int command, void *arg) noexcept
{
	PassiveEndpoint *pep = pep_of(fid);
	switch (command) {
	case FI_BACKLOG:
		if (!arg)
			return -FI_EINVAL;
		if (pep->listening) {
			ND_WARN(FI_LOG_EP_CTRL, "FI_BACKLOG: set it before fi_listen\n");
			return -FI_EOPBADSTATE;
		}
		if (*static_cast<int *>(arg) < 0) {
			ND_WARN(FI_LOG_EP_CTRL, "FI_BACKLOG: %d is negative\n", *static_cast<int *>(arg));
			return -FI_EINVAL;
		}
		/* ND: zero means no limit; rdma_cm takes the kernel's maximum. */
		pep->backlog = *static_cast<int *>(arg);
		return 0;
	default:
		ND_WARN(FI_LOG_EP_CTRL, "fi_control(pep): command %d not supported\n", command);
		return -FI_ENOSYS;
	}
}

int pep_getopt(fid *fid, int level, int optname, void *optval, size_t *optlen) noexcept
{
	PassiveEndpoint *pep = pep_of(fid);
	if (level != FI_OPT_ENDPOINT)
		return -FI_ENOPROTOOPT;
	if (!optval || !optlen)
		return -FI_EINVAL;
	const CmDataLimits limits = limits_of(pep->info);
	size_t value;
	switch (optname) {
	case FI_OPT_CM_DATA_SIZE: value = limits.connect; break;
	case FI_OPT_ND_ACCEPT_DATA_SIZE: value = limits.accept; break;
	case FI_OPT_ND_REJECT_DATA_SIZE: value = limits.reject; break;
	default:
		return -FI_ENOPROTOOPT;
	}
	if (*optlen < sizeof(size_t)) {
		*optlen = sizeof(size_t);
		return -FI_ETOOSMALL;
	}
	*static_cast<size_t *>(optval) = value;
	*optlen = sizeof(size_t);
	return 0;
}

int pep_close(fid *fid) noexcept
{
	return guarded("fi_close(pep)", [&] { return pep_of(fid)->close(); });
}

fi_ops pep_fid_ops = {
	.size = sizeof(fi_ops),
	.close = pep_close,
	.bind = pep_bind,
	.control = pep_control,
	.ops_open = unsupported::ops_open,
	.tostr = nullptr,
	.ops_set = nullptr,
};

fi_ops_ep pep_ep_ops = {
	.size = sizeof(fi_ops_ep),
	.cancel = unsupported::cancel,
	.getopt = pep_getopt,
	.setopt = unsupported::setopt,
	.tx_ctx = unsupported::tx_ctx,
	.rx_ctx = unsupported::rx_ctx,
	.rx_size_left = unsupported::rx_size_left,
	.tx_size_left = unsupported::tx_size_left,
};

fi_ops_cm pep_cm_ops = {
	.size = sizeof(fi_ops_cm),
	.setname = pep_setname,
	.getname = pep_getname,
	.getpeer = unsupported::getpeer,
	.connect = unsupported::connect,
	.listen = pep_listen,
	.accept = unsupported::accept,
	.reject = pep_reject,
	.shutdown = unsupported::shutdown,
	.join = unsupported::join,
};

} // namespace

int PassiveEndpoint::close()
{
	auto teardown = [&] {
		std::vector<ConnRequest *> doomed;
		{
			std::lock_guard<Mutex> guard(request_lock);
			doomed.swap(pending);
			for (ConnRequest *request : doomed)
				live_requests.erase(request);
		}
		for (ConnRequest *request : doomed)
			drop_request(request, "the listener closed");
		cm.reset();
	};
	{
		std::lock_guard<Mutex> guard(request_lock);
		live_peps.erase(this);
	}
	teardown_and_unbind(eq, &pep.fid, teardown);
	fabric->children.release();
	fi_freeinfo(info);
	delete this;
	return 0;
}

/* A live passive endpoint of nd named by `handle`, else nullptr. Compared by
 * address before anything reads it: the handle may be another provider's
 * object, or a closed one. */
PassiveEndpoint *live_pep(const fid *handle)
{
	std::lock_guard<Mutex> guard(request_lock);
	auto *pep = from_fid<PassiveEndpoint>(const_cast<fid *>(handle));
	return handle && live_peps.count(pep) ? pep : nullptr;
}

namespace {

/* Runs fn on the live passive endpoint `handle` names, under its progress
 * lock; -FI_ENOENT when the handle names none. */
template <typename Fn>
int with_live_pep(const fid *handle, Fn fn)
{
	PassiveEndpoint *pep = live_pep(handle);
	if (!pep)
		return -FI_ENOENT;
	std::unique_lock<Mutex> progress;
	if (pep->eq)
		progress = std::unique_lock<Mutex>(pep->eq->progress_lock());
	return fn(pep);
}

} // namespace

int pep_address(const fid *handle, SockAddr *out)
{
	return with_live_pep(handle, [&](PassiveEndpoint *pep) {
		if (!pep->bound)
			return -FI_EADDRNOTAVAIL;
		*out = local_address(pep->cm.id);
		return 0;
	});
}

int take_pep_address(const fid *handle, SockAddr *out)
{
	return with_live_pep(handle, [&](PassiveEndpoint *pep) {
		if (pep->listening) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_endpoint: info->handle is a listening passive endpoint; "
						"its address stays with it\n");
			return -FI_EOPBADSTATE;
		}
		if (!pep->bound) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_endpoint: info->handle is a passive endpoint without an address\n");
			return -FI_EADDRNOTAVAIL;
		}
		*out = local_address(pep->cm.id);
		/* Its id lets go of the port, which the new endpoint binds at once. */
		pep->cm.reset();
		pep->bound = false;
		return 0;
	});
}

int open_passive_ep(fid_fabric *f, fi_info *info, fid_pep **out, void *context) noexcept
{
	return guarded("fi_passive_ep", [&] {
		if (!f || !info || !out) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_passive_ep: fabric, info and pep must not be NULL\n");
			return -FI_EINVAL;
		}
		if (info->ep_attr && info->ep_attr->type != FI_EP_MSG &&
		    info->ep_attr->type != FI_EP_UNSPEC) {
			ND_WARN(FI_LOG_EP_CTRL, "fi_passive_ep: FI_EP_MSG only\n");
			return -FI_EINVAL;
		}
		UniqueInfo copy(fi_dupinfo(info));
		if (!copy)
			return -FI_ENOMEM;
		auto pep = std::make_unique<PassiveEndpoint>();
		Fabric *fabric = from_fid<Fabric>(f);
		pep->pep.fid.fclass = FI_CLASS_PEP;
		pep->pep.fid.context = context;
		pep->pep.fid.ops = &pep_fid_ops;
		pep->pep.ops = &pep_ep_ops;
		pep->pep.cm = &pep_cm_ops;
		pep->fabric = fabric;
		pep->info = copy.release();
		pep->eq = nullptr;
		pep->target = {CmTargetKind::passive_endpoint, pep.get()};
		pep->backlog = kDefaultBacklog;
		pep->bound = false;
		pep->listening = false;
		{
			std::lock_guard<Mutex> guard(request_lock);
			live_peps.insert(pep.get());
		}
		fabric->children.acquire();
		*out = &pep.release()->pep;
		return 0;
	});
}

} // namespace nd
