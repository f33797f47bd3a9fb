#!/bin/bash
# nd_demo.sh BUILDDIR: the main job's demonstration, run where an RDMA device
# exists (util/nd-demo runs it in the Soft-RoCE guest). Shows the device as
# rdma-core sees it and as the nd provider offers it through libfabric.
set -euo pipefail
builddir=$(cd "${1:?usage: nd_demo.sh BUILDDIR}" && pwd)
export FI_PROVIDER_PATH=$builddir/.libs
dev=${ND_TEST_DEVICE:-rxe0}

echo "== the RDMA device, as rdma-core sees it (ibv_devinfo -d $dev)"
ibv_devinfo -d "$dev" | sed -n '1,4p;/port:/,$p' | grep -E "hca_id|transport|fw_ver|port:|state|active_mtu|link_layer" || true
echo
echo "== the nd provider, as libfabric offers it (fi_info -p nd -t FI_EP_MSG)"
fi_info -p nd -t FI_EP_MSG
echo
echo "== attributes nd reads from the adapter (fi_info -v, first address)"
fi_info -p nd -t FI_EP_MSG -v | awk '/^---/{n++} n<=1' |
	grep -E "^\s+(name|iov_limit|inject_size|max_msg_size|mr_mode|max_err_data|max_inbound_read_limit|max_outbound_read_limit|max_connect_data|max_accept_data|max_reject_data|max_inline_data|driver|mtu|state|network_type|address|is_local):"
echo
echo "== libfabric's own layering works on top: ofi_rxm over nd (RDM)"
fi_info -p "nd;ofi_rxm" -t FI_EP_RDM | grep -E "provider|domain|type" | head -3
echo
echo "nd-demo: the nd provider is loaded by libfabric and serves $dev"
