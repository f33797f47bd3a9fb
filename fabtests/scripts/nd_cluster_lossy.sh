#!/bin/bash
# nd_cluster_lossy.sh BUILDDIR FTDIR [LOSS...]: a link that loses frames, as
# RoCE without PFC meets one, on util/nd-cluster 2. For each LOSS (per cent
# of frames dropped, each way; default 0 0.1 1 5, and "1r": 1 % lost and 1 %
# of the rest reordered) both nodes' eth0 run tc netem, and node 1 runs
# fabtests/functional/nd_pair_tests (connect and accept with private data,
# messages of 1 B to 1 MiB both ways, RDMA writes and reads, a shutdown
# with receives outstanding: every byte checked) against node 0's server
# over nd, judged: every subtest passes, within the run's bound. Beside it,
# not judged, nd_perf's write_bw (64 KiB, 200 writes) and send_lat (64 B,
# 1,000 round trips) over nd and over the verbs provider on the same wire
# (nd_pair_tests opens endpoints from the listener's fi_info, which verbs
# refuses). Then what users run over that wire, node 0 starting both sides
# over ssh: libfabric's own fabtests (FTDIR, util/nd-fabtests) across the
# nodes, the data-moving set nd_upstream.sh keeps across hosts (a
# byte-verifying ping-pong and an RDMA read, MSG and RDM, and MSG's
# multi-receive buffers), over nd judged against upstream.expect, over
# verbs told (at 5 % and more over nd told too: they do not end in their
# time there, below; an RDMA read test that Soft-RoCE's own defect ends,
# the kernel saying so, is told: only_reads_flushed); and Open MPI with a rank
# on each node (nd_mpi_check: ping-pong of 1 B to 256 KiB, windows,
# collectives, every byte checked)
# over nd;ofi_rxm judged, over verbs;ofi_rxm (FI_UNIVERSE_SIZE=64, without
# which it does not start on Soft-RoCE) told. Then a link that goes down
# for 5 s mid-transfer (ip link set down/up on node 1, once nd_pair_tests'
# first subtest has passed, at 0 % loss): the run must end within its
# bound, each subtest passing or failing with an error: never a hang.
# Prints a table of the times. The nodes need 4 GiB (fabtests' bandwidth
# tests take a 1 GiB window): util/nd-check boots them with --mem 4096.
# Every program runs as the test bed's user with a site's memory-lock
# limit (nd_as_site_user; across the nodes by ssh as the user); netem and
# the link are root's.
#
# Environment:
#   ND_LOSSY_TIMEOUT  seconds one nd_pair_tests or nd_perf run may take (300)
#   ND_LOSSY_CLIENTS_TIMEOUT  seconds the fabtests, or the MPI job, of one
#                     provider may take at one loss (600)
#   ND_UPSTREAM_REMOTE  set here for nd_upstream.sh (internal):
#                     nd-node0,nd-node1
#   ND_MEET, ND_NODE  set by util/nd-cluster (internal): the nodes' shared
#                     directory, this node's number
set -u
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
builddir=$(cd "${1:?usage: nd_cluster_lossy.sh BUILDDIR FTDIR [LOSS...]}" && pwd)
ftdir=$(cd "${2:?usage: nd_cluster_lossy.sh BUILDDIR FTDIR [LOSS...]}" && pwd)
shift 2
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
(($#)) || set -- 0 0.1 1 5 1r
export FI_PROVIDER_PATH=$builddir/.libs
meet=${ND_MEET:?run by util/nd-cluster}
prog=$builddir/fabtests/functional/nd_pair_tests
limit=${ND_LOSSY_TIMEOUT:-300}
clients_limit=${ND_LOSSY_CLIENTS_TIMEOUT:-600}

# wait_for, wait_for_line
# shellcheck source=nd_cluster_wait.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/nd_cluster_wait.sh"
server=$(nd_node_ip 0)

# shape LOSS: this node's eth0 drops LOSS % of the frames it sends ("1r":
# 1 %, and 1 % of the rest held 5 ms, so that the frames after them
# overtake them: netem's "reorder 99%" sends 99 % at once). Soft-RoCE answers a frame out of order by going
# back to it (go-back-N): with a quarter of the frames 10 ms late (netem
# "delay 10ms reorder 75%") a 64 KiB write ran at 0.04 MiB/s, nd or not.
shape() {
	local args=(loss "${1%r}%")
	[[ $1 != *r ]] || args+=(delay 5ms reorder 99%)
	[[ ${1%r} != 0 ]] || args=(loss 0%)
	tc qdisc replace dev eth0 root netem "${args[@]}"
}

perf=$builddir/fabtests/benchmarks/nd_perf

# One run: node 0 serves, node 1 runs the client, both as the test bed's
# user (nd_as_site_user; the link and netem are root's); KEY names the
# meeting files. Node 1 writes "EXIT SECONDS" of the client to $meet/KEY.result.
run_pair() { # KEY flap|- SERVER-COMMAND... -- CLIENT-COMMAND...
	local key=$1 flap=$2 start rc server_cmd=() client_cmd=()
	shift 2
	while (($#)) && [[ $1 != -- ]]; do server_cmd+=("$1"); shift; done
	shift
	client_cmd=("$@")
	if ((ND_NODE == 0)); then
		nd_as_site_user timeout "$((limit + 30))" "${server_cmd[@]}" >"$meet/$key.server" 2>&1
		wait_for "$meet/$key.result" "$((limit + 60))"
		return
	fi
	if ! wait_for_line "$meet/$key.server" listening 120; then
		: >"$meet/$key.client"
		echo "noserver 0" >"$meet/$key.result"
		return
	fi
	start=$SECONDS
	if [[ $flap == flap ]]; then
		# Once the first subtest has passed: the connection is up and the
		# transfers are next (taken down earlier, fi_getinfo finds no
		# active port and the run ends before any transfer).
		(wait_for_line "$meet/$key.client" "PASS: " "$limit" &&
			ip link set eth0 down && sleep 5 && ip link set eth0 up) &
	fi
	# Line-buffered: the flap above watches the verdicts as they come.
	nd_as_site_user timeout "$limit" stdbuf -oL "${client_cmd[@]}" >"$meet/$key.client" 2>&1
	rc=$?
	wait
	echo "$rc $((SECONDS - start))" >"$meet/$key.result"
}

# perf_figure KEY: nd_perf's figure line (the last with a number).
perf_figure() { grep -E '[0-9]' "$meet/$1.client" 2>/dev/null | tail -1 | tr -s ' '; }

# only_reads_flushed FILE: every test nd_upstream.sh failed (its "FAIL:"
# lines, each followed by the test's indented output) is an RDMA read test
# whose first error was a flush, and there was at least one. Soft-RoCE's
# completer in Linux 6.1 (Debian 12) takes some sequences of reordered RDMA
# read responses for a protocol error: it ends the read in progress
# without an error status, moves the queue pair to the error state and
# flushes the rest (a kernel WARNING at rxe_comp.c, once a boot; any
# provider alike). Reordering makes such sequences, and so does a lost
# response, after which the requester reads again from it while the later
# responses still arrive. Told, not judged, where the kernel printed that
# WARNING (rxe_warned); any other failure is nd's.
only_reads_flushed() {
	awk 'function end_block() { if (name != "" && !(read && flushed)) bad = 1 }
	     /^FAIL: / { end_block(); n++; name = $0; read = / -o read /; flushed = 0; first = 1; next }
	     /^    / && first && /\[error\]/ { first = 0; flushed = /Work Request Flushed Error/ }
	     END { end_block(); exit !(n > 0 && !bad) }' "$1"
}

# rxe_comp_warning: this node's kernel printed Soft-RoCE's completer
# WARNING (rxe_comp.c) this boot. rxe_warned: this node's or node 1's
# (which node 1 notes in the shared directory while node 0 runs the
# clients), waiting a few seconds for node 1's note.
rxe_comp_warning() { dmesg 2>/dev/null | grep -q 'WARNING: .* at drivers/infiniband/sw/rxe/rxe_comp\.c'; }
rxe_warned() {
	rxe_comp_warning && return 0
	local deadline=$((SECONDS + 3))
	until [[ -e $meet/rxe-warned.1 ]]; do
		((SECONDS < deadline)) || return 1
		sleep 0.5
	done
}

# clients LOSS: fabtests across the nodes and an MPI job with a rank on
# each, over nd and over verbs (above). Node 0 starts both sides over ssh
# and prints its verdicts and lines of the table; node 1 serves ssh and
# waits until node 0 is done (bounded).
clients() {
	local loss=$1 key=lossy.$1.clients prov out rc start line
	if ((ND_NODE != 0)); then
		# This node's kernel log, for rxe_warned on node 0: noted once
		# (the WARNING is printed once a boot, and the note stays).
		(until [[ -e $meet/$key.done || -e $meet/rxe-warned.$ND_NODE ]]; do
			rxe_comp_warning && : >"$meet/rxe-warned.$ND_NODE"
			sleep 1
		done) &
		wait_for "$meet/$key.done" "$((4 * clients_limit + 60))" ||
			fail "fabtests and MPI at $loss % loss: node 0 gave no end within $((4 * clients_limit + 60)) s"
		return
	fi
	out=$(mktemp)
	# At 5 % and more the fabtests are told, not judged: Soft-RoCE goes
	# back N on each lost frame, and there fabtests' ping-pong (its sizes, up
	# to 1 MiB) and RDMA read bandwidth test each ran past their 120 s
	# over nd (nd_perf's write stream: 0.3 MiB/s), and failed over verbs.
	local judged=1
	awk -v l="${loss%r}" 'BEGIN { exit !(l >= 5) }' && judged=0
	for prov in nd verbs; do
		start=$SECONDS
		ND_UPSTREAM_REMOTE=nd-node0,nd-node1 timeout "$clients_limit" \
			"$srcdir/fabtests/scripts/nd_upstream.sh" "$ftdir" "$builddir" "$prov" >"$out" 2>&1
		rc=$?
		line=$(grep -a "^upstream(" "$out" | sed 's/^upstream(\([A-Z]*\), .*: /\1 /' | paste -sd ';')
		echo "    $loss fabtests across nodes ($prov) $((SECONDS - start)) s, exit $rc: ${line:-no counts}"
		# Each test's line ("SUITE RESULT TIME NAME", nd_upstream.sh's).
		grep -aE '^  (MSG|RDM) ' "$out" | sed 's/^/    /'
		{ [ "$prov" = nd ] && ((judged)); } || continue
		if ((rc == 0)); then
			pass "fabtests across nodes over nd, $loss % loss: $line, as upstream.expect says ($((SECONDS - start)) s)"
		elif only_reads_flushed "$out" && rxe_warned; then
			pass "fabtests across nodes over nd, $loss % loss: $line; every failure an RDMA read test whose queue pair Soft-RoCE ended (its first error a flush, and the kernel's WARNING at rxe_comp.c: its reordered-read defect, docs/faults.md), every other test as upstream.expect says ($((SECONDS - start)) s)"
			grep -a '^FAIL: ' "$out" | sed 's/^FAIL: /    told: /'
		else
			fail "fabtests across nodes over nd, $loss % loss: exit $rc ($((SECONDS - start)) s)"
			# nd_upstream.sh's verdict of each failed test, and what the
			# test printed (its indented lines after it), for the log.
			awk '/^FAIL: / { on = 1; print; next } on && /^    / { print; next } { on = 0 }' "$out" |
				head -100 | sed 's/^/    /'
		fi
	done
	for prov in "nd;ofi_rxm" "verbs;ofi_rxm"; do
		start=$SECONDS
		(
			nd_ompi_env "$prov"
			pass_on=(-x FI_PROVIDER_PATH)
			[[ $prov == nd* ]] || { export FI_UNIVERSE_SIZE=64; pass_on+=(-x FI_UNIVERSE_SIZE); }
			# As the test bed's user, as nd_cluster_mpi.sh runs it.
			nd_as_site_user timeout "$clients_limit" mpirun -np 2 -H nd-node0,nd-node1 \
				"${pass_on[@]}" "$meet/nd_mpi_check" -m 262144
		) >"$out" 2>&1
		rc=$?
		echo "    $loss nd_mpi_check across nodes ($prov) $((SECONDS - start)) s, exit $rc"
		[ "$prov" = "nd;ofi_rxm" ] || continue
		if ((rc == 0)); then
			pass "Open MPI over nd;ofi_rxm, a rank on each node, $loss % loss: nd_mpi_check, every byte checked ($((SECONDS - start)) s)"
		else
			fail "Open MPI over nd;ofi_rxm, a rank on each node, $loss % loss: exit $rc ($((SECONDS - start)) s)"
			tail -15 "$out" | sed 's/^/    /'
		fi
	done
	rm -f "$out"
	: >"$meet/$key.done"
}

# Node 0 builds the MPI program once, where node 1 finds it too; a tool
# that is missing fails the run, naming it.
if ((ND_NODE == 0)); then
	if ! need_mpi_over_ssh; then
		fail "a lossy link: fabtests and MPI across the nodes not run (a tool is missing, above)"
	elif ! mpicc -O2 -o "$meet/nd_mpi_check" "$srcdir/fabtests/functional/nd_mpi_check.c"; then
		fail "a lossy link: nd_mpi_check.c did not build"
	elif ! nd_open_to_user "$meet/nd_mpi_check"; then
		fail "a lossy link: the user cannot reach nd_mpi_check"
	fi
fi

results=()
for loss in "$@"; do
	shape "$loss" || { fail "tc netem on eth0 (loss $loss): sch_netem missing?"; exit 0; }
	key=lossy.$loss.pairs
	run_pair "$key" - "$prog" -p nd -s -a "$server" -- "$prog" -p nd -c "$server"
	if ((ND_NODE == 1)); then
		read -r rc seconds <"$meet/$key.result"
		read -r passed failed < <(counts_from_verdicts "$meet/$key.client")
		results+=("$loss nd_pair_tests(nd) $seconds s: $passed passed, $failed failed, exit $rc")
		if [[ $rc == 0 && $failed == 0 && $passed -gt 0 ]]; then
			pass "nd_pair_tests over nd, $loss % loss: $passed subtests, every byte checked, in $seconds s"
		else
			fail "nd_pair_tests over nd, $loss % loss: exit $rc, $passed passed, $failed failed, in $seconds s"
			sed 's/^/    client: /' "$meet/$key.client" 2>/dev/null | tail -20
			sed 's/^/    server: /' "$meet/$key.server" 2>/dev/null | tail -10
		fi
	fi
	for prov in nd verbs; do
		for test in "write_bw 65536 200" "send_lat 64 1000"; do
			read -r t size n <<<"$test"
			key=lossy.$loss.$prov.$t
			run_pair "$key" - "$perf" -p "$prov" -s -- "$perf" -p "$prov" -c "$server" -t "$t" -S "$size" -n "$n"
			((ND_NODE == 1)) || continue
			read -r rc seconds <"$meet/$key.result"
			results+=("$loss nd_perf $t $size ($prov) $seconds s, exit $rc: $(perf_figure "$key")")
		done
	done
	clients "$loss"
done
shape 0

# The link down for 5 s mid-transfer: the run ends within its bound.
key=lossy.flap
run_pair "$key" flap "$prog" -p nd -s -a "$server" -- "$prog" -p nd -c "$server"
if ((ND_NODE == 1)); then
	read -r rc seconds <"$meet/$key.result"
	read -r passed failed < <(counts_from_verdicts "$meet/$key.client")
	results+=("flap nd_pair_tests(nd) $seconds s: $passed passed, $failed failed, exit $rc")
	if [[ $rc == 124 || $rc == 137 ]]; then
		fail "the link down for 5 s mid-transfer: nd_pair_tests did not end within $limit s"
	elif [[ $rc == noserver ]] || ((passed + failed == 0)); then
		fail "the link down for 5 s mid-transfer: nd_pair_tests ended (exit $rc) before any transfer, not tested"
	else
		pass "the link down for 5 s mid-transfer: nd_pair_tests ended in $seconds s (exit $rc, $passed passed, $failed failed with an error)"
	fi
	sed 's/^/    client: /' "$meet/$key.client" 2>/dev/null | grep -v '^    client: PASS' | tail -12
	echo "== loss%, what ran, over what: time, outcome, figure"
	printf '    %s\n' "${results[@]}"
fi
# Soft-RoCE's own complaints, for the log: the kernel prints a driver
# WARNING once a boot (only_reads_flushed's defect is rxe_comp.c's).
dmesg 2>/dev/null | grep -o 'WARNING: .* at drivers/infiniband/sw/rxe/[^ ]*' | sed 's/^/    kernel: /'
exit 0
