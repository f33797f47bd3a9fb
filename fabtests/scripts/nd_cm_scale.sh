#!/bin/bash
# nd_cm_scale.sh BUILDDIR [COUNTS...]: what connections cost at scale, nd
# beside libfabric's verbs provider in one boot. For each N (default 100,
# 1000, 4000) it runs nd_cm_bench -x -O -m: N connections, both sides in
# one process at the providers' default queue depths, all 2N endpoints on
# one CQ (as ofi_rxm binds its MSG endpoints), a message each way on every
# connection; then all closed with the CQ kept open. Rounds alternate the
# providers (and their order), each round a process of its own, and the
# table gives medians: setup rate, resident memory and the part of it that
# maps device queues with the connections open (total, and per connection
# above what the process held before), descriptors, what a fi_cq_read that
# finds nothing costs with them open, and what stays after all closed.
# Run where an RDMA device exists (util/nd-guest with enough memory: 4,000
# connections take about 3 GB).
#
# Environment:
#   ND_BENCH_ROUNDS        rounds, alternating; the table gives medians (3)
#   ND_GUEST_IP            the address to run on (10.0.2.15, the default of
#                          util/lib/nd-common.sh; util/nd-guest sets it)
set -euo pipefail
# nd_guest_ip
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
builddir=$(cd "${1:?usage: nd_cm_scale.sh BUILDDIR [COUNTS...]}" && pwd)
shift
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(100 1000 4000)
export FI_PROVIDER_PATH=$builddir/.libs
ip=$(nd_guest_ip)
rounds=${ND_BENCH_ROUNDS:-3}
bench=$builddir/fabtests/benchmarks/nd_cm_bench
providers=(nd verbs)

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# One round: prints "rate before_rss open_rss open_dev open_fds closed_rss
# closed_dev closed_fds before_fds before_dev read_ns", or nothing when it
# failed.
one_round() {
	local out
	out=$(timeout 900 "$bench" -p "$1" -a "$ip" -n "$2" -r 1 -x -O -m -q 2>&1) || {
		echo "nd_cm_scale: $1 n=$2 failed:" >&2
		tail -n 5 <<<"$out" | sed 's/^/  | /' >&2
		return 0
	}
	local rate read_ns
	rate=$(sed -n '/(medians)/s/.*: \([0-9]*\) conn\/s.*/\1/p' <<<"$out")
	read_ns=$(sed -n '/^empty read:/s/.* \([0-9.]*\) ns per.*/\1/p' <<<"$out" | tail -n 1)
	# The footprint of the measured round is the last one printed (the
	# warm-up round of one connection prints first).
	grep '^footprint:' <<<"$out" | tail -n 1 | awk -v rate="$rate" -v read_ns="${read_ns:--}" '{
		for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[2] != "") v[phase "_" kv[1]] = kv[2]; if ($i ~ /^(before|open|closed)$/) phase = $i }
		print rate, v["before_rss"], v["open_rss"], v["open_dev"], v["open_fds"], v["closed_rss"], v["closed_dev"], v["closed_fds"], v["before_fds"], v["before_dev"], read_ns }'
}

printf '\nConnections at scale: N connections in one process (2N endpoints, one CQ, default depths, a message each way), %s alternating rounds (medians), one boot\n' "$rounds"
printf '%5s | %-5s | %7s | %9s | %9s | %9s | %5s | %7s | %9s | %10s | %10s | %10s\n' N prov "conn/s" "RSS MB" "KiB/conn" "dev MB" "fds" "read ns" "after MB" "kept MB" "dev kept" "fds kept"
# RSS: every mapping's resident pages (smaps) with the connections open;
# KiB/conn: what that grew by over the round, per connection; dev: the
# part mapping device queues; fds: descriptors more than before the
# round; read ns: a fi_cq_read that finds nothing, with them open; after: the RSS once all closed; kept: that, above what was held
# before the round.
printf -- '------+-------+---------+-----------+-----------+-----------+-------+---------+-----------+------------+------------+-----------\n'
declare -A med
for n in "${counts[@]}"; do
	declare -A samples=()
	for r in $(seq "$rounds"); do
		order=("${providers[@]}")
		[ $((r % 2)) -eq 0 ] && order=(verbs nd)
		for p in "${order[@]}"; do
			line=$(one_round "$p" "$n")
			[ -n "$line" ] || continue
			read -r rate brss orss odev ofds crss cdev cfds bfds bdev read_ns <<<"$line"
			div() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a / b }'; }
			samples[$p,rate]+="$rate "
			samples[$p,rss]+="$((orss / 1024)) "
			samples[$p,per]+="$(div $((orss - brss)) "$n") "
			samples[$p,dev]+="$((odev / 1024)) "
			samples[$p,fds]+="$((ofds - bfds)) "
			[ "$read_ns" = - ] || samples[$p,read]+="$read_ns "
			samples[$p,kept]+="$(div $((crss - brss)) 1024) "
			samples[$p,after]+="$(div "$crss" 1024) "
			samples[$p,devkept]+="$(div $((cdev - bdev)) 1024) "
			samples[$p,fdskept]+="$((cfds - bfds)) "
			echo "  round $r $p n=$n: $rate conn/s, RSS $brss -> $orss -> $crss KiB, device $bdev -> $odev -> $cdev KiB, fds $bfds -> $ofds -> $cfds, empty read $read_ns ns" >&2
		done
	done
	for p in "${providers[@]}"; do
		for k in rate rss per dev fds read after kept devkept fdskept; do
			med[$n,$p,$k]=$(tr ' ' '\n' <<<"${samples[$p,$k]:-}" | sed '/^$/d' | median)
		done
		printf '%5s | %-5s | %7s | %9s | %9s | %9s | %5s | %7s | %9s | %10s | %10s | %10s\n' "$n" "$p" \
			"${med[$n,$p,rate]}" "${med[$n,$p,rss]}" "${med[$n,$p,per]}" "${med[$n,$p,dev]}" \
			"${med[$n,$p,fds]}" "${med[$n,$p,read]}" "${med[$n,$p,after]}" "${med[$n,$p,kept]}" "${med[$n,$p,devkept]}" "${med[$n,$p,fdskept]}"
	done
	ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^-?[0-9.]+$/ && b ~ /^-?[0-9.]+$/ && b > 0) printf "%.2f", a / b; else print "-" }'; }
	printf '%5s | %-5s | %7s | %9s | %9s | %9s | %5s | %7s | %9s | %10s | %10s | %10s\n' "$n" "nd/vb" \
		"$(ratio "${med[$n,nd,rate]}" "${med[$n,verbs,rate]}")" "$(ratio "${med[$n,nd,rss]}" "${med[$n,verbs,rss]}")" \
		"$(ratio "${med[$n,nd,per]}" "${med[$n,verbs,per]}")" "$(ratio "${med[$n,nd,dev]}" "${med[$n,verbs,dev]}")" \
		"" "$(ratio "${med[$n,nd,read]}" "${med[$n,verbs,read]}")" "$(ratio "${med[$n,nd,after]}" "${med[$n,verbs,after]}")" "$(ratio "${med[$n,nd,kept]}" "${med[$n,verbs,kept]}")" "" ""
	unset samples
done
