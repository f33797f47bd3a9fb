#!/bin/bash
# nd_plot_check.sh: util/nd-plot on figures whose answers are known. IMB
# output of two benchmarks is read into imb.tsv lines; rounds made up so
# that nd is better, within the spread and worse give those verdicts and
# counts; the pictures are PNG files; a table of nd_perf.sh gives its two
# pictures; nd_cluster_lossy.sh's lines give its table and picture; input it
# cannot read fails with a message. Prints "PASS: ..." or
# "FAIL: ..." per check, closes with "plot: N passed, M failed" and exits
# non-zero on any failure. Runs on the host in a few seconds; needs python3
# and gnuplot (util/nd-setup installs both).
#
#   fabtests/scripts/nd_plot_check.sh [-h|--help]
#
# Environment: reads no variable of its own.
set -uo pipefail
# pass, fail, closing_line
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
PROG=nd_plot_check
top=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
plot=$top/util/nd-plot
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# expect NAME EXPECTED ACTUAL
expect() {
	if [[ $2 == "$3" ]]; then
		pass "$1"
	else
		fail "$1 (expected '$2', got '$3')"
	fi
}

# IMB-MPI1's output, as it prints it (spacing kept).
cat >"$work/imb.txt" <<'EOF'
#---------------------------------------------------
# Benchmarking PingPong 
# #processes = 2 
#---------------------------------------------------
       #bytes #repetitions      t[usec]   Mbytes/sec
            0          100        65.64         0.00
         1024          100       110.74         9.25

#---------------------------------------------------
# Benchmarking Barrier 
# #processes = 2 
#---------------------------------------------------
 #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]
          100       117.00       118.00       117.25


# All processes entering MPI_Finalize
EOF
figures=$("$plot" imb-figures openmpi "nd;ofi_rxm" 2 <"$work/imb.txt")
expect "IMB output: a figure per column that is judged" 5 "$(wc -l <<<"$figures")"
expect "IMB output: PingPong's time at 1 KiB" "openmpi	nd;ofi_rxm	2	PingPong	2	1024	usec	110.74" \
	"$(sed -n 3p <<<"$figures")"
expect "IMB output: Barrier's average at size 0" "openmpi	nd;ofi_rxm	2	Barrier	2	0	usec	117.25" \
	"$(sed -n 5p <<<"$figures")"

# Three rounds per provider. PingPong at 8 B: nd 10-12, verbs 20-22 (better);
# at 64 B: overlapping (within spread); Uniband at 8 B: nd 100-120 msg/s,
# verbs 200-220 (worse, higher is better).
mkdir -p "$work/imb"
{
	for r in 1 2 3; do
		printf 'openmpi\tnd;ofi_rxm\t%s\tPingPong\t2\t8\tusec\t%s\n' "$r" $((9 + r))
		printf 'openmpi\tverbs;ofi_rxm\t%s\tPingPong\t2\t8\tusec\t%s\n' "$r" $((19 + r))
		printf 'openmpi\tnd;ofi_rxm\t%s\tPingPong\t2\t64\tusec\t%s\n' "$r" $((20 + r))
		printf 'openmpi\tverbs;ofi_rxm\t%s\tPingPong\t2\t64\tusec\t%s\n' "$r" $((21 + r))
		printf 'openmpi\tnd;ofi_rxm\t%s\tPingPong\t2\t64\tMBps\t%s\n' "$r" $((3 + r))
		printf 'openmpi\tverbs;ofi_rxm\t%s\tPingPong\t2\t64\tMBps\t%s\n' "$r" $((3 + r))
		printf 'openmpi\tnd;ofi_rxm\t%s\tUniband\t2\t8\tmsgps\t%s\n' "$r" $((90 + 10 * r))
		printf 'openmpi\tverbs;ofi_rxm\t%s\tUniband\t2\t8\tmsgps\t%s\n' "$r" $((190 + 10 * r))
	done
} >"$work/imb/imb.tsv"
# The device counters that moved: nd's retries in rounds 1 and 3, verbs'
# duplicates in round 2 (every other run moved nothing).
printf 'openmpi\tnd;ofi_rxm\t%s\trxe0/1\tcompleter_retry_err\t%s\n' 1 30 3 2 >"$work/imb/counters.tsv"
printf 'openmpi\tverbs;ofi_rxm\t2\trxe0/1\tduplicate_request\t4\n' >>"$work/imb/counters.tsv"
if "$plot" imb --title "nd_plot_check" "$work/imb" >"$work/imb.md" 2>"$work/imb.err"; then
	pass "imb: tables and pictures made"
else
	fail "imb: exit status $? ($(head -3 "$work/imb.err"))"
fi
expect "imb: PingPong at 8 B, ranges apart" "| PingPong | 8 | µs | 11.0 (10.0-12.0) | 21.0 (20.0-22.0) | 0.52 | better |" \
	"$(grep -F '| PingPong | 8 |' "$work/imb.md")"
expect "imb: PingPong at 64 B, ranges overlap" "within spread" \
	"$(grep -F '| PingPong | 64 |' "$work/imb.md" | awk -F' [|] ' '{ print $7 }' | sed 's/ |$//')"
expect "imb: Uniband, fewer messages a second is worse" "| Uniband | msg/s | 1 | 0 | 0 | 1 | 0.52 |" \
	"$(grep -F '| Uniband | msg/s |' "$work/imb.md")"
expect "imb: PingPong's summary" "| PingPong | µs | 2 | 1 | 1 | 0 | 0.71 |" \
	"$(grep -F '| PingPong | µs |' "$work/imb.md")"
expect "imb: the counters that moved, each run" "| openmpi | \`completer_retry_err\` | 30, 0, 2 | 0, 0, 0 |" \
	"$(grep -F 'completer_retry_err' "$work/imb.md")"
expect "imb: a counter of verbs' runs" "| openmpi | \`duplicate_request\` | 0, 0, 0 | 0, 4, 0 |" \
	"$(grep -F 'duplicate_request' "$work/imb.md")"
for png in imb-openmpi-p2p.png imb-openmpi-coll.png; do
	case $png in
	*coll*) # no collective figures: no picture
		expect "imb: no $png without figures" no "$([[ -e $work/imb/$png ]] && echo yes || echo no)" ;;
	*)
		expect "imb: $png is a PNG image" "PNG" "$(head -c 4 "$work/imb/$png" 2>/dev/null | tail -c 3)" ;;
	esac
done

# A variant of nd (nd_imb.sh runs nd under other settings), "nd-slow":
# PingPong at 8 B 20-22 like verbs (within spread), its retries in round 2,
# its settings in DIR/variants; nd's own tables stay as they were.
cp -r "$work/imb" "$work/imb-variant"
for r in 1 2 3; do
	printf 'openmpi\tnd-slow;ofi_rxm\t%s\tPingPong\t2\t8\tusec\t%s\n' "$r" $((19 + r))
done >>"$work/imb-variant/imb.tsv"
printf 'openmpi\tnd-slow;ofi_rxm\t2\trxe0/1\tcompleter_retry_err\t5\n' >>"$work/imb-variant/counters.tsv"
echo "nd-slow FI_ND_ACK_TIMEOUT=19" >"$work/imb-variant/variants"
if "$plot" imb "$work/imb-variant" >"$work/imb-variant.md" 2>"$work/imb-variant.err"; then
	pass "imb: a variant's tables and pictures made"
else
	fail "imb: a variant: exit status $? ($(head -3 "$work/imb-variant.err"))"
fi
expect "imb: nd's row beside a variant" "| PingPong | 8 | µs | 11.0 (10.0-12.0) | 21.0 (20.0-22.0) | 0.52 | better |" \
	"$(grep -F '| PingPong | 8 |' "$work/imb-variant.md" | head -1)"
expect "imb: the variant's row, judged beside verbs" "| PingPong | 8 | µs | 21.0 (20.0-22.0) | 21.0 (20.0-22.0) | 1.00 | within spread |" \
	"$(sed -n '/^## openmpi, nd-slow: every size/,$p' "$work/imb-variant.md" | grep -F '| PingPong | 8 |')"
expect "imb: the variant's settings named" 1 "$(grep -c 'nd-slow: FI_ND_ACK_TIMEOUT=19' "$work/imb-variant.md")"
expect "imb: the variant's counters between nd's and verbs'" "| openmpi | \`completer_retry_err\` | 30, 0, 2 | 0, 5, 0 | 0, 0, 0 |" \
	"$(grep -F 'completer_retry_err' "$work/imb-variant.md")"

# nd_perf.sh's table.
cat >"$work/perf.log" <<'EOF'
test      |     size | unit   |        raw |      verbs |         nd |  nd/raw | nd/verbs
----------+----------+--------+------------+------------+------------+---------+---------
send_lat  |        8 | usec   |      15.45 |      29.29 |      26.23 |    1.70 |     0.90
send_lat  |     4096 | usec   |     145.90 |     180.36 |     172.74 |    1.18 |     0.96
write_bw  |        8 | MiB/s  |       0.15 |       fail |       0.11 |    0.73 |     -
write_bw  |     4096 | MiB/s  |       8.11 |       6.87 |       6.68 |    0.82 |     0.97
EOF
mkdir -p "$work/perf"
if "$plot" perf --title "nd_plot_check" "$work/perf.log" "$work/perf" >/dev/null 2>"$work/perf.err"; then
	pass "perf: pictures made"
else
	fail "perf: exit status $? ($(head -3 "$work/perf.err"))"
fi
for png in perf-latency.png perf-bandwidth.png; do
	expect "perf: $png is a PNG image" "PNG" "$(head -c 4 "$work/perf/$png" 2>/dev/null | tail -c 3)"
done

# nd_cluster_lossy.sh's lines, two runs: the second's 1 % replaces the
# first's; a run that timed out has no figure.
cat >"$work/lossy1.log" <<'EOF'
[node 1]     1 nd_perf write_bw 65536 (nd) 9 s, exit 0: nd_perf test=write_bw prov=nd size=65536 bw_mib_s=1.00 mpps=0.1
[node 0]     1 nd_mpi_check across nodes (nd;ofi_rxm) 40 s, exit 0
EOF
cat >"$work/lossy2.log" <<'EOF'
[node 1]     0 nd_perf write_bw 65536 (verbs) 4 s, exit 0: nd_perf test=write_bw prov=verbs size=65536 bw_mib_s=8.67 mpps=0.1
[node 1]     1 nd_perf write_bw 65536 (nd) 6 s, exit 0: nd_perf test=write_bw prov=nd size=65536 bw_mib_s=2.65 mpps=0.1
[node 1]     5 nd_perf write_bw 65536 (verbs) 300 s, exit 124: 
[node 1]     1r nd_perf send_lat 64 (nd) 4 s, exit 0: nd_perf test=send_lat prov=nd size=64 lat_mean_us=1097.27 lat_p99_us=2.0
[node 0]     1 nd_mpi_check across nodes (verbs;ofi_rxm) 126 s, exit 0
[node 0]     1 fabtests across nodes (nd) 404 s, exit 0: MSG 3 pass, 0 fail, 0 notrun;RDM 2 pass, 0 fail, 0 notrun
EOF
mkdir -p "$work/lossy"
if "$plot" lossy --title "nd_plot_check" "$work/lossy" "$work/lossy1.log" "$work/lossy2.log" >"$work/lossy.md" 2>"$work/lossy.err"; then
	pass "lossy: table and picture made"
else
	fail "lossy: exit status $? ($(head -3 "$work/lossy.err"))"
fi
expect "lossy: the losses in order, 1 % with reordering after 1 %" "0 %;1 %;1 % +r;5 %" \
	"$(awk -F' [|] ' '/^[|] [0-9]/ { sub(/^[|] /, "", $1); print $1 }' "$work/lossy.md" | paste -sd';')"
expect "lossy: the later run's figure, and both providers' MPI times" \
	"| 1 % | 2.65 in 6 s | not run | not run | not run | passed, 40 s | passed, 126 s | 5 of 5, 404 s | not run |" \
	"$(grep '^| 1 % |' "$work/lossy.md")"
expect "lossy: a run that timed out says so" 1 "$(grep -c '^| 5 % | not run | exit 124 after 300 s |' "$work/lossy.md")"
expect "lossy: lossy.png is a PNG image" "PNG" "$(head -c 4 "$work/lossy/lossy.png" 2>/dev/null | tail -c 3)"
if "$plot" lossy "$work/lossy" "$work/perf.log" >/dev/null 2>"$work/nolossy.err"; then
	fail "lossy: a log without its lines is refused (exit 0)"
else
	expect "lossy: a log without its lines is refused" 1 "$(grep -c 'no lines of nd_cluster_lossy.sh' "$work/nolossy.err")"
fi

# Input it cannot read.
mkdir -p "$work/bad"
printf 'openmpi\tnd;ofi_rxm\t1\tPingPong\t2\teight\tusec\t1\n' >"$work/bad/imb.tsv"
if "$plot" imb "$work/bad" >/dev/null 2>"$work/bad.err"; then
	fail "imb: a size that is not a number is refused (exit 0)"
else
	expect "imb: a size that is not a number is refused" 1 "$(grep -c 'imb.tsv:1: a size or value that is not a number' "$work/bad.err")"
fi
if "$plot" imb "$work/none" >/dev/null 2>"$work/none.err"; then
	fail "imb: a folder without imb.tsv is refused (exit 0)"
else
	expect "imb: a folder without imb.tsv is refused" 1 "$(grep -c 'imb.tsv not found' "$work/none.err")"
fi
closing_line plot
