/*
 * fuzz_addr.cpp: the address and text parsers of what applications and the
 * system hand nd: a sockaddr of any bytes and claimed length (fi_getname's
 * peers, fi_connect's and fi_getinfo's addresses), its printing and its
 * network, a netmask, FI_ND_IFACE's list against an interface name, and a
 * device's PCI address text. No read outside the given bytes (ASan), no
 * undefined behaviour (UBSan), and what is accepted is consistent.
 */
#include "nd_addr.h"
#include "nd_device.h"
#include "nd_params.h"

#include <fuzzer/FuzzedDataProvider.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace nd;

namespace {

[[noreturn]] void broken(const char *rule)
{
	std::fprintf(stderr, "fuzz_addr: broken rule: %s\n", rule);
	std::abort();
}

void sockaddr_bytes(FuzzedDataProvider &in)
{
	std::vector<uint8_t> bytes = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange<size_t>(0, 160));
	if (bytes.size() >= 2 && in.ConsumeBool()) {
		const sa_family_t family = in.ConsumeBool() ? AF_INET : AF_INET6;
		std::memcpy(bytes.data(), &family, sizeof(family));
	}
	/* The claimed length may be the buffer's or a lie: nd must trust
	 * neither beyond the smaller (the buffer here is exactly its size). */
	const size_t claimed = in.ConsumeBool() ? bytes.size()
						: in.ConsumeIntegralInRange<size_t>(0, bytes.size());
	SockAddr addr;
	const int ret = sockaddr_copy(bytes.empty() ? nullptr : bytes.data(), claimed, &addr);
	if (ret != 0) {
		if (ret != -FI_EINVAL)
			broken("sockaddr_copy: an error other than -FI_EINVAL");
		return;
	}
	if (addr.family() != AF_INET && addr.family() != AF_INET6)
		broken("sockaddr_copy: accepted another family");
	if (addr.length() > claimed)
		broken("sockaddr_copy: accepted fewer bytes than the family needs");
	const std::string text = addr.to_string();
	if (text.empty() || addr.ip_string().empty())
		broken("to_string: empty for a valid address");
	const uint32_t format = format_of(addr);
	if (!format_matches(format, addr) || !format_matches(FI_SOCKADDR, addr) ||
	    !format_matches(FI_FORMAT_UNSPEC, addr))
		broken("format_of: a format the address does not match");
	const std::string net = network_prefix(addr, in.ConsumeIntegral<uint8_t>());
	if (net.find('/') == std::string::npos)
		broken("network_prefix: no prefix length");
	const unsigned bits = prefix_length(&addr.sa);
	if (bits > (addr.family() == AF_INET ? 32u : 128u))
		broken("prefix_length: more bits than the address has");
	SockAddr copy = addr;
	copy.set_port(in.ConsumeIntegral<uint16_t>());
	if (!copy.same_ip(addr))
		broken("set_port: changed the address");
	(void)addr.is_any();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	FuzzedDataProvider in(data, size);
	sockaddr_bytes(in);
	/* FI_ND_IFACE's list and an interface name. */
	const std::string list = in.ConsumeRandomLengthString(64);
	const std::string name = in.ConsumeRandomLengthString(16);
	const bool allowed = iface_allowed(list, name.c_str());
	if (list.empty() && !allowed)
		broken("iface_allowed: an empty list refused a name");
	/* A device's PCI address as sysfs names it. */
	const std::string pci_text = in.ConsumeRandomLengthString(24);
	PciAddress pci;
	if (parse_pci_address(pci_text, &pci)) {
		if (!pci.present || pci_text.size() != 12)
			broken("parse_pci_address: accepted text of another shape");
		char back[16];
		std::snprintf(back, sizeof(back), "%04x:%02x:%02x.%x", pci.domain, pci.bus, pci.device,
			      pci.function);
		(void)back;
	}
	return 0;
}
