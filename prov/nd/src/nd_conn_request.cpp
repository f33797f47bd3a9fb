/* nd_conn_request.cpp: connection requests (FI_CLASS_CONNREQ), see nd_conn_request.h. */
#include "nd_conn_request.h"
#include "nd_unsupported.h"

#include <rdma/fi_ext_nd.h>

#include <mutex>
#include <set>

namespace nd {

/* Every live connection request, so that a handle passed back by the
 * application (fi_endpoint, fi_reject) is checked before it is used. */
Mutex request_lock{LockRank::requests};
std::set<ConnRequest *> live_requests;

namespace {

bool is_live(ConnRequest *request)
{
	std::lock_guard<Mutex> guard(request_lock);
	return live_requests.count(request) != 0;
}

int request_close(fid *) noexcept
{
	ND_WARN(FI_LOG_EP_CTRL, "a connection request is not closed: pass it to fi_endpoint or fi_reject\n");
	return -FI_EINVAL;
}

int request_control(fid *fid, int command, void *arg) noexcept
{
	auto *request = reinterpret_cast<ConnRequest *>(fid);
	if (command != FI_ND_GET_PEER_READ_LIMITS) {
		ND_WARN(FI_LOG_EP_CTRL, "connection request: control command %d not supported\n", command);
		return -FI_ENOSYS;
	}
	if (!arg)
		return -FI_EINVAL;
	if (!is_live(request)) {
		ND_WARN(FI_LOG_EP_CTRL, "fi_nd_peer_read_limits: not a live connection request\n");
		return -FI_EINVAL;
	}
	cm::ReadLimits offer = request->offer();
	*static_cast<fi_nd_read_limits *>(arg) = {offer.inbound, offer.outbound};
	return 0;
}

} // namespace

fi_ops request_ops = {
	.size = sizeof(fi_ops),
	.close = request_close,
	.bind = unsupported::bind,
	.control = request_control,
	.ops_open = unsupported::ops_open,
	.tostr = nullptr,
	.ops_set = nullptr,
};

/* Refuses a request nobody will take, and frees it. The caller has taken
 * it out of the live set and its listener's list. */
void drop_request(ConnRequest *request, const char *why) noexcept
{
	ND_INFO(FI_LOG_EP_CTRL, "connection request from %s rejected: %s\n",
		peer_address(request->id).to_string().c_str(), why);
	if (!request->peer_gone)
		rdma_reject(request->id, nullptr, 0);
	rdma_destroy_id(request->id);
	release_request(request);
}

void connreq_cm_event(void *owner, const CmEventCopy &event)
{
	auto *request = static_cast<ConnRequest *>(owner);
	if (cm::peer_gave_up(event.type)) {
		ND_INFO(FI_LOG_EP_CTRL, "connection request from %s: %s before an answer; the requester gave up\n",
			peer_address(request->id).to_string().c_str(), cm::event_name(event.type));
		request->peer_gone = true;
	} else {
		ND_INFO(FI_LOG_EP_CTRL, "connection request: %s absorbed\n", cm::event_name(event.type));
	}
}

void release_request(ConnRequest *request) noexcept
{
	delete request;
}

} // namespace nd
