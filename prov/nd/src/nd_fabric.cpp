/* nd_fabric.cpp: the fabric object (fid_fabric). */
#include "nd_fabric.h"
#include "nd_unsupported.h"

#include <cstdio>
#include <cstring>

namespace nd {

namespace {

Fabric *fabric_of(fid_fabric *f) noexcept { return from_fid<Fabric>(f); }

int fabric_eq_open(fid_fabric *f, fi_eq_attr *attr, fid_eq **eq, void *context) noexcept
{
	if (!f)
		return -FI_EINVAL;
	Fabric *fabric = fabric_of(f);
	return eq_open(fabric->api_version, &fabric->children, attr, eq, context);
}

int fabric_trywait(fid_fabric *, fid **fids, int count) noexcept
{
	if (!fids && count > 0)
		return -FI_EINVAL;
	for (int i = 0; i < count; i++) {
		if (!fids[i])
			return -FI_EINVAL;
		int ret;
		switch (fids[i]->fclass) {
		case FI_CLASS_EQ:
			ret = eq_trywait(fids[i]);
			break;
		case FI_CLASS_CQ:
			ret = cq_trywait(fids[i]);
			break;
		case FI_CLASS_CNTR:
			ret = cntr_trywait(fids[i]);
			break;
		default:
			ND_WARN(FI_LOG_FABRIC, "fi_trywait: fid class %zu has no wait object\n",
				fids[i]->fclass);
			return -FI_EINVAL;
		}
		if (ret)
			return ret;
	}
	return 0;
}

int fabric_domain2(fid_fabric *f, fi_info *info, fid_domain **domain, uint64_t flags,
		   void *context) noexcept
{
	if (flags) {
		ND_WARN(FI_LOG_FABRIC, "fi_domain2: flags 0x%llx not supported\n",
			static_cast<unsigned long long>(flags));
		return -FI_EBADFLAGS;
	}
	return open_domain(f, info, domain, context);
}

int fabric_close(fid *fid) noexcept
{
	return from_fid<Fabric>(fid)->close();
}

fi_ops fabric_fid_ops = {
	.size = sizeof(fi_ops),
	.close = fabric_close,
	.bind = unsupported::bind,
	.control = unsupported::control,
	.ops_open = unsupported::ops_open,
	.tostr = nullptr,
	.ops_set = nullptr,
};

fi_ops_fabric fabric_ops = {
	.size = sizeof(fi_ops_fabric),
	.domain = open_domain,
	.passive_ep = open_passive_ep,
	.eq_open = fabric_eq_open,
	.wait_open = wait_open,
	.trywait = fabric_trywait,
	.domain2 = fabric_domain2,
};

} // namespace

int Fabric::close()
{
	if (children.busy()) {
		ND_WARN(FI_LOG_FABRIC, "fi_close(fabric %s): %d child object(s) still open\n", name,
			children.value());
		return -FI_EBUSY;
	}
	delete this;
	return 0;
}

int open_fabric(fi_fabric_attr *attr, fid_fabric **out, void *context) noexcept
{
	if (!attr || !attr->name || !out) {
		ND_WARN(FI_LOG_FABRIC, "fi_fabric: attr, attr->name and fabric must not be NULL\n");
		return -FI_EINVAL;
	}
	if (std::strlen(attr->name) >= sizeof(Fabric::name)) {
		ND_WARN(FI_LOG_FABRIC, "fi_fabric: no nd fabric is named '%s'\n", attr->name);
		return -FI_EINVAL;
	}
	Fabric *fabric = new (std::nothrow) Fabric{};
	if (!fabric)
		return -FI_ENOMEM;
	fabric->fabric.fid.fclass = FI_CLASS_FABRIC;
	fabric->fabric.fid.context = context;
	fabric->fabric.fid.ops = &fabric_fid_ops;
	fabric->fabric.ops = &fabric_ops;
	fabric->fabric.api_version = attr->api_version ? attr->api_version : ND_API_VERSION;
	fabric->api_version = fabric->fabric.api_version;
	std::snprintf(fabric->name, sizeof(fabric->name), "%s", attr->name);
	*out = &fabric->fabric;
	return 0;
}

} // namespace nd
