#!/bin/bash
# nd_info_vs_devinfo.sh DEVICE: compares what `fi_info -p nd -v` reports for
# DEVICE with what `ibv_devinfo -v` says about the same device, field by
# field. DEVICE defaults to rxe0.
#
# Environment: FI_PROVIDER_PATH must point at the built provider (a
# BUILDDIR/.libs); reads no ND_* variable.
set -euo pipefail
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
dev=${1:-rxe0}

devinfo=$(ibv_devinfo -v -d "$dev")
# nd's own MSG infos only: `-p nd` also lists ofi_rxm layered over nd.
info=$(fi_info -p nd -t FI_EP_MSG -d "$dev" -v)
# The first info block (one address of the device).
first=$(awk '/^---/{n++} n<=1' <<<"$info")
grep -q "prov_name: nd$" <<<"$first" || { echo "the first info is not nd's:"; echo "$first"; exit 1; }
[ -n "$first" ] || { echo "fi_info -p nd printed nothing"; exit 1; }

devinfo_value() { # FIELD: first "FIELD: value" of ibv_devinfo
	awk -v f="$1" '{ sub(/^[ \t]+/, "") } index($0, f":") == 1 { sub(/^[^:]*:[ \t]*/, ""); print; exit }' <<<"$devinfo"
}
info_value() { # FIELD: first "FIELD: value" of the fi_info block
	awk -v f="$1" '{ sub(/^[ \t]+/, "") } index($0, f":") == 1 { sub(/^[^:]*:[ \t]*/, ""); print; exit }' <<<"$first"
}

failures=0
compare() { # LABEL EXPECTED ACTUAL
	if [ "$2" == "$3" ]; then
		echo "ok   $1: $3"
	else
		echo "DIFF $1: ibv_devinfo says '$2', fi_info says '$3'"
		failures=$((failures + 1))
	fi
}
hex_to_dec() { printf '%d' "$1"; }
mtu_of() { sed -n 's/^\([0-9]*\).*/\1/p' <<<"$1"; }

compare "domain name" "$dev" "$(info_value name)"
compare "firmware" "$(devinfo_value fw_ver)" "$(info_value firmware)"
compare "vendor_id" "$(hex_to_dec "$(devinfo_value vendor_id)")" "$(hex_to_dec "$(info_value vendor_id)")"
compare "device_id (vendor_part_id)" "$(devinfo_value vendor_part_id)" "$(hex_to_dec "$(info_value device_id)")"
compare "device_version (hw_ver)" "$(hex_to_dec "$(devinfo_value hw_ver)")" "$(info_value device_version)"
# iov_limit is the FI_ND_IOV_LIMIT default unless asked for; never above max_sge.
iov=$(info_value iov_limit)
compare "tx iov_limit <= max_sge" "yes" "$([ "$iov" -le "$(devinfo_value max_sge)" ] && echo yes || echo "no ($iov)")"
compare "max_msg_size (max_msg_sz)" "$(hex_to_dec "$(devinfo_value max_msg_sz)")" "$(info_value max_msg_size)"
compare "mr_cnt (max_mr)" "$(devinfo_value max_mr)" "$(info_value mr_cnt)"
compare "cq_cnt (max_cq)" "$(devinfo_value max_cq)" "$(info_value cq_cnt)"
compare "ep_cnt (max_qp)" "$(devinfo_value max_qp)" "$(info_value ep_cnt)"
compare "inbound read limit (max_qp_rd_atom)" "$(devinfo_value max_qp_rd_atom)" "$(info_value max_inbound_read_limit)"
compare "outbound read limit (max_qp_init_rd_atom)" "$(devinfo_value max_qp_init_rd_atom)" "$(info_value max_outbound_read_limit)"
compare "mtu (active_mtu)" "$(mtu_of "$(devinfo_value active_mtu)")" "$(info_value mtu)"
state=$(devinfo_value state)
compare "link state" "$([ "${state%% *}" == PORT_ACTIVE ] && echo FI_LINK_UP || echo FI_LINK_DOWN)" "$(info_value state)"
layer=$(devinfo_value link_layer)
# An iWARP adapter's link layer is Ethernet; nd names the network iWARP
# (ibv_devinfo's transport), as RoCE's is named Ethernet.
if [ "$(devinfo_value transport | awk '{print $1}')" = iWARP ]; then
	compare "network type (transport)" iWARP "$(info_value network_type)"
else
	compare "network type (link_layer)" "$layer" "$(info_value network_type)"
fi

echo "$failures difference(s)"
[ "$failures" -eq 0 ]
