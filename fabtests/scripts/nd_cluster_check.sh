#!/bin/bash
# nd_cluster_check.sh BUILDDIR: the cross-node checks, run on both nodes of
# util/nd-cluster 2 (util/nd-check's cross-node stage). Node 0 serves, node 1
# connects, over the virtual wire between two guests:
#   - fabtests/benchmarks/nd_perf send_lat and write_bw with nd and with the verbs
#     provider beside it (figures printed; a failed run fails the check);
#   - Open MPI over "nd;ofi_rxm" across the two nodes, launched by mpirun
#     over ssh: latency, rendezvous-size bandwidth and allreduce, every
#     transfer's bytes checked (fabtests/benchmarks/nd_mpi_bench.c).
# Each check prints PASS: or FAIL: on node 1 (nd_perf) or node 0 (MPI), and
# every wait is bounded. In the guests the programs, mpirun and the ranks
# run as the test bed's user (nd_as_site_user).
#
#   util/nd-cluster 2 -- fabtests/scripts/nd_cluster_check.sh build/release
#
# Environment:
#   ND_MEET, ND_NODE  set by util/nd-cluster (internal): the nodes' shared
#                     directory, this node's number
set -u
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
builddir=$(cd "${1:?usage: nd_cluster_check.sh BUILDDIR}" && pwd)
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
export FI_PROVIDER_PATH=$builddir/.libs
meet=${ND_MEET:?run by util/nd-cluster}
perf=$builddir/fabtests/benchmarks/nd_perf

# wait_for, wait_for_line
# shellcheck source=nd_cluster_wait.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/nd_cluster_wait.sh"
server=$(nd_node_ip 0)

perf_pair() { # INDEX PROVIDER TEST SIZES
	local k=$1 prov=$2 test=$3 sizes=$4
	if ((ND_NODE == 0)); then
		nd_as_site_user timeout 120 "$perf" -p "$prov" -s -t "$test" -S "$sizes" -n 100 -q >"$meet/perf.$k.server" 2>&1 &
		local pid=$!
		# nd_perf says when it listens.
		local deadline=$((SECONDS + 30))
		until grep -q listening "$meet/perf.$k.server" 2>/dev/null || ((SECONDS >= deadline)); do sleep 0.1; done
		: >"$meet/perf.$k.up"
		wait "$pid"
		echo $? >"$meet/perf.$k.server.status"
	else
		local name="cross-node nd_perf $test ($prov)"
		if ! wait_for "$meet/perf.$k.up" 60; then
			fail "$name: the server on node 0 did not start"
			return
		fi
		if nd_as_site_user timeout 120 "$perf" -p "$prov" -c "$server" -t "$test" -S "$sizes" -n 100 -q; then
			pass "$name"
		else
			fail "$name"
			sed 's/^/    server: /' "$meet/perf.$k.server"
		fi
	fi
}

perf_pair 1 nd send_lat 64,4096
perf_pair 2 verbs send_lat 64,4096
perf_pair 3 nd write_bw 65536
perf_pair 4 verbs write_bw 65536

# Open MPI across the nodes, from node 0 (node 1 serves it through sshd).
if ((ND_NODE == 0)); then
	# A missing tool fails the check, naming it.
	if ! need_mpi_over_ssh; then
		fail "cross-node MPI over nd;ofi_rxm: not run (a tool is missing, above)"
	elif ! mpicc -O2 -o "$meet/nd_mpi_bench" "$srcdir/fabtests/benchmarks/nd_mpi_bench.c"; then
		fail "cross-node MPI: nd_mpi_bench.c did not build"
	elif ! nd_open_to_user "$meet/nd_mpi_bench"; then
		fail "cross-node MPI: the user cannot reach nd_mpi_bench"
	else
		nd_ompi_env "nd;ofi_rxm"
		for args in "-t lat -s 8" "-t bw -s 262144 -n 4" "-t allreduce -s 4096 -n 20"; do
			# shellcheck disable=SC2086 # the arguments are words
			# As the test bed's user, as nd_cluster_mpi.sh runs it.
			if nd_as_site_user timeout 180 mpirun -np 2 -H nd-node0,nd-node1 \
				-x FI_PROVIDER_PATH "$meet/nd_mpi_bench" $args; then
				pass "cross-node MPI over nd;ofi_rxm: nd_mpi_bench $args"
			else
				fail "cross-node MPI over nd;ofi_rxm: nd_mpi_bench $args"
			fi
		done
	fi
fi
exit 0
