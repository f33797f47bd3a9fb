/*
 * nd_addr.h: IP socket addresses as the provider uses them (FI_SOCKADDR_IN
 * and FI_SOCKADDR_IN6): validation of what applications pass in, resolution
 * of node/service, and the routing question "which local address reaches
 * this destination". Pure helpers except resolve() and route_source(), which
 * ask the kernel (no traffic is sent).
 */
#ifndef ND_ADDR_H
#define ND_ADDR_H

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace nd {

/* As large as the largest family it holds (an IPv6 address), not a
 * sockaddr_storage: every endpoint keeps several, and thousands of
 * endpoints are one process's. */
union SockAddr {
	sockaddr sa;
	sockaddr_in in;
	sockaddr_in6 in6;

	SockAddr() noexcept;
	int family() const noexcept { return sa.sa_family; }
	/* Length of the address for its family; 0 for an unset/unknown one. */
	size_t length() const noexcept;
	uint16_t port() const noexcept; /* host byte order */
	void set_port(uint16_t port) noexcept;
	bool is_any() const noexcept; /* wildcard IP */
	/* IP address (and family) equal; ports ignored. */
	bool same_ip(const SockAddr &other) const noexcept;
	/* IP and port equal. */
	bool operator==(const SockAddr &other) const noexcept;
	/* "10.0.2.15:7471" or "[fd00::15]:7471". */
	std::string to_string() const;
	/* "10.0.2.15" or "fd00::15". */
	std::string ip_string() const;
};
static_assert(sizeof(SockAddr) == sizeof(sockaddr_in6), "an IPv6 address is the largest");

/* A malloc'd copy of the address, as fi_info's src_addr/dest_addr are
 * (fi_freeinfo frees them). Throws std::bad_alloc. */
void *malloc_copy(const SockAddr &addr);

/* Copies a sockaddr of `len` bytes after validating it: the family must be
 * AF_INET or AF_INET6 and `len` at least the family's size. Returns 0,
 * -FI_EINVAL for a short or null buffer, -FI_EINVAL for another family too. */
int sockaddr_copy(const void *addr, size_t len, SockAddr *out) noexcept;

/* Checks an address against a libfabric address format: FI_SOCKADDR takes
 * both families, FI_SOCKADDR_IN and _IN6 only their own, FI_FORMAT_UNSPEC
 * anything. Returns true when they agree. */
bool format_matches(uint32_t addr_format, const SockAddr &addr) noexcept;

/* The libfabric format that describes this address exactly. */
uint32_t format_of(const SockAddr &addr) noexcept;

/* The network an address belongs to, written as its prefix: "10.0.2.0/24". */
std::string network_prefix(const SockAddr &addr, unsigned prefix_len);

/* Number of leading one bits of a netmask sockaddr. */
unsigned prefix_length(const sockaddr *netmask) noexcept;

/* Resolves node/service with getaddrinfo. `passive` resolves a null node to
 * the wildcard address; `numeric` (fi_getinfo's FI_NUMERICHOST) takes the
 * node as a numeric address and never asks a name service. family:
 * AF_UNSPEC, AF_INET or AF_INET6. Returns 0, or -FI_ENODATA when the name
 * does not resolve (logged with the reason). */
int resolve(const char *node, const char *service, bool passive, bool numeric, int family,
	    SockAddr *out);

/* The local source address the kernel's routing table picks for `dest`
 * (connect() on a UDP socket: nothing is sent). 0, or -FI_ENETUNREACH /
 * -FI_EHOSTUNREACH / -errno as the kernel says. */
int route_source(const SockAddr &dest, SockAddr *src) noexcept;

} // namespace nd

#endif /* ND_ADDR_H */
