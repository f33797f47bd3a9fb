#!/bin/bash
# nd_cm_bench.sh BUILDDIR [COUNTS...]: connection setup, side by side in one
# boot: rdma-core's cmtime (raw rdma_cm), libfabric's verbs provider and nd
# through the same program (nd_cm_bench), for N connections established
# concurrently. Prints one table with nd/verbs and nd/cmtime ratios.
# Run where an RDMA device exists (util/nd-bench-cm runs it in the guest).
# cmtime creates 1-deep queue pairs with one SGE and one CQ for all of them;
# so does nd_cm_bench here (-Q), for the same verbs work on both sides.
# ND_BENCH_CM_QUEUES=default leaves the providers' default queue sizes and a
# CQ per endpoint instead (what most applications get; queue pair creation
# on Soft-RoCE grows with the queue size). cmtime's client and server are
# two processes; so are nd_cm_bench's (-2) unless ND_BENCH_CM_PROCESSES=1,
# which serves both sides from one thread.
#
# Environment:
#   ND_BENCH_ROUNDS        rounds, interleaved; the table gives medians (5)
#   ND_BENCH_CM_QUEUES     small (cmtime's queue pairs, -Q) or default (small)
#   ND_BENCH_CM_PROCESSES  2 (two processes, -2) or 1 (one thread) (2)
#   ND_GUEST_IP            the address to run on (10.0.2.15, the default of
#                          util/lib/nd-common.sh; util/nd-guest sets it)
set -euo pipefail
# nd_guest_ip
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
builddir=$(cd "${1:?usage: nd_cm_bench.sh BUILDDIR [COUNTS...]}" && pwd)
shift
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(1 16 64 256)
export FI_PROVIDER_PATH=$builddir/.libs
ip=$(nd_guest_ip)
rounds=${ND_BENCH_ROUNDS:-5}
bench=$builddir/fabtests/benchmarks/nd_cm_bench
qflag=(-Q)
[ "${ND_BENCH_CM_QUEUES:-small}" = default ] && qflag=()
pflag=(-2)
[ "${ND_BENCH_CM_PROCESSES:-2}" = 1 ] && pflag=()

# rdma_cm alone: cmtime's "connect" step (REQ to ESTABLISHED for all N),
# plus address and route resolution and QP creation, as connections/s.
cmtime_rate() {
	local n=$1 port=$((7000 + RANDOM % 20000)) out
	timeout 120 cmtime -b "$ip" -p "$port" -c "$n" </dev/null >/dev/null 2>&1 &
	local server=$!
	sleep 1
	out=$(timeout 120 cmtime -s "$ip" -p "$port" -c "$n" </dev/null 2>&1) || true
	# The cmtime server keeps listening after its client is done.
	kill "$server" 2>/dev/null || true
	wait "$server" 2>/dev/null || true
	awk -v n="$n" '/^(resolve addr|resolve route|create qp|connect) *:/ {
		split($0, f, ":"); split(f[2], v, " "); total += v[1] }
		END { if (total > 0) printf "%.0f\n", n / (total / 1000); else print 0 }' <<<"$out"
}

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.0f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf '\nConnection setup, N concurrent connections, %s interleaved rounds (medians), one boot; %s; %s\n' "$rounds" \
	"$([ ${#qflag[@]} -gt 0 ] && echo "queue pairs as cmtime's (1-deep, 1 SGE, one shared CQ)" || echo "providers' default queue sizes, a CQ per endpoint")" \
	"$([ ${#pflag[@]} -gt 0 ] && echo "client and server in two processes" || echo "client and server in one thread")"
printf '%6s | %12s | %12s | %12s | %10s | %10s\n' N "cmtime c/s" "verbs c/s" "nd c/s" "nd/cmtime" "nd/verbs"
printf -- '-------+--------------+--------------+--------------+------------+-----------\n'
# One round of nd_cm_bench; prints its connections/s, or nothing on failure.
bench_rate() {
	timeout 600 "$bench" -p "$1" -a "$ip" -n "$2" -r 1 "${qflag[@]}" "${pflag[@]}" -q 2>&1 |
		sed -n '/(medians)/s/.*: \([0-9]*\) conn\/s.*/\1/p'
}

# The rounds interleave the three (and alternate their order), so that a
# drift of the guest over the run, or the kernel state one leaves behind,
# does not fall on one of them alone.
for n in "${counts[@]}"; do
	raws=() verbss=() nds=()
	for r in $(seq "$rounds"); do
		if [ $((r % 2)) -eq 1 ]; then
			raws+=("$(cmtime_rate "$n")")
			verbss+=("$(bench_rate verbs "$n")")
			nds+=("$(bench_rate nd "$n")")
		else
			nds+=("$(bench_rate nd "$n")")
			verbss+=("$(bench_rate verbs "$n")")
			raws+=("$(cmtime_rate "$n")")
		fi
	done
	# A failed round counts as 0, so that failures pull the median down.
	raw=$(printf '%s\n' "${raws[@]}" | sed 's/^$/0/' | median)
	verbs=$(printf '%s\n' "${verbss[@]}" | sed 's/^$/0/' | median)
	nd=$(printf '%s\n' "${nds[@]}" | sed 's/^$/0/' | median)
	ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a > 0) printf "%.2f", a / b; else print "-" }'; }
	printf '%6s | %12s | %12s | %12s | %10s | %10s\n' "$n" "$raw" "$verbs" "$nd" \
		"$(ratio "$nd" "$raw")" "$(ratio "$nd" "$verbs")"
	echo "        rounds: cmtime ${raws[*]}; verbs ${verbss[*]}; nd ${nds[*]}" >&2
done
