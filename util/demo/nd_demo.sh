#!/bin/bash
# nd_demo.sh BUILDDIR: the main job's demonstration, run where an RDMA device
# exists (util/nd-demo runs it in the Soft-RoCE guest). Shows the device as
# rdma-core sees it and as the nd provider offers it through libfabric, then
# nd carrying traffic: connections that exchange checked messages, and a
# ping-pong and a bandwidth run between two processes; with ND_DEMO_DEB (a
# package util/nd-deb made), the package installed and examples/ built
# against it and run.
#
# Environment:
#   ND_TEST_DEVICE  the device shown (rxe0)
#   ND_GUEST_IP     the address the programs use (10.0.2.15, the default of
#                   util/lib/nd-common.sh)
#   ND_DEMO_DEB     the package to install (unset: not installed; util/nd-demo
#                   sets it); then fabtests/scripts/nd_examples.sh runs, with
#                   its ND_EXAMPLES_PORT (7471)
#   ND_GUEST        1 in util/nd-guest's guest (internal): man-db's index
#                   rebuild is switched off there
set -euo pipefail
usage() { sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
case ${1:-} in -h | --help) usage; exit 0 ;; esac
# nd_guest_ip
source "$(dirname "$0")/../lib/nd-common.sh"
builddir=$(cd "${1:?usage: nd_demo.sh BUILDDIR}" && pwd)
export FI_PROVIDER_PATH=$builddir/.libs
dev=${ND_TEST_DEVICE:-rxe0}

echo "== the RDMA device, as rdma-core sees it (ibv_devinfo -d $dev)"
ibv_devinfo -d "$dev" | sed -n '1,4p;/^[[:space:]]*port:/,$p' | grep -E "hca_id|transport|fw_ver|port:|state|active_mtu|link_layer" || true
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
ip=$(nd_guest_ip)
echo "== traffic: 3 rounds of 16 connections, each carrying a message both ways, every byte checked"
"$builddir/fabtests/benchmarks/nd_cm_bench" -p nd -a "$ip" -n 16 -r 3 -x
echo
echo "== traffic: send/recv ping-pong and RDMA write bandwidth between two processes (nd_perf)"
port=$((20000 + RANDOM % 20000))
for test in send_lat write_bw; do
	port=$((port + 1))
	"$builddir/fabtests/benchmarks/nd_perf" -p nd -s -q -a "$ip" -P "$port" </dev/null >/dev/null 2>&1 &
	server=$!
	sleep 0.3
	"$builddir/fabtests/benchmarks/nd_perf" -p nd -c "$ip" -a "$ip" -P "$port" -t "$test" -S 8,65536 -n 200 -q </dev/null |
		grep '^nd_perf test=' | sed -E 's/ (lat_min_us|lat_max_us|lat_p99_us|inline|bidir|tx_depth|cq_mod|post_list)=[^ ]*//g'
	wait "$server"
done
echo
if [[ -n ${ND_DEMO_DEB:-} ]]; then
	echo "== as a user: the package installed, examples/ built with pkg-config alone and run (ND's connection model)"
	apt_from_installed install -y -q --no-install-recommends "$ND_DEMO_DEB" >/dev/null
	# The installed provider, found with no FI_PROVIDER_PATH.
	env -u FI_PROVIDER_PATH "$(dirname "$0")/../../fabtests/scripts/nd_examples.sh"
	echo
fi
echo "nd-demo: the nd provider is loaded by libfabric, serves $dev and carries traffic"
