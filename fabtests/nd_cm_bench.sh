#!/bin/bash
# nd_cm_bench.sh BUILDDIR [COUNTS...]: connection setup, side by side in one
# boot: rdma-core's cmtime (raw rdma_cm), libfabric's verbs provider and nd
# through the same program (nd_cm_bench), for N connections established
# concurrently. Prints one table with nd/verbs and nd/cmtime ratios.
# Run where an RDMA device exists (util/nd-bench-cm runs it in the guest).
# cmtime creates 1-deep queue pairs with one SGE; so does nd_cm_bench here
# (-Q), for the same work on both sides. ND_BENCH_CM_QUEUES=default leaves
# the providers' default queue sizes instead (what most applications get;
# queue pair creation on Soft-RoCE grows with the queue size).
set -euo pipefail
builddir=$(cd "${1:?usage: nd_cm_bench.sh BUILDDIR [COUNTS...]}" && pwd)
shift
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(1 16 64 256)
export FI_PROVIDER_PATH=$builddir/.libs
ip=${ND_GUEST_IP:-10.0.2.15}
rounds=${ND_BENCH_ROUNDS:-5}
bench=$builddir/fabtests/nd_cm_bench
qflag=(-Q)
[ "${ND_BENCH_CM_QUEUES:-small}" = default ] && qflag=()

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

printf '\nConnection setup, N concurrent connections, %s rounds (medians), one boot; %s\n' "$rounds" \
	"$([ ${#qflag[@]} -gt 0 ] && echo "queue pairs as cmtime's (1-deep, 1 SGE)" || echo "providers' default queue sizes")"
printf '%6s | %12s | %12s | %12s | %10s | %10s\n' N "cmtime c/s" "verbs c/s" "nd c/s" "nd/cmtime" "nd/verbs"
printf -- '-------+--------------+--------------+--------------+------------+-----------\n'
for n in "${counts[@]}"; do
	raw=$(for _ in $(seq 3); do cmtime_rate "$n"; done | median)
	verbs_line=$(timeout 600 "$bench" -p verbs -a "$ip" -n "$n" -r "$rounds" "${qflag[@]}" -q 2>&1 | grep "(medians)" | tail -1)
	nd_line=$(timeout 600 "$bench" -p nd -a "$ip" -n "$n" -r "$rounds" "${qflag[@]}" -q 2>&1 | grep "(medians)" | tail -1)
	verbs=$(sed -n 's/.*: \([0-9]*\) conn\/s.*/\1/p' <<<"$verbs_line")
	nd=$(sed -n 's/.*: \([0-9]*\) conn\/s.*/\1/p' <<<"$nd_line")
	ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a > 0) printf "%.2f", a / b; else print "-" }'; }
	printf '%6s | %12s | %12s | %12s | %10s | %10s\n' "$n" "${raw:-0}" "${verbs:-fail}" "${nd:-fail}" \
		"$(ratio "${nd:-0}" "${raw:-0}")" "$(ratio "${nd:-0}" "${verbs:-0}")"
	echo "        verbs: $verbs_line" >&2
	echo "        nd:    $nd_line" >&2
done
