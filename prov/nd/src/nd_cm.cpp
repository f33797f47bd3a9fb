/* nd_cm.cpp: rdma_cm id ownership, address helpers, the shared-tuple registry. */
#include "nd_cm.h"
#include "nd.h"

#include <cstring>
#include <mutex>
#include <set>
#include <string>

namespace nd {

int CmIdHolder::ensure(rdma_event_channel *channel, CmTarget *target)
{
	if (id)
		return 0;
	if (!channel) {
		own_channel.reset(rdma_create_event_channel());
		if (!own_channel) {
			int err = errno;
			ND_WARN(FI_LOG_EP_CTRL, "rdma_create_event_channel: %s\n", std::strerror(err));
			return fi_error_of_errno(err);
		}
		channel = own_channel.get();
	}
	if (rdma_create_id(channel, &id, target, RDMA_PS_TCP)) {
		int err = errno;
		id = nullptr;
		ND_WARN(FI_LOG_EP_CTRL, "rdma_create_id: %s\n", std::strerror(err));
		return fi_error_of_errno(err);
	}
	return 0;
}

void CmIdHolder::adopt(rdma_cm_id *new_id, CmTarget *target)
{
	id = new_id;
	id->context = target;
}

int CmIdHolder::migrate(rdma_event_channel *channel)
{
	if (!id || id->channel == channel)
		return 0;
	if (rdma_migrate_id(id, channel)) {
		int err = errno;
		ND_WARN(FI_LOG_EP_CTRL, "rdma_migrate_id: %s\n", std::strerror(err));
		return fi_error_of_errno(err);
	}
	own_channel.reset();
	return 0;
}

void CmIdHolder::reset() noexcept
{
	if (id)
		rdma_destroy_id(id);
	id = nullptr;
	own_channel.reset();
}

rdma_cm_id *CmIdHolder::release() noexcept
{
	rdma_cm_id *out = id;
	id = nullptr;
	return out;
}

SockAddr local_address(rdma_cm_id *id) noexcept
{
	SockAddr out;
	if (id) {
		sockaddr *sa = rdma_get_local_addr(id);
		if (sa)
			sockaddr_copy(sa, sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6)
								    : sizeof(sockaddr_in),
				      &out);
	}
	return out;
}

SockAddr peer_address(rdma_cm_id *id) noexcept
{
	SockAddr out;
	if (id) {
		sockaddr *sa = rdma_get_peer_addr(id);
		if (sa)
			sockaddr_copy(sa, sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6)
								    : sizeof(sockaddr_in),
				      &out);
	}
	return out;
}

int copy_out_address(const SockAddr &address, void *addr, size_t *addrlen) noexcept
{
	if (!addrlen) {
		ND_WARN(FI_LOG_EP_CTRL, "addrlen is NULL\n");
		return -FI_EINVAL;
	}
	const size_t need = address.length();
	if (!need) {
		ND_WARN(FI_LOG_EP_CTRL, "no address to report yet\n");
		return -FI_EADDRNOTAVAIL;
	}
	if (*addrlen < need || !addr) {
		ND_INFO(FI_LOG_EP_CTRL, "address buffer of %zu bytes; %zu needed\n", *addrlen, need);
		*addrlen = need;
		return -FI_ETOOSMALL;
	}
	std::memcpy(addr, &address.sa, need);
	*addrlen = need;
	return 0;
}

namespace {
Mutex tuple_lock{LockRank::tuples};
std::set<std::string> tuples;

std::string tuple_key(const SockAddr &local, const SockAddr &remote)
{
	return local.to_string() + "->" + remote.to_string();
}
} // namespace

bool claim_tuple(const SockAddr &local, const SockAddr &remote)
{
	std::lock_guard<Mutex> guard(tuple_lock);
	return tuples.insert(tuple_key(local, remote)).second;
}

void release_tuple(const SockAddr &local, const SockAddr &remote) noexcept
{
	try {
		std::lock_guard<Mutex> guard(tuple_lock);
		tuples.erase(tuple_key(local, remote));
	} catch (...) {
	}
}

} // namespace nd
