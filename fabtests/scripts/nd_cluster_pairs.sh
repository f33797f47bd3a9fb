#!/bin/bash
# nd_cluster_pairs.sh BUILDDIR: connection management and the data path with
# the two sides on two nodes of util/nd-cluster (util/nd-check's cross-node
# stage): fabtests/functional/nd_pair_tests, the program fabtests/scripts/nd_programs.sh runs
# with both sides in one guest, here with its server on node 0 and its
# client on node 1, given node 0's address: connect, accept and reject data
# up to the limits, the refused endpoint connecting again, messages of 1 B
# to 1 MiB each way, RDMA writes (one with remote CQ data), a write back and
# reads, and the flush at the peer's fi_shutdown, every byte checked.
# The client's PASS:/FAIL: lines on node 1 are the subtests' verdicts; the
# server's checks of its own half print FAIL: on node 0 when they fail.
# Other nodes do nothing. Every wait is bounded. In the guests both sides
# run as the test bed's user (nd_as_site_user), as nd_programs.sh runs them
# on one host.
#
# Environment:
#   ND_MEET, ND_NODE  set by util/nd-cluster (internal): the nodes' shared
#                     directory, this node's number
set -u
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
builddir=$(cd "${1:?usage: nd_cluster_pairs.sh BUILDDIR}" && pwd)
export FI_PROVIDER_PATH=$builddir/.libs
meet=${ND_MEET:?run by util/nd-cluster}
prog=$builddir/fabtests/functional/nd_pair_tests

# wait_for, wait_for_line
# shellcheck source=nd_cluster_wait.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/nd_cluster_wait.sh"
server=$(nd_node_ip 0)

case $ND_NODE in
0)
	# The server stops at the client's closing request, or after 120 s
	# without one; the outer timeout bounds a server stuck elsewhere.
	nd_as_site_user timeout 300 "$prog" -p nd -s -a "$server" >"$meet/pairs.server" 2>&1
	rc=$?
	grep -v '^server ok' "$meet/pairs.server"
	if [ "$rc" -ne 0 ] && ! grep -q '^FAIL: ' "$meet/pairs.server"; then
		fail "cross-node nd_pair_tests: the server on node 0 exited with status $rc"
	fi
	;;
1)
	if ! wait_for_line "$meet/pairs.server" listening 180; then
		fail "cross-node nd_pair_tests: the server on node 0 did not start"
		exit 0
	fi
	nd_as_site_user timeout 240 "$prog" -p nd -c "$server" | sed -u 's/^\(PASS\|FAIL\): /\1: cross-node nd_pair_tests: /'
	rc=${PIPESTATUS[0]}
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; then
		fail "cross-node nd_pair_tests: the client exited with status $rc"
	fi
	;;
esac
exit 0
