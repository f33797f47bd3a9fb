#!/bin/bash
# nd_mr_bench.sh BUILDDIR: the cost of registering a reused buffer for peers
# and closing it (fabtests/benchmarks/nd_mr_bench.c), in one boot: nd (its cache, memory
# windows bound and invalidated), nd with FI_ND_MR_CACHE_ENABLE=0 (a
# registration and a deregistration) and libfabric's verbs provider (its
# own cache, whose key outlives fi_close). ND_MR_BENCH_ROUNDS rounds
# (default 3), the order rotating; the table gives medians in microseconds
# per cycle and nd/verbs. Run where an RDMA device exists:
#   util/nd-guest -- fabtests/scripts/nd_mr_bench.sh build/release
#
# Environment:
#   ND_MR_BENCH_ROUNDS  rounds, the order rotating (3)
set -euo pipefail
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
builddir=$(cd "${1:?usage: nd_mr_bench.sh BUILDDIR}" && pwd)
export FI_PROVIDER_PATH=$builddir/.libs
bench=$builddir/fabtests/benchmarks/nd_mr_bench
rounds=${ND_MR_BENCH_ROUNDS:-3}
results=$(mktemp)
trap 'rm -f "$results"' EXIT
runs=(nd nd-nocache verbs)
for ((round = 0; round < rounds; round++)); do
	for ((k = 0; k < 3; k++)); do
		run=${runs[(round + k) % 3]}
		case $run in
		nd) "$bench" -p nd ;;
		nd-nocache) FI_ND_MR_CACHE_ENABLE=0 "$bench" -p nd | sed 's/^nd /nd-nocache /' ;;
		verbs) "$bench" -p verbs ;;
		esac >>"$results"
	done
done
python3 - "$results" <<'PY'
import statistics, sys
values = {}
for line in open(sys.argv[1]):
    run, size, us = line.split()
    values.setdefault((run, int(size)), []).append(float(us))
print(f"{'size':>8} {'nd':>9} {'nd-nocache':>11} {'verbs':>9}  (us per fi_mr_reg + fi_close)  nd/verbs")
for size in sorted({k[1] for k in values}):
    med = {run: statistics.median(values.get((run, size), [0])) for run in ('nd', 'nd-nocache', 'verbs')}
    ratio = med['nd'] / med['verbs'] if med['verbs'] else 0
    print(f"{size:>8} {med['nd']:>9.2f} {med['nd-nocache']:>11.2f} {med['verbs']:>9.2f}  {'':31} {ratio:>8.2f}")
PY
