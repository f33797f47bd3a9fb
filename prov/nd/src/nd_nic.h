/*
 * nd_nic.h: the fid_nic every fi_info carries: device, bus and link
 * attributes, plus the provider's fi_nd_nic_attr (read limits, private data
 * limits, locality) as prov_attr. libfabric duplicates it with
 * fi_control(FI_DUP), prints it with tostr and frees it with fi_close.
 */
#ifndef ND_NIC_H
#define ND_NIC_H

#include "nd_device.h"

#include <rdma/fabric.h>

namespace nd {

/* A new fid_nic describing `adapter` as reached through `address`.
 * Throws std::bad_alloc. */
fid_nic *make_nic(const Adapter &adapter, const PortAddress &address);

} // namespace nd

#endif /* ND_NIC_H */
