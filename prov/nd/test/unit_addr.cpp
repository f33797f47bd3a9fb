/* unit_addr.cpp: socket address helpers. */
#include <criterion/criterion.h>

#include <string>

#include "fixtures.h"
#include "nd_addr.h"
#include "nd_info.h"

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

using namespace nd;
using namespace nd::test;

Test(addr, copy_rejects_null_short_and_foreign_addresses)
{
	SockAddr out;
	sockaddr_in in{};
	in.sin_family = AF_INET;
	cr_assert_eq(sockaddr_copy(nullptr, sizeof(in), &out), -FI_EINVAL);
	cr_assert_eq(sockaddr_copy(&in, 0, &out), -FI_EINVAL);
	cr_assert_eq(sockaddr_copy(&in, sizeof(in) - 1, &out), -FI_EINVAL);
	sockaddr_in6 in6{};
	in6.sin6_family = AF_INET6;
	cr_assert_eq(sockaddr_copy(&in6, sizeof(sockaddr_in), &out), -FI_EINVAL,
		     "an IPv6 address needs sizeof(sockaddr_in6) bytes");
	sockaddr_storage other{};
	other.ss_family = AF_UNIX;
	cr_assert_eq(sockaddr_copy(&other, sizeof(other), &out), -FI_EINVAL);
}

Test(addr, copy_keeps_address_and_port)
{
	SockAddr src = ipv4("10.0.2.15", 7471);
	SockAddr out;
	cr_assert_eq(sockaddr_copy(&src.in, sizeof(src.in), &out), 0);
	cr_assert(out == src);
	cr_assert_eq(out.port(), 7471);
	cr_assert_eq(out.length(), sizeof(sockaddr_in));
	SockAddr six = ipv6("fd00::15", 1);
	cr_assert_eq(sockaddr_copy(&six.in6, sizeof(six.in6) + 8, &out), 0);
	cr_assert(out == six);
	cr_assert_eq(out.length(), sizeof(sockaddr_in6));
}

Test(addr, text_forms)
{
	cr_assert(ipv4("10.0.2.15", 7471).to_string() == std::string("10.0.2.15:7471"));
	cr_assert(ipv6("fd00::15", 80).to_string() == std::string("[fd00::15]:80"));
	cr_assert(SockAddr().to_string() == std::string("(no address)"));
}

Test(addr, network_prefix_masks_host_bits)
{
	cr_assert(network_prefix(ipv4("10.0.2.15"), 24) == std::string("10.0.2.0/24"));
	cr_assert(network_prefix(ipv4("10.0.2.15"), 32) == std::string("10.0.2.15/32"));
	cr_assert(network_prefix(ipv4("10.0.2.15"), 0) == std::string("0.0.0.0/0"));
	cr_assert(network_prefix(ipv4("172.16.255.1"), 12) == std::string("172.16.0.0/12"));
	cr_assert(network_prefix(ipv6("fd00::15"), 64) == std::string("fd00::/64"));
	cr_assert(network_prefix(ipv4("10.0.2.15"), 99) == std::string("10.0.2.15/32"));
}

Test(addr, prefix_length_counts_mask_bits)
{
	SockAddr mask = ipv4("255.255.255.0");
	cr_assert_eq(prefix_length(&mask.sa), 24u);
	SockAddr mask6 = ipv6("ffff:ffff:ffff:ffff::");
	cr_assert_eq(prefix_length(&mask6.sa), 64u);
	cr_assert_eq(prefix_length(nullptr), 0u);
}

Test(addr, formats)
{
	cr_assert(format_matches(FI_SOCKADDR, ipv4("1.2.3.4")));
	cr_assert(format_matches(FI_SOCKADDR, ipv6("::1")));
	cr_assert(format_matches(FI_SOCKADDR_IN, ipv4("1.2.3.4")));
	cr_assert_not(format_matches(FI_SOCKADDR_IN, ipv6("::1")));
	cr_assert_not(format_matches(FI_SOCKADDR_IN6, ipv4("1.2.3.4")));
	cr_assert_not(format_matches(FI_ADDR_STR, ipv4("1.2.3.4")));
	cr_assert_eq(format_of(ipv6("::1")), (uint32_t)FI_SOCKADDR_IN6);
}

Test(addr, wildcard_and_equality)
{
	cr_assert(ipv4("0.0.0.0").is_any());
	cr_assert(ipv6("::").is_any());
	cr_assert_not(ipv4("10.0.2.15").is_any());
	cr_assert(ipv4("10.0.2.15", 1).same_ip(ipv4("10.0.2.15", 2)));
	cr_assert_not(ipv4("10.0.2.15", 1) == ipv4("10.0.2.15", 2));
	cr_assert_not(ipv4("10.0.2.15").same_ip(ipv6("::ffff:10.0.2.15")));
}

Test(addr, resolve_numeric_and_passive)
{
	SockAddr out;
	cr_assert_eq(resolve("10.0.2.15", "7471", false, false, AF_UNSPEC, &out), 0);
	cr_assert(out == ipv4("10.0.2.15", 7471));
	cr_assert_eq(resolve(nullptr, "9000", true, false, AF_INET, &out), 0);
	cr_assert(out.is_any());
	cr_assert_eq(out.port(), 9000);
	cr_assert_eq(resolve("fd00::15", nullptr, false, false, AF_UNSPEC, &out), 0);
	cr_assert_eq(out.family(), AF_INET6);
	cr_assert_eq(resolve("10.0.2.15", nullptr, false, false, AF_INET6, &out), -FI_ENODATA,
		     "an IPv4 literal does not resolve as IPv6");
	cr_assert_eq(resolve("no-such-host.invalid", nullptr, false, false, AF_UNSPEC, &out), -FI_ENODATA);
}

/* fi_getinfo's FI_NUMERICHOST: a literal still resolves, a name is refused
 * without a lookup (localhost is in every /etc/hosts, so it would resolve). */
Test(addr, resolve_numeric_host_asks_no_name_service)
{
	SockAddr out;
	cr_assert_eq(resolve("10.0.2.15", "7471", false, true, AF_UNSPEC, &out), 0);
	cr_assert(out == ipv4("10.0.2.15", 7471));
	cr_assert_eq(resolve("localhost", nullptr, false, false, AF_INET, &out), 0);
	cr_assert_eq(resolve("localhost", nullptr, false, true, AF_INET, &out), -FI_ENODATA);
	AddressRequest r;
	cr_assert_eq(address_request("localhost", "7471", FI_NUMERICHOST, nullptr, &r), -FI_ENODATA);
	cr_assert_eq(address_request("10.0.2.15", "7471", FI_NUMERICHOST, nullptr, &r), 0);
	cr_assert(r.has_dest && r.dest == ipv4("10.0.2.15", 7471));
}

Test(addr, route_source_of_loopback_is_loopback)
{
	SockAddr src;
	cr_assert_eq(route_source(ipv4("127.0.0.1", 5), &src), 0);
	cr_assert(src.same_ip(ipv4("127.0.0.1")));
	cr_assert_eq(src.port(), 0);
}
