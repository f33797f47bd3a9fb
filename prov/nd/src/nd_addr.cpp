/* nd_addr.cpp: socket address helpers for FI_SOCKADDR_IN / _IN6. */
#include "nd_addr.h"
#include "nd.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace nd {

SockAddr::SockAddr() noexcept { std::memset(this, 0, sizeof(*this)); }

size_t SockAddr::length() const noexcept
{
	switch (family()) {
	case AF_INET: return sizeof(sockaddr_in);
	case AF_INET6: return sizeof(sockaddr_in6);
	default: return 0;
	}
}

uint16_t SockAddr::port() const noexcept
{
	switch (family()) {
	case AF_INET: return ntohs(in.sin_port);
	case AF_INET6: return ntohs(in6.sin6_port);
	default: return 0;
	}
}

void SockAddr::set_port(uint16_t port) noexcept
{
	if (family() == AF_INET)
		in.sin_port = htons(port);
	else if (family() == AF_INET6)
		in6.sin6_port = htons(port);
}

bool SockAddr::is_any() const noexcept
{
	if (family() == AF_INET)
		return in.sin_addr.s_addr == htonl(INADDR_ANY);
	if (family() == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr);
	return false;
}

bool SockAddr::same_ip(const SockAddr &other) const noexcept
{
	if (family() != other.family())
		return false;
	if (family() == AF_INET)
		return in.sin_addr.s_addr == other.in.sin_addr.s_addr;
	if (family() == AF_INET6)
		return std::memcmp(&in6.sin6_addr, &other.in6.sin6_addr, sizeof(in6.sin6_addr)) == 0;
	return false;
}

bool SockAddr::operator==(const SockAddr &other) const noexcept
{
	return same_ip(other) && port() == other.port();
}

std::string SockAddr::ip_string() const
{
	char text[INET6_ADDRSTRLEN] = "";
	if (family() == AF_INET)
		inet_ntop(AF_INET, &in.sin_addr, text, sizeof(text));
	else if (family() == AF_INET6)
		inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof(text));
	else
		return "(no address)";
	return text;
}

std::string SockAddr::to_string() const
{
	if (family() == AF_INET6)
		return "[" + ip_string() + "]:" + std::to_string(port());
	if (family() == AF_INET)
		return ip_string() + ":" + std::to_string(port());
	return ip_string();
}

void *malloc_copy(const SockAddr &addr)
{
	void *copy = std::malloc(addr.length());
	if (!copy)
		throw std::bad_alloc();
	std::memcpy(copy, &addr.sa, addr.length());
	return copy;
}

int sockaddr_copy(const void *addr, size_t len, SockAddr *out) noexcept
{
	if (!addr || len < sizeof(sa_family_t))
		return -FI_EINVAL;
	sa_family_t family;
	std::memcpy(&family, addr, sizeof(family));
	size_t need;
	if (family == AF_INET)
		need = sizeof(sockaddr_in);
	else if (family == AF_INET6)
		need = sizeof(sockaddr_in6);
	else
		return -FI_EINVAL;
	if (len < need)
		return -FI_EINVAL;
	SockAddr copy;
	std::memcpy(&copy.sa, addr, need);
	*out = copy;
	return 0;
}

bool format_matches(uint32_t addr_format, const SockAddr &addr) noexcept
{
	switch (addr_format) {
	case FI_FORMAT_UNSPEC:
	case FI_SOCKADDR:
		return addr.family() == AF_INET || addr.family() == AF_INET6;
	case FI_SOCKADDR_IN:
		return addr.family() == AF_INET;
	case FI_SOCKADDR_IN6:
		return addr.family() == AF_INET6;
	default:
		return false;
	}
}

uint32_t format_of(const SockAddr &addr) noexcept
{
	return addr.family() == AF_INET6 ? FI_SOCKADDR_IN6 : FI_SOCKADDR_IN;
}

unsigned prefix_length(const sockaddr *netmask) noexcept
{
	if (!netmask)
		return 0;
	const uint8_t *bytes;
	size_t count;
	if (netmask->sa_family == AF_INET) {
		bytes = reinterpret_cast<const uint8_t *>(
			&reinterpret_cast<const sockaddr_in *>(netmask)->sin_addr);
		count = 4;
	} else if (netmask->sa_family == AF_INET6) {
		bytes = reinterpret_cast<const uint8_t *>(
			&reinterpret_cast<const sockaddr_in6 *>(netmask)->sin6_addr);
		count = 16;
	} else {
		return 0;
	}
	unsigned bits = 0;
	for (size_t i = 0; i < count; i++)
		bits += __builtin_popcount(bytes[i]);
	return bits;
}

std::string network_prefix(const SockAddr &addr, unsigned prefix_len)
{
	SockAddr net = addr;
	uint8_t *bytes;
	unsigned total;
	if (addr.family() == AF_INET) {
		bytes = reinterpret_cast<uint8_t *>(&net.in.sin_addr);
		total = 32;
	} else if (addr.family() == AF_INET6) {
		bytes = reinterpret_cast<uint8_t *>(&net.in6.sin6_addr);
		total = 128;
	} else {
		return "(no network)";
	}
	if (prefix_len > total)
		prefix_len = total;
	for (unsigned bit = prefix_len; bit < total; bit++)
		bytes[bit / 8] &= static_cast<uint8_t>(~(0x80u >> (bit % 8)));
	return net.ip_string() + "/" + std::to_string(prefix_len);
}

int resolve(const char *node, const char *service, bool passive, bool numeric, int family,
	    SockAddr *out)
{
	addrinfo hints{};
	hints.ai_family = family;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = (passive ? AI_PASSIVE : 0) | (numeric ? AI_NUMERICHOST : 0);
	addrinfo *result = nullptr;
	int rc = getaddrinfo(node, service, &hints, &result);
	if (rc) {
		ND_INFO(FI_LOG_CORE, "cannot resolve node '%s' service '%s': %s\n",
			node ? node : "(none)", service ? service : "(none)", gai_strerror(rc));
		return -FI_ENODATA;
	}
	int ret = -FI_ENODATA;
	for (addrinfo *ai = result; ai; ai = ai->ai_next) {
		if (sockaddr_copy(ai->ai_addr, ai->ai_addrlen, out) == 0) {
			ret = 0;
			break;
		}
	}
	freeaddrinfo(result);
	return ret;
}

int route_source(const SockAddr &dest, SockAddr *src) noexcept
{
	int fd = socket(dest.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	SockAddr probe = dest;
	if (probe.port() == 0)
		probe.set_port(9); /* connect() on UDP needs a port; nothing is sent */
	int ret = 0;
	if (connect(fd, &probe.sa, static_cast<socklen_t>(probe.length())) != 0) {
		ret = -errno;
	} else {
		socklen_t len = sizeof(*src);
		if (getsockname(fd, &src->sa, &len) != 0)
			ret = -errno;
		else
			src->set_port(0);
	}
	close(fd);
	return ret;
}

} // namespace nd
