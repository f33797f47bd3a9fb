#!/bin/bash
# nd_cluster_node_loss.sh BUILDDIR [PROVIDER]: a host that dies mid-transfer,
# on util/nd-cluster 2. Node 1 serves fabtests/functional/nd_node_loss, lets traffic
# flow for 2 s, then dies as a host that loses power does (sysrq's
# immediate reset, which QEMU's -no-reboot turns into the machine's end:
# no disconnect, no reply, ever); node 0, the survivor, must see its
# outstanding sends, RDMA writes and reads complete in error within 30 s of
# the last success, every request accounted for, FI_SHUTDOWN once (nd),
# every close 0. nd-cluster's status is 125 (node 1 is gone) by design:
# node 0's PASS:/FAIL: line is the verdict.
#
# Runs with nothing set: Soft-RoCE's retry count 7 retransmits for ever,
# and nd's own watch on requests that stand still (FI_ND_PEER_TIMEOUT,
# default 20 s; fi_nd(7)) reports the dead peer within the 30 s asked:
# FI_ND_RETRY_COUNT and FI_ND_PEER_TIMEOUT are unset. Both programs run as
# the test bed's user (nd_as_site_user); the reset is root's.
#
# Environment:
#   ND_MEET, ND_NODE  set by util/nd-cluster (internal): the nodes' shared
#                     directory, this node's number
set -u
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
builddir=$(cd "${1:?usage: nd_cluster_node_loss.sh BUILDDIR [PROVIDER]}" && pwd)
prov=${2:-nd}
export FI_PROVIDER_PATH=$builddir/.libs
unset FI_ND_RETRY_COUNT FI_ND_PEER_TIMEOUT
meet=${ND_MEET:?run by util/nd-cluster}
prog=$builddir/fabtests/functional/nd_node_loss

# wait_for, wait_for_line
# shellcheck source=nd_cluster_wait.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/nd_cluster_wait.sh"
server=$(nd_node_ip 1)

if ((ND_NODE == 1)); then
	nd_as_site_user "$prog" -p "$prov" -s -a "$server" >"$meet/loss.server" 2>&1 &
	if ! wait_for_line "$meet/loss.server" serving 90; then
		echo "node 1: the survivor never connected"
		exit 1
	fi
	sleep 2
	echo "node 1: powering off mid-transfer"
	: >"$meet/.done.$ND_NODE" # util/guest/cluster-node: a crashed node is done
	# Not "o" (power off): an orderly power-off shuts devices down, and
	# with Soft-RoCE busy it hung in ksoftirqd until the guest's time ran
	# out (5 min). "b" resets at once, like a pulled plug.
	echo b >/proc/sysrq-trigger
	sleep 60
	exit 1 # not reached
fi
if ! wait_for_line "$meet/loss.server" listening 60; then
	fail "node loss ($prov): the server on node 1 did not start"
	exit 0
fi
# nd promises FI_SHUTDOWN once after the errors (-S); other providers'
# events are only reported.
shutdown_wanted=()
[[ $prov == nd ]] && shutdown_wanted=(-S)
if nd_as_site_user timeout 120 "$prog" -p "$prov" -c "$server" -T 30 "${shutdown_wanted[@]}"; then
	pass "node loss ($prov, ${builddir##*/} build, nothing set): the survivor's requests all completed in error${shutdown_wanted:+, FI_SHUTDOWN once,} and every object closed"
else
	fail "node loss ($prov, ${builddir##*/} build, nothing set): see above"
fi
