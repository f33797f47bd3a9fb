/* nd_nic.cpp: the fid_nic of an adapter (FI_CLASS_NIC). */
#include "nd_nic.h"
#include "nd.h"
#include "nd_info.h"

#include <rdma/fi_ext_nd.h>

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace nd {

namespace {

/* One allocation holds the fid, its attribute structures and their strings,
 * so that close is one delete and duplication one copy. */
struct Nic {
	fid_nic nic;
	fi_device_attr device;
	fi_bus_attr bus;
	fi_link_attr link;
	fi_nd_nic_attr nd;
	char name[64];
	char device_id[16];
	char device_version[16];
	char vendor_id[16];
	char driver[64];
	char firmware[64];
	char address[64];
	char network_type[16];

	void link_pointers() noexcept;
};
static_assert(std::is_standard_layout_v<Nic>);

int nic_close(fid *fid) noexcept;
int nic_control(fid *fid, int command, void *arg) noexcept;
int nic_tostr(const fid *fid, char *buf, size_t len) noexcept;

fi_ops nic_ops = {
	.size = sizeof(fi_ops),
	.close = nic_close,
	.bind = [](fid *, fid *, uint64_t) noexcept { return -FI_ENOSYS; },
	.control = nic_control,
	.ops_open = [](fid *, const char *, uint64_t, void **, void *) noexcept { return -FI_ENOSYS; },
	.tostr = nic_tostr,
	.ops_set = [](fid *, const char *, uint64_t, void *, void *) noexcept { return -FI_ENOSYS; },
};

void Nic::link_pointers() noexcept
{
	nic.fid.fclass = FI_CLASS_NIC;
	nic.fid.context = nullptr;
	nic.fid.ops = &nic_ops;
	device.name = name;
	device.device_id = device_id;
	device.device_version = device_version;
	device.vendor_id = vendor_id;
	device.driver = driver;
	device.firmware = firmware;
	link.address = address;
	link.network_type = network_type;
	nic.device_attr = &device;
	nic.bus_attr = &bus;
	nic.link_attr = &link;
	nic.prov_attr = &nd;
}

template <size_t N>
void copy_text(char (&dest)[N], const std::string &text) noexcept
{
	std::snprintf(dest, N, "%s", text.c_str());
}

int nic_close(fid *fid) noexcept
{
	delete from_fid<Nic>(fid);
	return 0;
}

int nic_control(fid *fid, int command, void *arg) noexcept
{
	if (command != FI_DUP) {
		ND_WARN(FI_LOG_CORE, "fid_nic: control command %d not supported\n", command);
		return -FI_ENOSYS;
	}
	if (!arg)
		return -FI_EINVAL;
	Nic *copy = new (std::nothrow) Nic(*from_fid<Nic>(fid));
	if (!copy)
		return -FI_ENOMEM;
	copy->link_pointers();
	*static_cast<fid_nic **>(arg) = &copy->nic;
	return 0;
}

void append(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void append(char *buf, size_t len, const char *fmt, ...)
{
	size_t used = strnlen(buf, len);
	if (used + 1 >= len)
		return;
	va_list args;
	va_start(args, fmt);
	vsnprintf(buf + used, len - used, fmt, args);
	va_end(args);
}

const char *link_state_name(fi_link_state state)
{
	switch (state) {
	case FI_LINK_UP: return "FI_LINK_UP";
	case FI_LINK_DOWN: return "FI_LINK_DOWN";
	default: return "FI_LINK_UNKNOWN";
	}
}

/* The same layout libfabric prints for a nic, plus the nd attributes. */
int nic_tostr(const fid *fid, char *buf, size_t len) noexcept
{
	const Nic *n = reinterpret_cast<const Nic *>(fid);
	append(buf, len, "\tfid_nic:\n");
	append(buf, len, "\t\tfi_device_attr:\n");
	append(buf, len, "\t\t\tname: %s\n", n->device.name);
	append(buf, len, "\t\t\tdevice_id: %s\n", n->device.device_id);
	append(buf, len, "\t\t\tdevice_version: %s\n", n->device.device_version);
	append(buf, len, "\t\t\tvendor_id: %s\n", n->device.vendor_id);
	append(buf, len, "\t\t\tdriver: %s\n", n->device.driver);
	append(buf, len, "\t\t\tfirmware: %s\n", n->device.firmware);
	append(buf, len, "\t\tfi_bus_attr:\n");
	if (n->bus.bus_type == FI_BUS_PCI) {
		const fi_pci_attr &pci = n->bus.attr.pci;
		append(buf, len, "\t\t\tfi_bus_type: FI_BUS_PCI\n");
		append(buf, len, "\t\t\tfi_pci_attr:\n");
		append(buf, len, "\t\t\t\tdomain_id: %u\n\t\t\t\tbus_id: %u\n", pci.domain_id,
		       pci.bus_id);
		append(buf, len, "\t\t\t\tdevice_id: %u\n\t\t\t\tfunction_id: %u\n", pci.device_id,
		       pci.function_id);
	} else {
		append(buf, len, "\t\t\tfi_bus_type: FI_BUS_UNKNOWN\n");
	}
	append(buf, len, "\t\tfi_link_attr:\n");
	append(buf, len, "\t\t\taddress: %s\n", n->link.address);
	append(buf, len, "\t\t\tmtu: %zu\n", n->link.mtu);
	append(buf, len, "\t\t\tspeed: %zu\n", n->link.speed);
	append(buf, len, "\t\t\tstate: %s\n", link_state_name(n->link.state));
	append(buf, len, "\t\t\tnetwork_type: %s\n", n->link.network_type);
	append(buf, len, "\t\tfi_nd_nic_attr:\n");
	append(buf, len, "\t\t\tmax_inbound_read_limit: %u\n", n->nd.max_inbound_read_limit);
	append(buf, len, "\t\t\tmax_outbound_read_limit: %u\n", n->nd.max_outbound_read_limit);
	append(buf, len, "\t\t\tmax_connect_data: %u\n", n->nd.max_connect_data);
	append(buf, len, "\t\t\tmax_accept_data: %u\n", n->nd.max_accept_data);
	append(buf, len, "\t\t\tmax_reject_data: %u\n", n->nd.max_reject_data);
	append(buf, len, "\t\t\tmax_inline_data: %u\n", n->nd.max_inline_data);
	append(buf, len, "\t\t\tnuma_node: %d\n", n->nd.numa_node);
	append(buf, len, "\t\t\tis_local: %u\n", n->nd.is_local);
	append(buf, len, "\t\t\tport_num: %u\n", n->nd.port_num);
	append(buf, len, "\t\t\tnetdev: %s\n", n->nd.netdev);
	return 0;
}

} // namespace

fid_nic *make_nic(const Adapter &a, const PortAddress &address)
{
	Nic *n = new Nic{};
	copy_text(n->name, a.name);
	std::snprintf(n->device_id, sizeof(n->device_id), "0x%x", a.vendor_part_id);
	std::snprintf(n->device_version, sizeof(n->device_version), "%u", a.hw_ver);
	std::snprintf(n->vendor_id, sizeof(n->vendor_id), "0x%x", a.vendor_id);
	copy_text(n->driver, a.driver);
	copy_text(n->firmware, a.fw_ver);
	copy_text(n->address, address.addr.ip_string());
	copy_text(n->network_type, a.iwarp ? "iWARP" : a.ethernet ? "Ethernet" : "InfiniBand");
	if (a.pci.present) {
		n->bus.bus_type = FI_BUS_PCI;
		n->bus.attr.pci.domain_id = a.pci.domain;
		n->bus.attr.pci.bus_id = a.pci.bus;
		n->bus.attr.pci.device_id = a.pci.device;
		n->bus.attr.pci.function_id = a.pci.function;
	} else {
		n->bus.bus_type = FI_BUS_UNKNOWN;
	}
	n->link.mtu = a.mtu_bytes;
	n->link.speed = a.speed_bps;
	n->link.state = a.port_active ? FI_LINK_UP : FI_LINK_DOWN;

	CmDataLimits cm = user_cm_limits(a);
	n->nd.version = FI_ND_NIC_ATTR_VERSION;
	n->nd.max_inbound_read_limit = a.limits.max_qp_rd_atom;
	n->nd.max_outbound_read_limit = a.limits.max_qp_init_rd_atom;
	n->nd.max_connect_data = cm.connect;
	n->nd.max_accept_data = cm.accept;
	n->nd.max_reject_data = cm.reject;
	n->nd.max_inline_data = a.limits.max_inline;
	n->nd.numa_node = a.numa_node;
	n->nd.is_local = a.is_local ? 1 : 0;
	n->nd.port_num = a.port_num;
	copy_text(n->nd.netdev, address.netdev);
	n->link_pointers();
	return &n->nic;
}

} // namespace nd
