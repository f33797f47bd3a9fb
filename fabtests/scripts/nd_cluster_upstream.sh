#!/bin/bash
# nd_cluster_upstream.sh FTDIR BUILDDIR: libfabric's own fabtests across two
# nodes of util/nd-cluster (util/nd-check's cross-node stage): MSG tests with
# nd and RDM tests over "nd;ofi_rxm", run by fabtests/scripts/nd_upstream.sh as in
# one guest, but every test's server on nd-node0 and its client on nd-node1
# (runfabtests.sh's remote mode, over ssh), each outcome checked against the
# same fabtests/test_configs/nd/upstream.expect. A test costs 10-20 s across
# emulated nodes, so the subsets are the tests that move data, once each
# (nd_upstream.sh says which); the one-guest run keeps the whole subsets.
# Node 0 runs it and prints the PASS:/FAIL: verdicts; node 1 only serves
# ssh, and waits until node 0 is done (bounded). The nodes need the memory
# of fabtests' bandwidth tests (a 1 GiB window per process): nd-check boots
# them with --mem 4096.
#
# Environment:
#   ND_UPSTREAM_TOTAL    seconds the whole run may take (480)
#   ND_UPSTREAM_WAIT     seconds node 1 waits for node 0's run to end (600)
#   ND_UPSTREAM_TIMEOUT  seconds each test may take (120; nd_upstream.sh's)
#   ND_UPSTREAM_REMOTE   set here for nd_upstream.sh (internal):
#                        nd-node0,nd-node1
#   ND_MEET, ND_NODE     set by util/nd-cluster (internal): the nodes'
#                        shared directory, this node's number
set -u
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
ftdir=$(cd "${1:?usage: nd_cluster_upstream.sh FTDIR BUILDDIR}" && pwd)
builddir=$(cd "${2:?usage: nd_cluster_upstream.sh FTDIR BUILDDIR}" && pwd)
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
meet=${ND_MEET:?run by util/nd-cluster}

if ((ND_NODE != 0)); then
	deadline=$((SECONDS + ${ND_UPSTREAM_WAIT:-600}))
	until [[ -e $meet/upstream.done ]] || ((SECONDS >= deadline)); do sleep 0.5; done
	exit 0
fi
trap ': >"$meet/upstream.done"' EXIT
if ! need_tool /usr/sbin/sshd openssh-server; then
	fail "cross-node upstream fabtests: not run (sshd is missing, above)"
	exit 0
fi
out=$(mktemp)
start=$SECONDS
# nd_upstream.sh bounds each test (ND_UPSTREAM_TIMEOUT, 120 s); the whole
# run is bounded here too.
ND_UPSTREAM_REMOTE=nd-node0,nd-node1 timeout "${ND_UPSTREAM_TOTAL:-480}" \
	"$srcdir/fabtests/scripts/nd_upstream.sh" "$ftdir" "$builddir" nd 2>&1 | tee "$out" |
	sed -u 's/^FAIL: /  unexpected: /' # counted once, in the verdict below
rc=${PIPESTATUS[0]}
line=$(grep -a "^upstream: [0-9]* passed, [0-9]* failed" "$out" | tail -1)
counts=$(grep -a "^upstream(" "$out" | sed 's/^upstream(\([A-Z]*\), .*: /\1 /' | paste -sd '|' | sed 's/|/; /g')
if [ "$rc" -eq 0 ] && [ -n "$line" ]; then
	pass "cross-node upstream fabtests (nd-node0 serves, nd-node1 connects): ${line#upstream: } against upstream.expect; ${counts} ($((SECONDS - start)) s)"
else
	fail "cross-node upstream fabtests (nd-node0 serves, nd-node1 connects): ${line:-no verdict} (exit $rc, $((SECONDS - start)) s)"
fi
rm -f "$out"
