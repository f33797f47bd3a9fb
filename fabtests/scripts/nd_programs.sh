#!/bin/bash
# nd_programs.sh BUILDDIR PROVIDER: runs the data-path conformance programs
# against PROVIDER (nd, verbs, ...) where a real RDMA device exists (inside
# util/nd-guest, or on a host with an RDMA NIC):
#
#   - every subtest of nd_msg_tests -p PROVIDER, each as its own process;
#   - nd_rdm_tests -p "PROVIDER;ofi_rxm", without and with
#     FI_OFI_RXM_USE_SRX=1;
#   - for nd, nd_pair_tests with its server and client in two processes on
#     this host's address ($ND_GUEST_IP, default util/lib/nd-common.sh's): the program
#     nd-check's cross-node stage runs with the two on two nodes.
#
# Each run has a timeout (ND_FT_TIMEOUT seconds, default 60). Prints the
# PASS/FAIL/SKIP lines of the programs, the output of failed runs, and a
# closing line "programs(PROVIDER): N passed, M failed"; exits non-zero when
# any failed. FI_PROVIDER_PATH is set to BUILDDIR/.libs; the programs are
# taken from BUILDDIR/fabtests/functional, or from $ND_FT_BINDIR when set.
#
#   util/nd-guest -- fabtests/scripts/nd_programs.sh build/release nd
#
# Environment:
#   ND_FT_TIMEOUT  seconds each program run may take (60)
#   ND_FT_BINDIR   where the programs are taken from
#                  (BUILDDIR/fabtests/functional)
#   ND_GUEST_IP    this host's address, for nd_pair_tests' server and
#                  client (10.0.2.15; util/nd-guest sets it)
set -uo pipefail
# nd_guest_ip
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac

builddir=$(cd "${1:?usage: nd_programs.sh BUILDDIR PROVIDER}" && pwd)
prov=${2:?usage: nd_programs.sh BUILDDIR PROVIDER}
bindir=${ND_FT_BINDIR:-$builddir/fabtests/functional}
limit=${ND_FT_TIMEOUT:-60}
export FI_PROVIDER_PATH=$builddir/.libs
logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT

passed=0
failed=0
skipped=0

# run NAME COMMAND...: one program run. Its PASS/FAIL/SKIP lines are
# counted; a run that exits non-zero (or times out) without a FAIL line
# counts as one failure. The whole output is shown when it fails.
run() {
	local name=$1
	shift
	local log="$logdir/run.log" rc start=$SECONDS
	timeout "$limit" "$@" >"$log" 2>&1
	rc=$?
	local p f s
	p=$(grep -c '^PASS: ' "$log")
	f=$(grep -c '^FAIL: ' "$log")
	s=$(grep -c '^SKIP: ' "$log")
	grep -E '^(PASS|FAIL|SKIP): ' "$log" | sed -E "s#^(PASS|FAIL|SKIP): #\1: $name: #"
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		if [ "$rc" -eq 124 ]; then
			echo "FAIL: $name: timed out after ${limit}s"
		else
			echo "FAIL: $name: exit status $rc"
		fi
		f=1
	elif [ "$rc" -eq 0 ] && [ "$p" -eq 0 ] && [ "$s" -eq 0 ]; then
		echo "FAIL: $name: exited 0 without any PASS line"
		f=1
	fi
	if [ "$f" -gt 0 ]; then
		echo "    --- output of $* (exit $rc, $((SECONDS - start))s) ---"
		sed 's/^/    /' "$log" | tail -60
	fi
	passed=$((passed + p))
	failed=$((failed + f))
	skipped=$((skipped + s))
}

msg=$bindir/nd_msg_tests
rdm=$bindir/nd_rdm_tests
pair=$bindir/nd_pair_tests
for bin in "$msg" "$rdm" "$pair"; do
	if [ ! -x "$bin" ]; then
		echo "FAIL: $bin not built"
		failed=$((failed + 1))
	fi
done

echo "== nd test programs for $prov ($(uname -r))"
if [ -x "$msg" ]; then
	subtests=$("$msg" -h 2>&1 | sed -n 's/^subtests: *//p')
	if [ -z "$subtests" ]; then
		echo "FAIL: nd_msg_tests lists no subtests"
		failed=$((failed + 1))
	fi
	for t in $subtests; do
		run "msg" "$msg" -p "$prov" -t "$t"
	done
fi
if [ -x "$rdm" ]; then
	run "rdm" env -u FI_OFI_RXM_USE_SRX "$rdm" -p "$prov;ofi_rxm"
	run "rdm-srx" env FI_OFI_RXM_USE_SRX=1 "$rdm" -p "$prov;ofi_rxm"
fi

# Server in the background (it stops at the client's closing request, or
# after 120 s without one), the client in front; the server's own FAIL:
# lines join the client's. nd only: the subtests try nd's limits of
# accept and reject data.
if [ -x "$pair" ] && [ "$prov" = nd ]; then
	run "pair" bash -c '
		out=$(mktemp)
		"$1" -p nd -s -a "$2" >"$out" 2>&1 &
		server=$!
		for _ in $(seq 100); do grep -q listening "$out" && break; sleep 0.1; done
		"$1" -p nd -c "$2"
		rc=$?
		wait "$server" || rc=1
		grep -v "^server ok" "$out"
		rm -f "$out"
		exit "$rc"' _ "$pair" "$(nd_guest_ip)"
fi

[ "$skipped" -eq 0 ] || echo "($skipped checks skipped)"
echo "programs($prov): $passed passed, $failed failed"
[ "$failed" -eq 0 ]
