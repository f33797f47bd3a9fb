/*
 * fixtures.h: shared test data. The adapter below carries the attributes
 * Soft-RoCE (rxe) reports in the test guest, so that host unit tests of the
 * info rules use realistic numbers.
 */
#ifndef ND_TEST_FIXTURES_H
#define ND_TEST_FIXTURES_H

#include "nd_device.h"

#include <arpa/inet.h>

#include <cstring>

namespace nd::test {

inline SockAddr ipv4(const char *ip, uint16_t port = 0)
{
	SockAddr a;
	a.in.sin_family = AF_INET;
	inet_pton(AF_INET, ip, &a.in.sin_addr);
	a.set_port(port);
	return a;
}

inline SockAddr ipv6(const char *ip, uint16_t port = 0)
{
	SockAddr a;
	a.in6.sin6_family = AF_INET6;
	inet_pton(AF_INET6, ip, &a.in6.sin6_addr);
	a.set_port(port);
	return a;
}

inline Adapter rxe_adapter()
{
	Adapter a;
	a.name = "rxe0";
	a.node_guid = 0x5054fffe123456ull;
	a.port_num = 1;
	a.ethernet = true;
	a.vendor_id = 0xffffff;
	a.vendor_part_id = 0;
	a.hw_ver = 0;
	a.fw_ver = "0.0.0";
	a.driver = "soft-roce";
	a.max_msg_sz = 0x800000;
	a.mtu_bytes = 1024;
	a.speed_bps = 10000000000ull;
	a.port_active = true;
	a.limits.max_mr_size = ~0ull;
	a.limits.max_qp = 1048576;
	a.limits.max_qp_wr = 1048576;
	a.limits.max_sge = 32;
	a.limits.max_sge_rd = 32;
	a.limits.max_cq = 1048576;
	a.limits.max_cqe = 32767;
	a.limits.max_mr = 524288;
	a.limits.max_pd = 1048576;
	a.limits.max_qp_rd_atom = 128;
	a.limits.max_qp_init_rd_atom = 128;
	a.limits.max_srq = 917504;
	a.limits.max_srq_wr = 1048576;
	a.limits.max_srq_sge = 27;
	a.limits.max_inline = 256;
	a.limits.atomics = true;
	PortAddress v4;
	v4.addr = ipv4("10.0.2.15");
	v4.prefix_len = 24;
	v4.netdev = "eth0";
	PortAddress v6;
	v6.addr = ipv6("fd00::15");
	v6.prefix_len = 64;
	v6.netdev = "eth0";
	a.addresses = {v4, v6};
	return a;
}

} // namespace nd::test

#endif /* ND_TEST_FIXTURES_H */
