#!/bin/bash
# nd_cluster_mpi.sh BUILDDIR: Open MPI over "nd;ofi_rxm" with one rank on
# each node of util/nd-cluster N (util/nd-check's cross-node stage runs it on
# 4): fabtests/functional/nd_mpi_check across the wire, ping-pong between every pair
# (1 B to 256 KiB), windows, allreduce, alltoall and a barrier loop, every
# byte checked; with default settings (no FI_UNIVERSE_SIZE). Node 0
# launches over ssh and prints PASS:/FAIL:; the other nodes serve and wait.
# In the guests mpirun and every rank run as the test bed's user
# (nd_as_site_user; util/guest/cluster-node lets the user log in to the
# nodes), as a cluster's users run them.
#
# Environment:
#   ND_MPI_TIMEOUT  seconds the MPI job may take (300)
#   ND_MPI_WAIT     seconds the other nodes wait for node 0's job to end (400)
#   ND_MEET, ND_NODE, ND_NODES  set by util/nd-cluster (internal): the
#                   nodes' shared directory, this node's number, the node
#                   count
set -u
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
builddir=$(cd "${1:?usage: nd_cluster_mpi.sh BUILDDIR}" && pwd)
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
export FI_PROVIDER_PATH=$builddir/.libs
meet=${ND_MEET:?run by util/nd-cluster}

if ((ND_NODE != 0)); then
	# Bounded: node 0 writes done however its run ends.
	deadline=$((SECONDS + ${ND_MPI_WAIT:-400}))
	until [[ -e $meet/mpi.done ]] || ((SECONDS >= deadline)); do sleep 0.5; done
	exit 0
fi
trap ': >"$meet/mpi.done"' EXIT
# A missing tool fails the check, naming it.
if ! need_mpi_over_ssh; then
	fail "$ND_NODES-node MPI over nd;ofi_rxm: not run (a tool is missing, above)"
	exit 0
fi
if ! mpicc -O2 -o "$meet/nd_mpi_check" "$srcdir/fabtests/functional/nd_mpi_check.c"; then
	fail "$ND_NODES-node MPI: nd_mpi_check.c did not build"
	exit 0
fi
nd_open_to_user "$meet/nd_mpi_check" || { fail "$ND_NODES-node MPI: the user cannot reach nd_mpi_check"; exit 0; }
hosts=$(for ((i = 0; i < ND_NODES; i++)); do printf 'nd-node%d,' "$i"; done)
nd_ompi_env "nd;ofi_rxm"
start=$SECONDS
if nd_as_site_user timeout "${ND_MPI_TIMEOUT:-300}" mpirun -np "$ND_NODES" -H "${hosts%,}" \
	-x FI_PROVIDER_PATH "$meet/nd_mpi_check" -m 262144; then
	pass "$ND_NODES-node MPI over nd;ofi_rxm: nd_mpi_check, one rank per node ($((SECONDS - start)) s)"
else
	fail "$ND_NODES-node MPI over nd;ofi_rxm: nd_mpi_check, one rank per node ($((SECONDS - start)) s)"
fi
