/* unit_params.cpp: FI_ND_IFACE matching. */
#include <criterion/criterion.h>

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
