#!/bin/bash
# nd_cluster_mpich.sh MPICH BUILDDIR [DIR...]: MPICH over "nd;ofi_rxm"
# across the nodes of util/nd-cluster N: MPICH's own test suite in the DIRs
# given (default pt2pt and coll), the tests of 2 to 4 processes with their
# ranks spread over the nodes round robin (fabtests/scripts/nd_mpich.sh
# suite, judged against fabtests/test_configs/nd/mpich.expect), with
# nothing tuned. MPICH is the folder `util/nd-mpich build` printed. Node 0
# launches over ssh and prints PASS:/FAIL: lines; the other nodes serve and
# wait.
#
# Environment:
#   ND_MPICH_WAIT   seconds the other nodes wait for node 0's run to end
#                   (3000)
#   ND_MPICH_COMPARE  1: the suite over verbs;ofi_rxm too, after nd's, and
#                   judged beside it (nd_mpich.sh compare; 0)
#   ND_MEET, ND_NODE, ND_NODES  set by util/nd-cluster (internal): the
#                   nodes' shared directory, this node's number, the node
#                   count
# and nd_mpich.sh's (ND_MPICH_TIER, ND_MPICH_TIMEOUT, ...: its --help);
# ND_MPICH_HOSTS is set here, to every node.
set -u
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
mpich=${1:?usage: nd_cluster_mpich.sh MPICH BUILDDIR [DIR...]}
builddir=${2:?usage: nd_cluster_mpich.sh MPICH BUILDDIR [DIR...]}
shift 2
(($#)) || set -- pt2pt coll
meet=${ND_MEET:?run by util/nd-cluster}

if ((ND_NODE != 0)); then
	# Bounded: node 0 writes done however its run ends.
	deadline=$((SECONDS + ${ND_MPICH_WAIT:-3000}))
	until [[ -e $meet/mpich.done ]] || ((SECONDS >= deadline)); do sleep 0.5; done
	exit 0
fi
trap ': >"$meet/mpich.done"' EXIT
if ! need_tool /usr/sbin/sshd openssh-server; then
	fail "$ND_NODES-node MPICH over nd;ofi_rxm: not run (a tool is missing, above)"
	exit 0
fi
hosts=$(for ((i = 0; i < ND_NODES; i++)); do printf 'nd-node%d,' "$i"; done)
mode=suite
[[ ${ND_MPICH_COMPARE:-0} == 1 ]] && mode=compare
ND_MPICH_HOSTS=${hosts%,} "$(dirname "$0")/nd_mpich.sh" "$mpich" "$builddir" "$mode" "nd;ofi_rxm" "$@"
