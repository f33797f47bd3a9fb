/* unit_params.cpp: FI_ND_IFACE matching and the range checks of the retry parameters. */
#include <criterion/criterion.h>

#include <cstdlib>

#include "nd_params.h"

using nd::iface_allowed;

Test(params, empty_list_allows_every_interface)
{
	cr_assert(iface_allowed("", "eth0"));
	cr_assert(iface_allowed("", "ib0"));
}

Test(params, prefixes_select_interfaces)
{
	cr_assert(iface_allowed("eth", "eth0"));
	cr_assert(iface_allowed("ib,eth1", "eth1"));
	cr_assert(iface_allowed("ib,eth1", "ib0"));
	cr_assert_not(iface_allowed("ib,eth1", "eth0"));
	cr_assert_not(iface_allowed("ens", "eth0"));
}

Test(params, empty_elements_match_nothing)
{
	cr_assert_not(iface_allowed(",", "eth0"));
	cr_assert_not(iface_allowed(",,ib", "eth0"));
	cr_assert(iface_allowed(",,ib", "ib0"));
}

Test(params, values_outside_their_range_fall_back_to_the_default)
{
	cr_assert_eq(nd::param_in_range("FI_ND_RNR_RETRY", 0, 0, 7, 7), 0);
	cr_assert_eq(nd::param_in_range("FI_ND_RNR_RETRY", 7, 0, 7, 7), 7);
	cr_assert_eq(nd::param_in_range("FI_ND_RNR_RETRY", 8, 0, 7, 7), 7);
	cr_assert_eq(nd::param_in_range("FI_ND_RETRY_COUNT", -1, 0, 7, 6), 6);
	cr_assert_eq(nd::param_in_range("FI_ND_ACK_TIMEOUT", 31, 0, 31, -1), 31);
	cr_assert_eq(nd::param_in_range("FI_ND_ACK_TIMEOUT", 32, 0, 31, -1), -1);
	cr_assert_eq(nd::param_in_range("FI_ND_ACK_TIMEOUT", 1LL << 40, 0, 31, -1), -1);
}

/* Each test runs in a process of its own (Criterion forks), so the
 * environment set here is this test's alone. */
Test(params, retry_parameters_come_from_the_environment)
{
	nd::define_params();
	nd::Params defaults = nd::read_params();
	cr_assert_eq(defaults.rnr_retry, 7, "RNR retries are infinite unless asked otherwise");
	cr_assert_eq(defaults.retry_count, -1, "the device's default");
	cr_assert_eq(defaults.ack_timeout, -1, "rdma_cm's ACK timeout unless asked otherwise");
	cr_assert_eq(defaults.peer_timeout_s, 20, "fi_nd(7): a stalled peer is given up after 20 s");
	setenv("FI_ND_RNR_RETRY", "0", 1);
	setenv("FI_ND_RETRY_COUNT", "9", 1);
	setenv("FI_ND_ACK_TIMEOUT", "14", 1);
	nd::Params p = nd::read_params();
	cr_assert_eq(p.rnr_retry, 0);
	cr_assert_eq(p.retry_count, -1, "9 is out of range: the default");
	cr_assert_eq(p.ack_timeout, 14);
	setenv("FI_ND_PEER_TIMEOUT", "4", 1);
	cr_assert_eq(nd::read_params().peer_timeout_s, 4);
	setenv("FI_ND_PEER_TIMEOUT", "3601", 1);
	cr_assert_eq(nd::read_params().peer_timeout_s, 20, "3601 is out of range: the default");
	unsetenv("FI_ND_PEER_TIMEOUT");
	setenv("FI_ND_ACK_TIMEOUT", "32", 1);
	setenv("FI_ND_RNR_RETRY", "-1", 1);
	p = nd::read_params();
	cr_assert_eq(p.ack_timeout, -1);
	cr_assert_eq(p.rnr_retry, 7);
}

Test(params, transport_retry_defaults_per_kind_of_device)
{
	nd::Params p;
	nd::TransportRetry hw = nd::transport_retry(p, false);
	cr_assert_eq(hw.retry_count, 6);
	cr_assert_eq(hw.ack_timeout, -1, "rdma_cm's on hardware");
	nd::TransportRetry soft = nd::transport_retry(p, true);
	cr_assert_eq(soft.retry_count, 7, "Soft-RoCE: late receivers stay waited for");
	cr_assert_eq(soft.ack_timeout, 14, "Soft-RoCE: a lost packet costs 67 ms, not 2.1 s");
	p.retry_count = 6;
	p.ack_timeout = 19;
	soft = nd::transport_retry(p, true);
	cr_assert_eq(soft.retry_count, 6, "what the application set wins");
	cr_assert_eq(soft.ack_timeout, 19);
	p.retry_count = 0;
	cr_assert_eq(nd::transport_retry(p, false).retry_count, 0);
}
