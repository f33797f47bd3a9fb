/* nd_nic.cpp: the fid_nic of an adapter (FI_CLASS_NIC). */
#include "nd_nic.h"
#include "nd_unsupported.h"
#include "nd.h"

#include <rdma/fi_ext_nd.h>

#include <cinttypes>
#include <cstdlib>
#include <list>
#include <memory>
#include <mutex>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace nd {

namespace {

/*
 * libfabric's core copies and frees nics with its own code as well as
 * through these ops (a copy made by the core keeps our ops pointer), so a
 * nic is laid out exactly as libfabric lays out its own: the fid_nic and
 * each attribute structure a separate calloc, each string a strdup. The ops
 * below touch nothing but those fields.
 *
 * prov_attr points to an interned fi_nd_nic_attr that lives as long as the
 * process: copies of a nic may share the pointer without either owning it.
 * There is one per distinct value (a few per adapter), kept in a registry.
 */
Mutex registry_lock{LockRank::nic_registry};
std::list<fi_nd_nic_attr> registry;

const fi_nd_nic_attr *intern(const fi_nd_nic_attr &attr)
{
	std::lock_guard<Mutex> guard(registry_lock);
	for (const fi_nd_nic_attr &known : registry)
		if (std::memcmp(&known, &attr, sizeof(attr)) == 0)
			return &known;
	registry.push_back(attr);
	return &registry.back();
}

bool is_interned(const void *attr)
{
	std::lock_guard<Mutex> guard(registry_lock);
	for (const fi_nd_nic_attr &known : registry)
		if (&known == attr)
			return true;
	return false;
}

void free_nic(fid_nic *nic) noexcept
{
	if (!nic)
		return;
	if (fi_device_attr *d = nic->device_attr) {
		std::free(d->name);
		std::free(d->device_id);
		std::free(d->device_version);
		std::free(d->vendor_id);
		std::free(d->driver);
		std::free(d->firmware);
		std::free(d);
	}
	std::free(nic->bus_attr);
	if (fi_link_attr *l = nic->link_attr) {
		std::free(l->address);
		std::free(l->network_type);
		std::free(l);
	}
	std::free(nic);
}

struct NicDeleter {
	void operator()(fid_nic *nic) const noexcept { free_nic(nic); }
};
using UniqueNic = std::unique_ptr<fid_nic, NicDeleter>;

/* strdup that tolerates NULL and reports failure through `ok`. */
char *dup_text(const char *text, bool *ok)
{
	if (!text)
		return nullptr;
	char *copy = strdup(text);
	if (!copy)
		*ok = false;
	return copy;
}

int nic_close(fid *fid) noexcept;
int nic_control(fid *fid, int command, void *arg) noexcept;
int nic_tostr(const fid *fid, char *buf, size_t len) noexcept;

fi_ops nic_ops = {
	.size = sizeof(fi_ops),
	.close = nic_close,
	.bind = unsupported::bind,
	.control = nic_control,
	.ops_open = unsupported::ops_open,
	.tostr = nic_tostr,
	.ops_set = nullptr,
};

/* A nic with every structure allocated, strings empty; nullptr when out
 * of memory. */
UniqueNic alloc_nic()
{
	UniqueNic nic(static_cast<fid_nic *>(std::calloc(1, sizeof(fid_nic))));
	if (!nic)
		return nullptr;
	nic->fid.fclass = FI_CLASS_NIC;
	nic->fid.ops = &nic_ops;
	nic->device_attr = static_cast<fi_device_attr *>(std::calloc(1, sizeof(fi_device_attr)));
	nic->bus_attr = static_cast<fi_bus_attr *>(std::calloc(1, sizeof(fi_bus_attr)));
	nic->link_attr = static_cast<fi_link_attr *>(std::calloc(1, sizeof(fi_link_attr)));
	if (!nic->device_attr || !nic->bus_attr || !nic->link_attr)
		return nullptr;
	return nic;
}

fid_nic *dup_nic(const fid_nic *src)
{
	UniqueNic nic = alloc_nic();
	if (!nic)
		return nullptr;
	bool ok = true;
	if (const fi_device_attr *d = src->device_attr) {
		nic->device_attr->name = dup_text(d->name, &ok);
		nic->device_attr->device_id = dup_text(d->device_id, &ok);
		nic->device_attr->device_version = dup_text(d->device_version, &ok);
		nic->device_attr->vendor_id = dup_text(d->vendor_id, &ok);
		nic->device_attr->driver = dup_text(d->driver, &ok);
		nic->device_attr->firmware = dup_text(d->firmware, &ok);
	}
	if (src->bus_attr)
		*nic->bus_attr = *src->bus_attr;
	if (const fi_link_attr *l = src->link_attr) {
		*nic->link_attr = *l;
		nic->link_attr->address = dup_text(l->address, &ok);
		nic->link_attr->network_type = dup_text(l->network_type, &ok);
	}
	nic->prov_attr = src->prov_attr;
	return ok ? nic.release() : nullptr;
}

int nic_close(fid *fid) noexcept
{
	free_nic(reinterpret_cast<fid_nic *>(fid));
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
	fid_nic *copy = dup_nic(reinterpret_cast<const fid_nic *>(fid));
	if (!copy)
		return -FI_ENOMEM;
	*static_cast<fid_nic **>(arg) = copy;
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

const char *text_or_null(const char *text) { return text ? text : "(null)"; }

const char *link_state_name(fi_link_state state)
{
	switch (state) {
	case FI_LINK_UP: return "FI_LINK_UP";
	case FI_LINK_DOWN: return "FI_LINK_DOWN";
	default: return "FI_LINK_UNKNOWN";
	}
}

/* The layout libfabric prints for a nic, plus the nd attributes. */
int nic_tostr(const fid *fid, char *buf, size_t len) noexcept
{
	const fid_nic *n = reinterpret_cast<const fid_nic *>(fid);
	if (!buf || !len)
		return -FI_EINVAL;
	append(buf, len, "\tfid_nic:\n");
	if (const fi_device_attr *d = n->device_attr) {
		append(buf, len, "\t\tfi_device_attr:\n");
		append(buf, len, "\t\t\tname: %s\n", text_or_null(d->name));
		append(buf, len, "\t\t\tdevice_id: %s\n", text_or_null(d->device_id));
		append(buf, len, "\t\t\tdevice_version: %s\n", text_or_null(d->device_version));
		append(buf, len, "\t\t\tvendor_id: %s\n", text_or_null(d->vendor_id));
		append(buf, len, "\t\t\tdriver: %s\n", text_or_null(d->driver));
		append(buf, len, "\t\t\tfirmware: %s\n", text_or_null(d->firmware));
	}
	if (const fi_bus_attr *b = n->bus_attr) {
		append(buf, len, "\t\tfi_bus_attr:\n");
		if (b->bus_type == FI_BUS_PCI) {
			const fi_pci_attr &pci = b->attr.pci;
			append(buf, len, "\t\t\tfi_bus_type: FI_BUS_PCI\n");
			append(buf, len, "\t\t\tfi_pci_attr:\n");
			append(buf, len, "\t\t\t\tdomain_id: %u\n\t\t\t\tbus_id: %u\n",
			       pci.domain_id, pci.bus_id);
			append(buf, len, "\t\t\t\tdevice_id: %u\n\t\t\t\tfunction_id: %u\n",
			       pci.device_id, pci.function_id);
		} else {
			append(buf, len, "\t\t\tfi_bus_type: FI_BUS_UNKNOWN\n");
		}
	}
	if (const fi_link_attr *l = n->link_attr) {
		append(buf, len, "\t\tfi_link_attr:\n");
		append(buf, len, "\t\t\taddress: %s\n", text_or_null(l->address));
		append(buf, len, "\t\t\tmtu: %zu\n", l->mtu);
		append(buf, len, "\t\t\tspeed: %zu\n", l->speed);
		append(buf, len, "\t\t\tstate: %s\n", link_state_name(l->state));
		append(buf, len, "\t\t\tnetwork_type: %s\n", text_or_null(l->network_type));
	}
	if (n->prov_attr && is_interned(n->prov_attr)) {
		const auto *nd = static_cast<const fi_nd_nic_attr *>(n->prov_attr);
		append(buf, len, "\t\tfi_nd_nic_attr:\n");
		append(buf, len, "\t\t\tmax_inbound_read_limit: %u\n", nd->max_inbound_read_limit);
		append(buf, len, "\t\t\tmax_outbound_read_limit: %u\n", nd->max_outbound_read_limit);
		append(buf, len, "\t\t\tmax_connect_data: %u\n", nd->max_connect_data);
		append(buf, len, "\t\t\tmax_accept_data: %u\n", nd->max_accept_data);
		append(buf, len, "\t\t\tmax_reject_data: %u\n", nd->max_reject_data);
		append(buf, len, "\t\t\tmax_inline_data: %u\n", nd->max_inline_data);
		append(buf, len, "\t\t\tnuma_node: %d\n", nd->numa_node);
		append(buf, len, "\t\t\tis_local: %u\n", nd->is_local);
		append(buf, len, "\t\t\tport_num: %u\n", nd->port_num);
		append(buf, len, "\t\t\tnetdev: %s\n", nd->netdev);
	}
	return 0;
}

char *format_text(const char *fmt, unsigned value, bool *ok)
{
	char text[32];
	std::snprintf(text, sizeof(text), fmt, value);
	return dup_text(text, ok);
}

} // namespace

fid_nic *make_nic(const Adapter &a, const PortAddress &address)
{
	UniqueNic nic = alloc_nic();
	if (!nic)
		throw std::bad_alloc();
	bool ok = true;
	fi_device_attr *d = nic->device_attr;
	d->name = dup_text(a.name.c_str(), &ok);
	d->device_id = format_text("0x%x", a.vendor_part_id, &ok);
	d->device_version = format_text("%u", a.hw_ver, &ok);
	d->vendor_id = format_text("0x%x", a.vendor_id, &ok);
	d->driver = dup_text(a.driver.c_str(), &ok);
	d->firmware = dup_text(a.fw_ver.c_str(), &ok);
	if (a.pci.present) {
		nic->bus_attr->bus_type = FI_BUS_PCI;
		nic->bus_attr->attr.pci.domain_id = a.pci.domain;
		nic->bus_attr->attr.pci.bus_id = a.pci.bus;
		nic->bus_attr->attr.pci.device_id = a.pci.device;
		nic->bus_attr->attr.pci.function_id = a.pci.function;
	} else {
		nic->bus_attr->bus_type = FI_BUS_UNKNOWN;
	}
	fi_link_attr *l = nic->link_attr;
	l->address = dup_text(address.addr.ip_string().c_str(), &ok);
	l->network_type = dup_text(a.iwarp ? "iWARP" : a.ethernet ? "Ethernet" : "InfiniBand", &ok);
	l->mtu = a.mtu_bytes;
	l->speed = a.speed_bps;
	l->state = a.port_active ? FI_LINK_UP : FI_LINK_DOWN;
	if (!ok)
		throw std::bad_alloc();

	CmDataLimits cm = user_cm_limits(a);
	fi_nd_nic_attr nd{};
	nd.version = FI_ND_NIC_ATTR_VERSION;
	nd.max_inbound_read_limit = a.limits.max_qp_rd_atom;
	nd.max_outbound_read_limit = a.limits.max_qp_init_rd_atom;
	nd.max_connect_data = cm.connect;
	nd.max_accept_data = cm.accept;
	nd.max_reject_data = cm.reject;
	nd.max_inline_data = a.limits.max_inline;
	nd.numa_node = a.numa_node;
	nd.is_local = a.is_local ? 1 : 0;
	nd.port_num = a.port_num;
	std::snprintf(nd.netdev, sizeof(nd.netdev), "%s", address.netdev.c_str());
	nic->prov_attr = const_cast<fi_nd_nic_attr *>(intern(nd));
	return nic.release();
}

} // namespace nd
