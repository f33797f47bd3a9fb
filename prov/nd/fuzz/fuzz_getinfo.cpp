/*
 * fuzz_getinfo.cpp: fi_getinfo's rules under any hints an application can
 * pass: every field of fi_info and its attributes from the input, strings
 * and addresses of any length and content, attribute structures missing,
 * node and service strings of any bytes, on the two fixture adapters
 * (Soft-RoCE's and soft-iWARP's numbers, fixtures.h). What is checked: no
 * read outside what the application gave (ASan), no undefined behaviour
 * (UBSan), and an fi_info built for hints that match is one that matches
 * them again, freed whole by fi_freeinfo (LeakSanitizer).
 *
 * The node is always resolved with FI_NUMERICHOST: a fuzzer must not reach
 * a name service; the name path is getaddrinfo's own.
 */
#include "fixtures.h"
#include "nd.h"
#include "nd_info.h"

#include <fuzzer/FuzzedDataProvider.h>
#include <rdma/fi_errno.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace nd;

namespace {

[[noreturn]] void broken(const char *rule, const std::string &why = {})
{
	std::fprintf(stderr, "fuzz_getinfo: broken rule: %s %s\n", rule, why.c_str());
	std::abort();
}

/* A malloc'd string (fi_freeinfo frees it) or NULL. */
char *string_or_null(FuzzedDataProvider &in)
{
	if (!in.ConsumeBool())
		return nullptr;
	return strdup(in.ConsumeRandomLengthString(64).c_str());
}

/* A malloc'd buffer of exactly the length the hints claim (or, as a broken
 * application may pass, of a length that is not an address's). */
void *bytes_or_null(FuzzedDataProvider &in, size_t *len)
{
	*len = 0;
	if (!in.ConsumeBool())
		return nullptr;
	std::vector<uint8_t> bytes = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange<size_t>(0, 160));
	/* Often a real family, so that the paths past the family check run. */
	if (bytes.size() >= 2 && in.ConsumeBool()) {
		const sa_family_t family = in.ConsumeBool() ? AF_INET : AF_INET6;
		std::memcpy(bytes.data(), &family, sizeof(family));
	}
	void *copy = std::malloc(bytes.size() ? bytes.size() : 1);
	if (bytes.size())
		std::memcpy(copy, bytes.data(), bytes.size());
	*len = bytes.size();
	return copy;
}

template <typename T> T value(FuzzedDataProvider &in)
{
	/* Small values most of the time: they are the ones the rules name. */
	if (in.ConsumeBool())
		return static_cast<T>(in.ConsumeIntegralInRange<int>(0, 8));
	return static_cast<T>(in.ConsumeIntegral<uint64_t>());
}

void fill_tx(FuzzedDataProvider &in, fi_tx_attr *tx)
{
	tx->caps = value<uint64_t>(in);
	tx->mode = value<uint64_t>(in);
	tx->op_flags = value<uint64_t>(in);
	tx->msg_order = value<uint64_t>(in);
	tx->comp_order = value<uint64_t>(in);
	tx->inject_size = value<size_t>(in);
	tx->size = value<size_t>(in);
	tx->iov_limit = value<size_t>(in);
	tx->rma_iov_limit = value<size_t>(in);
}

void fill_rx(FuzzedDataProvider &in, fi_rx_attr *rx)
{
	rx->caps = value<uint64_t>(in);
	rx->mode = value<uint64_t>(in);
	rx->op_flags = value<uint64_t>(in);
	rx->msg_order = value<uint64_t>(in);
	rx->comp_order = value<uint64_t>(in);
	rx->total_buffered_recv = value<size_t>(in);
	rx->size = value<size_t>(in);
	rx->iov_limit = value<size_t>(in);
}

void fill_ep(FuzzedDataProvider &in, fi_ep_attr *ep)
{
	ep->type = value<fi_ep_type>(in);
	ep->protocol = value<uint32_t>(in);
	ep->protocol_version = value<uint32_t>(in);
	ep->max_msg_size = value<size_t>(in);
	ep->msg_prefix_size = value<size_t>(in);
	ep->max_order_raw_size = value<size_t>(in);
	ep->max_order_war_size = value<size_t>(in);
	ep->max_order_waw_size = value<size_t>(in);
	ep->mem_tag_format = value<uint64_t>(in);
	ep->tx_ctx_cnt = value<size_t>(in);
	ep->rx_ctx_cnt = value<size_t>(in);
	if (in.ConsumeBool())
		ep->rx_ctx_cnt = FI_SHARED_CONTEXT;
	ep->auth_key = static_cast<uint8_t *>(bytes_or_null(in, &ep->auth_key_size));
}

void fill_domain(FuzzedDataProvider &in, fi_domain_attr *d)
{
	d->name = string_or_null(in);
	d->threading = value<fi_threading>(in);
	d->control_progress = value<fi_progress>(in);
	d->data_progress = value<fi_progress>(in);
	d->resource_mgmt = value<fi_resource_mgmt>(in);
	d->av_type = value<fi_av_type>(in);
	d->mr_mode = value<int>(in);
	d->mr_key_size = value<size_t>(in);
	d->cq_data_size = value<size_t>(in);
	d->cq_cnt = value<size_t>(in);
	d->ep_cnt = value<size_t>(in);
	d->tx_ctx_cnt = value<size_t>(in);
	d->rx_ctx_cnt = value<size_t>(in);
	d->max_ep_tx_ctx = value<size_t>(in);
	d->max_ep_rx_ctx = value<size_t>(in);
	d->max_ep_stx_ctx = value<size_t>(in);
	d->max_ep_srx_ctx = value<size_t>(in);
	d->cntr_cnt = value<size_t>(in);
	d->mr_iov_limit = value<size_t>(in);
	d->caps = value<uint64_t>(in);
	d->mode = value<uint64_t>(in);
	d->auth_key = static_cast<uint8_t *>(bytes_or_null(in, &d->auth_key_size));
	d->max_err_data = value<size_t>(in);
	d->mr_cnt = value<size_t>(in);
}

void fill_fabric(FuzzedDataProvider &in, fi_fabric_attr *f)
{
	f->name = string_or_null(in);
	f->prov_name = string_or_null(in);
	f->prov_version = value<uint32_t>(in);
	f->api_version = value<uint32_t>(in);
}

/* Frees one attribute structure and leaves NULL, as hand-made hints have. */
template <typename T> void maybe_drop(FuzzedDataProvider &in, T **attr)
{
	if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
		std::free(*attr);
		*attr = nullptr;
	}
}

void one_adapter(uint32_t version, const fi_info *hints, const Adapter &adapter,
		 const AddressRequest &request, bool have_request)
{
	const Params params;
	for (const PortAddress &address : adapter.addresses) {
		if (have_request && !address_matches(request, address))
			continue;
		const std::string why = hints_mismatch(version, hints, adapter, address, params);
		if (!why.empty())
			continue;
		UniqueInfo info(build_info(version, hints, adapter, address, request, params));
		if (!info)
			broken("build_info: NULL for matching hints");
		/* What nd offers satisfies what it offers. */
		const std::string again = hints_mismatch(version, info.get(), adapter, address, params);
		if (!again.empty())
			broken("build_info: an fi_info that does not match itself:", again);
	}
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	FuzzedDataProvider in(data, size);
	static const uint32_t versions[] = {FI_VERSION(1, 0), FI_VERSION(1, 4), FI_VERSION(1, 5),
					    FI_VERSION(1, 17), FI_VERSION(1, 18), FI_VERSION(2, 0)};
	const uint32_t version = in.PickValueInArray(versions);
	const bool no_hints = in.ConsumeIntegralInRange<int>(0, 15) == 0;
	UniqueInfo hints(no_hints ? nullptr : fi_allocinfo());
	if (hints) {
		hints->caps = value<uint64_t>(in);
		hints->mode = value<uint64_t>(in);
		hints->addr_format = value<uint32_t>(in);
		hints->src_addr = bytes_or_null(in, &hints->src_addrlen);
		hints->dest_addr = bytes_or_null(in, &hints->dest_addrlen);
		fill_tx(in, hints->tx_attr);
		fill_rx(in, hints->rx_attr);
		fill_ep(in, hints->ep_attr);
		fill_domain(in, hints->domain_attr);
		fill_fabric(in, hints->fabric_attr);
		maybe_drop(in, &hints->tx_attr);
		maybe_drop(in, &hints->rx_attr);
		if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
			free(hints->ep_attr->auth_key);
			free(hints->ep_attr);
			hints->ep_attr = nullptr;
		}
		if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
			free(hints->domain_attr->name);
			free(hints->domain_attr->auth_key);
			free(hints->domain_attr);
			hints->domain_attr = nullptr;
		}
	}
	/* A NIC named in the hints (a stack object, taken out before the
	 * hints are freed: fi_freeinfo would close it). */
	fi_device_attr device{};
	fid_nic nic{};
	std::string nic_name = in.ConsumeRandomLengthString(16);
	if (hints && in.ConsumeBool()) {
		device.name = nic_name.data();
		nic.device_attr = &device;
		hints->nic = &nic;
	}
	const std::string node = in.ConsumeRandomLengthString(64);
	const std::string service = in.ConsumeRandomLengthString(16);
	const bool with_node = in.ConsumeBool(), with_service = in.ConsumeBool();
	const uint64_t flags = (in.ConsumeBool() ? FI_SOURCE : 0) | FI_NUMERICHOST;

	(void)negotiate_mr_mode(version, hints.get());
	(void)api_refusal(version);
	AddressRequest request;
	const int ret = address_request(with_node ? node.c_str() : nullptr,
					with_service ? service.c_str() : nullptr, flags, hints.get(),
					&request);
	if (ret != 0 && ret != -FI_ENODATA && ret != -FI_EINVAL)
		broken("address_request: an error other than ENODATA or EINVAL");
	Adapter rxe = test::rxe_adapter();
	Adapter siw = rxe;
	siw.iwarp = true;
	siw.name = "siw0";
	siw.limits.max_sge_rd = 1;
	one_adapter(version, hints.get(), rxe, request, ret == 0);
	one_adapter(version, hints.get(), siw, request, ret == 0);
	if (hints)
		hints->nic = nullptr;
	return 0;
}
