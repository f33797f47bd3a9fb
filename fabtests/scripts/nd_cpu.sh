#!/bin/bash
# nd_cpu.sh BUILDDIR [--budget FILE]: the CPU cost of each data-path call,
# instructions per call under callgrind (user space only, 8-byte messages),
# for libfabric's verbs provider and nd side by side in one boot. Run where
# an RDMA device exists (util/nd-bench and util/nd-check's cpu stage run it
# in the guest; on soft-iWARP, ND_GUEST_TRANSPORT=iwarp, it measures every
# row again for an endpoint with receive credits, which keeps them on
# every call: its CQ reads, of fi_inject's traffic and of fi_send's, since
# the verbs provider there injects no more than 2 bytes and its reads of
# the first are of send completions too; and its posts, fi_recv's with
# the credit write that tells the peer of the receive). On Soft-RoCE it also
# measures fi_inject, fi_send and fi_recv with ofi_rxm's flow control on
# (nd_perf -F: the calls rxm makes under MPI, on both providers, which
# both offer it), where libfabric is 1.x: 2.x's rxm marks its credit
# messages with a flag nd cannot see, and nd offers no flow control there.
#
# With --budget FILE, nd's figures are held to FILE (fabtests/test_configs/nd/cpu-budget):
# one line per row, "ROW PROVIDER OTHER", and the script prints a PASS:
# or FAIL: line per row and budget, closes with "cpu: N passed, M failed",
# and exits non-zero on any FAIL. Rows of
# another transport than the one measured, or left out by
# ND_BENCH_CPU_ROWS, are not judged here.
#
# Environment:
#   ND_BENCH_CPU_ITERS      iterations per row (default 200)
#   ND_BENCH_CPU_PROVIDERS  providers measured (default "verbs nd")
#   ND_BENCH_CPU_ROWS       only these rows (keys: inject inject_write cq_read
#                           send write read recv flow_inject flow_send
#                           flow_recv; on iWARP iwarp_cq_read,
#                           iwarp_cq_read_send and iwarp_ before the
#                           others)
#   ND_BENCH_CPU_DIR        keep the callgrind files here (default: a
#                           temporary folder, removed)
#   ND_PERF                 the nd_perf binary (default BUILDDIR/fabtests/benchmarks/nd_perf)
#   ND_GUEST_TRANSPORT      roce or iwarp: which transport's rows are measured
#                           and judged (default roce; util/nd-guest sets it)
#   ND_TEST_DEVICE          a device named siw* means iwarp too
#   ND_GUEST_IP             the address to run on (default 10.0.2.15,
#                           util/lib/nd-common.sh's; util/nd-guest sets it)
#
# How (fabtests/benchmarks/nd_perf.c -C): nd_perf routes every data-path call through
# functions that are never inlined: perf_send (fi_inject, fi_send,
# fi_sendmsg), perf_write (fi_inject_write, fi_write, fi_writemsg),
# perf_read, perf_recv and perf_cq_read (fi_cq_read). For each row the
# client runs under
#   valgrind --tool=callgrind --toggle-collect=FUNCTION
# so callgrind counts instructions (Ir) only while inside FUNCTION, in
# every shared object. The script sums the self cost of every function per
# object straight from the callgrind.out file and divides by the calls
# nd_perf counted:
#   provider = libnd-fi.so for nd; libfabric.so for verbs (the verbs
#              provider is built into Debian's libfabric.so)
#   driver   = libibverbs.so and the rdma-core user-space driver
#              (librxe-rdmav34.so on Soft-RoCE, libsiw-rdmav34.so on
#              soft-iWARP)
#   other    = libc, libstdc++, the wrapper itself (a few instructions)
# Kernel instructions are not visible to valgrind. fi_cq_read is split in
# two: the client first polls its empty receive CQ 1000 times in
# perf_cq_calibrate() (separated with --dump-after, file .1), which gives
# an empty read's cost; a read that returns completions costs (total -
# empty reads x empty cost) / reads that returned something. Every row
# counts from the connection's first call, so what a connection pays once
# (a ring that grows) is spread over the iterations. Ir counts are
# deterministic for a given path. Each row is one valgrind run of the
# client (15-30 s in the emulated guest).
set -uo pipefail
# nd_guest_ip
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
builddir=$(cd "${1:?usage: nd_cpu.sh BUILDDIR [--budget FILE]}" && pwd)
shift
budget=
if [ "${1:-}" = --budget ]; then
	budget=$(cd "$(dirname "${2:?--budget FILE}")" && pwd)/$(basename "$2")
	[ -f "$budget" ] || { echo "nd_cpu.sh: no budget file $2" >&2; exit 2; }
fi
export FI_PROVIDER_PATH=$builddir/.libs
ip=$(nd_guest_ip)
perf=${ND_PERF:-$builddir/fabtests/benchmarks/nd_perf}
[ -x "$perf" ] || die "$perf not built"
command -v valgrind >/dev/null || die "valgrind is not installed"
cpu_iters=${ND_BENCH_CPU_ITERS:-200}
read -r -a providers <<<"${ND_BENCH_CPU_PROVIDERS:-verbs nd}"
transport=${ND_GUEST_TRANSPORT:-roce}
[[ ${ND_TEST_DEVICE:-} == siw* ]] && transport=iwarp
if [ -n "${ND_BENCH_CPU_DIR:-}" ]; then
	cgdir=$ND_BENCH_CPU_DIR
	mkdir -p "$cgdir"
else
	cgdir=$(mktemp -d /tmp/nd_cpu.XXXXXX)
	trap 'rm -rf "$cgdir"' EXIT
fi
port=$((20000 + RANDOM % 20000))

# Self Ir per object class in a callgrind.out file: "provider driver other".
# Cost lines after a calls= line are inclusive costs of that call: skipped.
object_costs() {
	local file=$1 provobj=$2
	awk -v prov="$provobj" '
		function name(s,   id, rest) {
			if (match(s, /^\([0-9]+\)/)) {
				id = substr(s, 1, RLENGTH); rest = substr(s, RLENGTH + 2)
				if (rest != "") names[id] = rest
				return names[id]
			}
			return s
		}
		/^ob=/ { ob = name(substr($0, 4)); next }
		/^cob=/ { name(substr($0, 5)); next }
		/^calls=/ { skip = 1; next }
		/^[0-9+*-]/ {
			if (skip) { skip = 0; next }
			if (ob ~ prov) p += $NF
			else if (ob ~ /libibverbs|librxe|libsiw|rdmav[0-9]*\.so/) d += $NF
			else o += $NF
			next
		}
		END { printf "%d %d %d\n", p, d, o }' "$file"
}

# One callgrind run of the client; the server runs natively.
cg_run() { # PROVIDER TEST FUNCTION EXTRA
	local prov=$1 test=$2 fn=$3 extra=$4 out server
	port=$((port + 1))
	timeout 300 "$perf" -p "$prov" -s -a "$ip" -P "$port" </dev/null >"$cgdir/server.out" 2>&1 &
	server=$!
	# Until it listens (the client retries a refused connect for 10 s
	# only, and a guest whose CPUs other guests share starts it slowly),
	# at most 60 s.
	for _ in $(seq 600); do
		grep -q 'listening' "$cgdir/server.out" 2>/dev/null || ! kill -0 "$server" 2>/dev/null && break
		sleep 0.1
	done
	# shellcheck disable=SC2086
	out=$(timeout 600 valgrind --tool=callgrind --callgrind-out-file="$cgdir/$prov.$test.$fn$extra" \
		--toggle-collect="$fn" --dump-after=perf_cq_calibrate --instr-atstart=no \
		"$perf" -p "$prov" -c "$ip" -a "$ip" -P "$port" -t "$test" -S 8 -n "$cpu_iters" -C $extra \
		</dev/null 2>&1)
	kill "$server" 2>/dev/null
	wait "$server" 2>/dev/null
	echo "$out" >"$cgdir/$prov.$test.$fn$extra.log"
	grep -q '^nd_perf_calls' <<<"$out"
}

field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$2" | head -1; }
per() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.0f", a / b; else print "-" }'; }

declare -A measured # "prov|row" -> "provider other"
row_line() { # PROV ROW LABEL CALLS PROVIDER DRIVER OTHER
	printf '%-6s | %-40s | %8s | %9s | %8s | %8s\n' "$1" "$3" "$4" "$5" "$6" "$7"
	measured["$1|$2"]="$5 $7"
	echo "nd_cpu prov=$1 transport=$transport row=$2 calls=$4 provider=$5 driver=$6 other=$7" >&2
}

# KEY|LABEL|TEST|WRAPPER|COUNTER|nd_perf ARGUMENTS. perf_cq_read rows make
# two: KEY_empty and KEY_hit.
if [ "$transport" = iwarp ]; then
	rows=(
		"iwarp_cq_read|fi_cq_read, iWARP with credits|send_lat|perf_cq_read|cq_read|"
		"iwarp_cq_read_send|fi_cq_read, iWARP with credits, fi_send|send_lat|perf_cq_read|cq_read|-I 0"
		"iwarp_inject|fi_inject, iWARP with credits|send_lat|perf_send|send|"
		"iwarp_inject_write|fi_inject_write, iWARP with credits|write_lat|perf_write|write|"
		"iwarp_send|fi_send, iWARP with credits|send_lat|perf_send|send|-I 0"
		"iwarp_write|fi_write, iWARP with credits|write_lat|perf_write|write|-I 0"
		"iwarp_read|fi_read, iWARP with credits|read_lat|perf_read|read|"
		"iwarp_recv|fi_recv, iWARP with credits|send_lat|perf_recv|recv|"
	)
else
	rows=(
		"inject|fi_inject (send_lat 8 B)|send_lat|perf_send|send|"
		"inject_write|fi_inject_write (write_lat 8 B)|write_lat|perf_write|write|"
		"cq_read|fi_cq_read (send_lat)|send_lat|perf_cq_read|cq_read|"
		"send|fi_send, descriptor (send_lat -I 0)|send_lat|perf_send|send|-I 0"
		"write|fi_write, descriptor (write_lat -I 0)|write_lat|perf_write|write|-I 0"
		"read|fi_read, descriptor (read_lat)|read_lat|perf_read|read|"
		"recv|fi_recv, descriptor (send_lat)|send_lat|perf_recv|recv|"
	)
	if fi_info --version 2>/dev/null | grep -q '^libfabric: 1\.'; then
		rows+=(
			"flow_inject|fi_inject, ofi_rxm's flow control|send_lat|perf_send|send|-F"
			"flow_send|fi_send, descriptor, flow control|send_lat|perf_send|send|-I 0 -F"
			"flow_recv|fi_recv, descriptor, flow control|send_lat|perf_recv|recv|-F"
		)
	fi
fi

printf '\nCPU cost (%s): instructions per call under callgrind (user space only), 8-byte messages, %s iterations\n' \
	"$transport" "$cpu_iters"
printf 'provider = libnd-fi.so (nd) or libfabric.so (verbs); driver = libibverbs + the rdma-core driver; other = libc, wrapper\n'
printf '%-6s | %-40s | %8s | %9s | %8s | %8s\n' prov call calls provider driver other
printf -- '-------+------------------------------------------+----------+-----------+----------+---------\n'
for prov in "${providers[@]}"; do
	provobj='libfabric\\.so'
	[ "$prov" = nd ] && provobj='libnd-fi\\.so'
	for spec in "${rows[@]}"; do
		IFS='|' read -r key label test fn counter extra <<<"$spec"
		[[ -z ${ND_BENCH_CPU_ROWS:-} || " $ND_BENCH_CPU_ROWS " == *" $key "* ]] || continue
		file=$cgdir/$prov.$test.$fn$extra
		if ! cg_run "$prov" "$test" "$fn" "$extra"; then
			printf '%-6s | %-40s | %8s | %9s | %8s | %8s\n' "$prov" "$label" fail fail fail fail
			echo "    $prov $label: $(grep -v '^==' "$file.log" | tail -3 | tr '\n' ' ')" >&2
			continue
		fi
		log=$(grep '^nd_perf_calls' "$file.log")
		read -r p d o < <(object_costs "$file" "$provobj")
		if [ "$fn" != perf_cq_read ]; then
			n=$(field "$counter" "$log")
			row_line "$prov" "$key" "$label" "$n" "$(per "$p" "$n")" "$(per "$d" "$n")" "$(per "$o" "$n")"
			continue
		fi
		# Empty polls from the calibration dump, then polls that found something.
		read -r cp cd co < <(object_costs "$file.1" "$provobj")
		cal=$(sed -n 's/.* cq_read=\([0-9]*\).*/\1/p' "$file.log" | head -1)
		row_line "$prov" "${key}_empty" "${label}: empty CQ" "$cal" \
			"$(per "$cp" "$cal")" "$(per "$cd" "$cal")" "$(per "$co" "$cal")"
		total=$(field cq_read "$log") empty=$(field cq_read_empty "$log") entries=$(field cq_entries "$log")
		hits=$((total - empty))
		sub() { awk -v t="$1" -v c="$2" -v e="$empty" -v n="$3" 'BEGIN { if (n > 0) printf "%.0f", (t - e * c / n) ; else print 0 }'; }
		row_line "$prov" "${key}_hit" "${label}: $entries completions" "$hits" \
			"$(per "$(sub "$p" "$cp" "$cal")" "$hits")" "$(per "$(sub "$d" "$cd" "$cal")" "$hits")" \
			"$(per "$(sub "$o" "$co" "$cal")" "$hits")"
	done
done
[ -n "${ND_BENCH_CPU_DIR:-}" ] && echo "(callgrind files: $cgdir)"

[ -n "$budget" ] || exit 0
# The budget: nd's provider and other columns, row by row.
status=0 passed=0 failed=0
while read -r row max_provider max_other _; do
	[[ -z $row || $row == \#* ]] && continue
	row_transport=roce
	[[ $row == iwarp_* ]] && row_transport=iwarp
	[ "$row_transport" = "$transport" ] || continue
	# Flow control's rows where nd offers it (libfabric 1.x, above).
	[[ $row != flow_* ]] || printf '%s\n' "${rows[@]}" | grep -q "^$row|" || continue
	if [ -n "${ND_BENCH_CPU_ROWS:-}" ]; then
		key=${row%_empty}
		key=${key%_hit}
		[[ " $ND_BENCH_CPU_ROWS " == *" $key "* ]] || continue
	fi
	got=${measured["nd|$row"]:-}
	if [ -z "$got" ]; then
		echo "FAIL: cpu budget $row: not measured"
		status=1 failed=$((failed + 1))
		continue
	fi
	read -r provider other <<<"$got"
	if [[ $provider =~ ^[0-9]+$ && $other =~ ^[0-9]+$ ]] && ((provider <= max_provider && other <= max_other)); then
		echo "PASS: cpu budget $row: provider $provider <= $max_provider, other $other <= $max_other"
		passed=$((passed + 1))
	else
		echo "FAIL: cpu budget $row: provider $provider (budget $max_provider), other $other (budget $max_other)"
		status=1 failed=$((failed + 1))
	fi
done <"$budget"
echo "cpu: $passed passed, $failed failed"
exit $status
