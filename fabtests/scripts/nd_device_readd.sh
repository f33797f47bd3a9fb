#!/bin/bash
# nd_device_readd.sh BUILDDIR [DEVICE] [NETDEV]: the adapter goes away and
# comes back between two uses of nd, as a Soft-RoCE device (or a hot-plugged
# NIC) does. Soft-RoCE cannot remove a device that a process holds open
# (`rdma link delete` waits for it to exit), so the live removal is fed to
# nd's handlers in the host unit tests; here each use is its own process:
#   1. nd carries a checked ping-pong on DEVICE;
#   2. the device is deleted: fi_info -p nd offers nothing on it and says
#      why (-FI_ENODATA), and nd_msg_tests fails cleanly instead of hanging;
#   3. the device is added again on NETDEV: nd offers it and carries the
#      ping-pong again.
# Runs as root inside util/nd-guest (never on a host whose device matters).
# Every step is bounded; the device is put back whatever happens.
# DEVICE defaults to rxe0, NETDEV to eth0.
#
# Environment: reads no ND_* variable; FI_PROVIDER_PATH is set to
# BUILDDIR/.libs.
set -u
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
builddir=$(cd "${1:?usage: nd_device_readd.sh BUILDDIR [DEVICE] [NETDEV]}" && pwd)
dev=${2:-rxe0}
netdev=${3:-eth0}
export FI_PROVIDER_PATH=$builddir/.libs
msg=$builddir/fabtests/functional/nd_msg_tests
step=0

# fail_step MESSAGE: the step failed (nd-common.sh's fail, naming the
# step); the script ends there.
fail_step() {
	fail "step $step: $*"
	exit 1
}

# The device comes back even when a step fails, so later tests find it.
restore() {
	if [[ ! -e /sys/class/infiniband/$dev ]]; then
		rdma link add "$dev" type rxe netdev "$netdev" 2>/dev/null
		wait_active
	fi
}
trap restore EXIT

wait_active() {
	local state=/sys/class/infiniband/$dev/ports/1/state i
	for ((i = 0; i < 200; i++)); do
		[[ -r $state && $(<"$state") == *ACTIVE* ]] && return 0
		sleep 0.05
	done
	return 1
}

# A provider built with ASan/UBSan (util/nd-build asan) loads only into a
# process that has their runtimes: the system's fi_info gets them preloaded
# (its own leaks are not ours to judge).
fi_info_env=(FI_PROVIDER=nd)
if nm -D --undefined-only "$builddir/.libs/libnd-fi.so" 2>/dev/null | grep -q __asan_init; then
	fi_info_env+=("LD_PRELOAD=$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
		ASAN_OPTIONS=detect_leaks=0)
fi
nd_fi_info() {
	env "${fi_info_env[@]}" timeout 30 fi_info -p nd -d "$dev"
}

offered() { # true when fi_info -p nd lists DEVICE
	nd_fi_info 2>&1 | grep -q "domain: $dev"
}

step=1
offered || fail_step "nd does not offer $dev at the start"
timeout 60 "$msg" -p nd -t pingpong || fail_step "the ping-pong before the removal failed"

step=2
start=$SECONDS
timeout 30 rdma link delete "$dev" || fail_step "rdma link delete $dev did not finish in 30 s"
echo "deleted $dev in $((SECONDS - start)) s"
out=$(nd_fi_info 2>&1)
rc=$?
grep -q "domain: $dev" <<<"$out" && fail_step "fi_info still offers $dev after its removal"
[[ $rc -ne 0 ]] || fail_step "fi_info succeeded with nothing to offer"
grep -qE "No data available|-61" <<<"$out" || fail_step "fi_info did not say -FI_ENODATA: $out"
echo "fi_info without $dev: $(tail -1 <<<"$out")"
start=$SECONDS
timeout 60 "$msg" -p nd -t pingpong >/dev/null 2>&1
rc=$?
[[ $rc -ne 124 ]] || fail_step "nd_msg_tests hung without a device"
[[ $rc -ne 0 ]] || fail_step "nd_msg_tests passed without a device"
echo "nd_msg_tests without $dev: exit $rc after $((SECONDS - start)) s"

step=3
timeout 30 rdma link add "$dev" type rxe netdev "$netdev" || fail_step "rdma link add $dev failed"
wait_active || fail_step "$dev did not become ACTIVE again"
offered || fail_step "nd does not offer $dev once it is back"
timeout 60 "$msg" -p nd -t pingpong || fail_step "the ping-pong after the device came back failed"
pass "$dev deleted and added again; nd refused it while gone and carried traffic after"
