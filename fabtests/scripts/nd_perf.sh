#!/bin/bash
# nd_perf.sh BUILDDIR: data-path latency and bandwidth, side by side in one
# boot: rdma-core's perftest on raw verbs over rdma_cm (ib_send_lat -R, ...),
# libfabric's verbs provider and nd, both through the same program
# (fabtests/benchmarks/nd_perf, which measures the way perftest does). Prints one table,
# then the CPU cost per data-path call under callgrind.
# Run where an RDMA device exists (util/nd-bench runs it in the guest).
#
# Environment:
#   ND_BENCH_ROUNDS    rounds per figure; the table shows medians (default 3)
#   ND_BENCH_SIZES     sizes in bytes, space or comma separated (default
#                      "8 64 512 4096 65536 1048576 4194304"); "full" is every
#                      power of two from 1 B to 4 MiB
#   ND_BENCH_TESTS     subset of: send_lat write_lat read_lat send_bw write_bw read_bw
#   ND_BENCH_ITERS     iterations per size (default 300), capped so that
#   ND_BENCH_MAX_BYTES size * iterations <= this (default 4 MiB, at least 8
#                      iterations); perftest gets exactly the same count
#   ND_BENCH_INLINE    inline size for every column (default: the smallest
#                      inject_size of the providers present). perftest ignores
#                      it on devices it does not know (rxe among them: "Device
#                      not recognized to implement inline feature"), the table
#                      says so when that happened.
#   ND_BENCH_BIDIR=1   bandwidth tests in both directions (perftest -b, nd_perf -b)
#   ND_BENCH_POST_LIST bandwidth tests post in lists of this many (default 1):
#                      perftest -l N chains N work requests per ibv_post_send,
#                      nd_perf -l N sets FI_MORE on all but each list's last
#                      post (a provider that ignores FI_MORE posts each alone)
#   ND_BENCH_CPU=0     skip the CPU-cost section
#   ND_PERF            the nd_perf binary (default BUILDDIR/fabtests/benchmarks/nd_perf)
#   ND_GUEST_IP        the address to run on (default 10.0.2.15,
#                      util/lib/nd-common.sh's; util/nd-guest sets it)
#
# Latency is perftest's t_typical / nd_perf's lat_med_us (median per iteration,
# round trip / 2 for send and write, one read for read); bandwidth is MiB/s.
# The ratio columns divide nd by raw and by verbs: for latency lower is better,
# for bandwidth higher is better. A provider that fails shows "fail".
#
# CPU cost: fabtests/scripts/nd_cpu.sh, run at the end (its header says how and what
# tunes it: ND_BENCH_CPU_ITERS, ND_BENCH_CPU_PROVIDERS, ND_BENCH_CPU_DIR).
set -uo pipefail
# nd_guest_ip
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
builddir=$(cd "${1:?usage: nd_perf.sh BUILDDIR}" && pwd)
export FI_PROVIDER_PATH=$builddir/.libs
ip=$(nd_guest_ip)
rounds=${ND_BENCH_ROUNDS:-3}
iters=${ND_BENCH_ITERS:-300}
max_bytes=${ND_BENCH_MAX_BYTES:-4194304}
perf=${ND_PERF:-$builddir/fabtests/benchmarks/nd_perf}
read -r -a tests <<<"${ND_BENCH_TESTS:-send_lat write_lat read_lat send_bw write_bw read_bw}"
sizes_spec=${ND_BENCH_SIZES:-8 64 512 4096 65536 1048576 4194304}
if [ "$sizes_spec" = full ]; then
	sizes=()
	for ((s = 1; s <= 4194304; s *= 2)); do sizes+=("$s"); done
else
	read -r -a sizes <<<"${sizes_spec//,/ }"
fi
sizes_csv=$(IFS=,; echo "${sizes[*]}")
bidir=${ND_BENCH_BIDIR:-0}
bflag=()
[ "$bidir" = 1 ] && bflag=(-b)
post_list=${ND_BENCH_POST_LIST:-1}
lflag=()
[ "$post_list" -gt 1 ] && lflag=(-l "$post_list")
[ -x "$perf" ] || die "$perf not built"
port=$((20000 + RANDOM % 20000))
next_port() { port=$((port + 1)); }

inject_size() { fi_info -p "$1" -t FI_EP_MSG -v 2>/dev/null | awk '/inject_size:/ { print $2; exit }'; }
if [ -z "${ND_BENCH_INLINE:-}" ]; then
	inl=
	for p in verbs nd; do
		v=$(inject_size "$p")
		[ -n "$v" ] && { [ -z "$inl" ] || [ "$v" -lt "$inl" ]; } && inl=$v
	done
	inl=${inl:-0}
else
	inl=$ND_BENCH_INLINE
fi

# Same rule as nd_perf -n ITERS -m MAX_BYTES [-l POST_LIST]: iters_for SIZE TEST.
iters_for() {
	local s=$1 n=$iters
	if ((n * s > max_bytes)); then
		n=$((max_bytes / s))
		((n < 8)) && n=8
	fi
	if ((post_list > 1)) && [[ $2 == *_bw ]]; then
		((n < post_list)) && n=$post_list
		n=$((n - n % post_list))
	fi
	echo "$n"
}

declare -A val   # "column|test|size" -> values of every round
raw_inline_note=

# perftest: one server and one client process per size, as perftest works.
raw_run() {
	local test=$1 size=$2 n out server bin metric tries
	n=$(iters_for "$size" "$test")
	bin=ib_$test
	local args=(-R -F -s "$size" -n "$n")
	[[ $test == read_* ]] || args+=(-I "$inl")
	[[ $test == *_bw ]] && args+=("${bflag[@]}" "${lflag[@]}")
	next_port
	timeout 300 "$bin" "${args[@]}" -p "$port" </dev/null >/dev/null 2>&1 &
	server=$!
	for tries in 1 2 3 4 5; do
		sleep 0.3
		out=$(timeout 300 "$bin" "${args[@]}" -p "$port" "$ip" </dev/null 2>&1) && break
		kill -0 "$server" 2>/dev/null || break
	done
	kill "$server" 2>/dev/null
	wait "$server" 2>/dev/null
	if [[ $test != read_* ]] && ((inl > 0)) && grep -q 'Max inline data *: 0\[B\]' <<<"$out"; then
		raw_inline_note="perftest disabled inline sends on this device (raw column without inline; nd_perf used $inl)"
	fi
	if [[ $test == *_lat ]]; then
		metric=$(awk -v s="$size" -v n="$n" '$1 == s && $2 == n { print $5; exit }' <<<"$out")
	else
		metric=$(awk -v s="$size" -v n="$n" '$1 == s && $2 == n { print $4; exit }' <<<"$out")
	fi
	[ -n "$metric" ] || echo "    raw $test $size: no result: $(tail -2 <<<"$out" | tr '\n' ' ')" >&2
	val["raw|$test|$size"]+="${metric:-fail} "
}

# nd_perf: one server and one client for all sizes of a test.
perf_run() {
	local prov=$1 test=$2 out server line size metric
	next_port
	timeout 600 "$perf" -p "$prov" -s -q -a "$ip" -P "$port" </dev/null >/dev/null 2>&1 &
	server=$!
	sleep 0.2
	local list=()
	[[ $test == *_bw ]] && list=("${lflag[@]}")
	out=$(timeout 600 "$perf" -p "$prov" -c "$ip" -a "$ip" -P "$port" -t "$test" "${bflag[@]}" "${list[@]}" \
		-S "$sizes_csv" -n "$iters" -m "$max_bytes" -I "$inl" -q </dev/null 2>&1)
	kill "$server" 2>/dev/null
	wait "$server" 2>/dev/null
	for size in "${sizes[@]}"; do
		line=$(grep "^nd_perf test=$test .* size=$size " <<<"$out")
		if [[ $test == *_lat ]]; then
			metric=$(sed -n 's/.* lat_med_us=\([0-9.]*\).*/\1/p' <<<"$line")
		else
			metric=$(sed -n 's/.* bw_mib_s=\([0-9.]*\).*/\1/p' <<<"$line")
		fi
		val["$prov|$test|$size"]+="${metric:-fail} "
	done
	grep -q '^nd_perf test=' <<<"$out" || echo "    $prov $test: $(grep -v '^nd_perf test=' <<<"$out" | tail -2 | tr '\n' ' ')" >&2
}

# Median of the numbers among the arguments; "fail" if there are none.
median() {
	printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -g |
		awk '{ v[NR] = $1 } END { if (!NR) print "fail"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }'; }

start=$(date +%s)
for ((r = 1; r <= rounds; r++)); do
	say "round $r of $rounds ($(($(date +%s) - start)) s)"
	for test in "${tests[@]}"; do
		for size in "${sizes[@]}"; do raw_run "$test" "$size"; done
		perf_run verbs "$test"
		perf_run nd "$test"
	done
done

printf '\nData path, medians of %s rounds, one boot; inline %s B; %s iterations per size (at most %s bytes per size, at least 8 iterations)\n' \
	"$rounds" "$inl" "$iters" "$max_bytes"
printf 'latency: median usec per iteration, nd/raw and nd/verbs LOWER is better; bandwidth: MiB/s%s, ratios HIGHER is better\n' \
	"$([ "$bidir" = 1 ] && echo ' both directions summed')"
[ "$post_list" -gt 1 ] && echo "bandwidth tests post lists of $post_list (perftest -l $post_list, nd_perf -l $post_list: FI_MORE)"
[ -n "$raw_inline_note" ] && echo "note: $raw_inline_note"
printf '%-9s | %8s | %-6s | %10s | %10s | %10s | %7s | %8s\n' test size unit raw verbs nd nd/raw nd/verbs
printf -- '----------+----------+--------+------------+------------+------------+---------+---------\n'
for test in "${tests[@]}"; do
	unit=usec
	[[ $test == *_bw ]] && unit=MiB/s
	for size in "${sizes[@]}"; do
		# shellcheck disable=SC2086
		raw=$(median ${val["raw|$test|$size"]}) verbs=$(median ${val["verbs|$test|$size"]}) nd=$(median ${val["nd|$test|$size"]})
		printf '%-9s | %8s | %-6s | %10s | %10s | %10s | %7s | %8s\n' "$test" "$size" "$unit" "$raw" "$verbs" "$nd" \
			"$(ratio "$nd" "$raw")" "$(ratio "$nd" "$verbs")"
	done
done
for k in "${!val[@]}"; do echo "    $k: ${val[$k]}"; done | sort -t'|' -k2,2 -k3,3n -k1,1 >&2
say "table done after $(($(date +%s) - start)) s"

[ "${ND_BENCH_CPU:-1}" = 1 ] || exit 0
# The CPU cost per data-path call (fabtests/scripts/nd_cpu.sh says how).
exec "$(dirname "$0")/nd_cpu.sh" "$builddir"
