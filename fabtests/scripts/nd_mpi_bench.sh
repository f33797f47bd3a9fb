#!/bin/bash
# nd_mpi_bench.sh BUILDDIR: Open MPI over "nd;ofi_rxm" beside "verbs;ofi_rxm",
# in one boot: latency, bandwidth and bi-directional bandwidth (8 B to
# 4 MiB, a window of 8 non-blocking sends, reused buffers) and allreduce,
# through fabtests/benchmarks/nd_mpi_bench.c. ND_MPI_BENCH_ROUNDS rounds (default 5)
# alternate the providers; the table gives medians and nd/verbs. Then the
# ioctl system calls (each registration and deregistration is one), counted
# with strace: in a bandwidth run over 64 KiB..4 MiB, and per message in
# steady state (the difference between a 30- and a 10-window run at 1 MiB),
# and the write calls per message (on Soft-RoCE each posted request rings
# its doorbell with one, nd's memory-window binds and invalidations too).
# Both providers run with FI_UNIVERSE_SIZE=64, which the verbs provider needs
# on Soft-RoCE (rxm's default CQ is beyond rxe's largest); nd does not.
#
# Environment:
#   ND_MPI_BENCH_ROUNDS  rounds, alternating the providers (5)
#   ND_MPI_BENCH_TEST    one test: lat, bw, bibw or allreduce (all)
#   ND_MPI_BENCH_IOCTLS  no: skip the strace runs (yes)
#   ND_MPI_TIMEOUT       seconds each MPI job may take (300)
set -euo pipefail
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
builddir=$(cd "${1:?usage: nd_mpi_bench.sh BUILDDIR}" && pwd)
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${ND_MPI_BENCH_ROUNDS:-5}
providers=("nd;ofi_rxm" "verbs;ofi_rxm")

for tool in mpicc mpirun strace python3; do
	command -v "$tool" >/dev/null || {
		echo "nd_mpi_bench.sh: $tool not found (Debian packages openmpi-bin, libopenmpi-dev, strace, python3)"
		exit 1
	}
done
mpirun --version | head -1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpicc -O2 -Wall -o "$work/nd_mpi_bench" "$srcdir/fabtests/benchmarks/nd_mpi_bench.c"

export FI_PROVIDER_PATH=$builddir/.libs FI_UNIVERSE_SIZE=64

# Each job runs in a subshell with Open MPI's settings for its provider
# (nd_ompi_env, nd-common.sh).
job() { # PROVIDER ARGS...: runs the benchmark on two ranks
	local provider=$1
	shift
	(
		nd_ompi_env "$provider"
		timeout -k 10 "${ND_MPI_TIMEOUT:-300}" mpirun -np 2 --oversubscribe "$@"
	)
}

# Odd rounds run nd first, even rounds verbs first, so that a drift of the
# guest over the run does not fall on one provider alone.
for ((round = 1; round <= rounds; round++)); do
	order=("${providers[@]}")
	((round % 2)) || order=("${providers[1]}" "${providers[0]}")
	for provider in "${order[@]}"; do
		echo "round $round: $provider" >&2
		# A job that fails after its figures (the verbs provider has crashed in
		# MPI_Finalize here) keeps them, and the failure is reported.
		status=0
		job "$provider" "$work/nd_mpi_bench" -t "${ND_MPI_BENCH_TEST:-all}" >"$work/out" || status=$?
		sed "s/^/${provider%%;*} /" "$work/out" >>"$work/results"
		((status == 0)) || echo "$provider, round $round: exit status $status after $(wc -l <"$work/out") figures" >>"$work/failures"
	done
done

syscalls() { # PROVIDER ARGS...: "IOCTLS WRITES" of every process of the job
	local provider=$1
	shift
	(
		nd_ompi_env "$provider"
		timeout -k 10 "${ND_MPI_TIMEOUT:-300}" strace -f -qq -e trace=ioctl,write -o "$work/strace" \
			mpirun -np 2 --oversubscribe "$work/nd_mpi_bench" "$@" >/dev/null
	) || echo "$provider, system call count $*: exit status $?" >>"$work/failures"
	echo "$(grep -c 'ioctl(' "$work/strace" || true) $(grep -c 'write(' "$work/strace" || true)"
}
# The same runs with nd's cache off show what it saves. Registrations are
# ioctl calls; on Soft-RoCE every posted request rings its doorbell with a
# write call (nd's memory-window binds and invalidations too).
[[ ${ND_MPI_BENCH_IOCTLS:-yes} == yes ]] && for provider in "${providers[@]}" "nd-nocache"; do
	name=${provider%%;*}
	[[ $provider == nd-nocache ]] && provider="nd;ofi_rxm" && export FI_ND_MR_CACHE_ENABLE=0
	read -r run_ioctls _ < <(syscalls "$provider" -t bw -m 65536)
	echo "$name ioctl_run $run_ioctls" >>"$work/results"
	read -r short_ioctls short_writes < <(syscalls "$provider" -t bw -s 1048576 -n 10)
	read -r long_ioctls long_writes < <(syscalls "$provider" -t bw -s 1048576 -n 30)
	echo "$name ioctl_per_message $(python3 -c "print(f'{($long_ioctls - $short_ioctls) / (20 * 8):.2f}')")" >>"$work/results"
	echo "$name write_per_message $(python3 -c "print(f'{($long_writes - $short_writes) / (20 * 8):.2f}')")" >>"$work/results"
done
unset FI_ND_MR_CACHE_ENABLE

touch "$work/failures"
python3 - "$work/results" "$work/failures" <<'PY'
import statistics, sys
values, units, ioctl = {}, {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    if f[1].startswith(('ioctl', 'write')):
        ioctl[(f[0], f[1])] = f[2]
        continue
    prov, test, size, value, unit = f
    values.setdefault((test, int(size), prov), []).append(float(value))
    units[test] = unit
print(f"{'test':<10} {'size':>8} {'nd':>10} {'verbs':>10} {'unit':<5} {'nd/verbs':>8}")
for test in ('lat', 'bw', 'bibw', 'allreduce'):
    for size in sorted({k[1] for k in values if k[0] == test}):
        nd = statistics.median(values.get((test, size, 'nd'), [0]))
        vb = statistics.median(values.get((test, size, 'verbs'), [0]))
        print(f"{test:<10} {size:>8} {nd:>10.2f} {vb:>10.2f} {units[test]:<5} {nd / vb if vb else 0:>8.2f}")
print("system calls (nd, verbs, nd with FI_ND_MR_CACHE_ENABLE=0):")
for what in ('ioctl_run', 'ioctl_per_message', 'write_per_message'):
    print(f"{what:<18} nd {ioctl.get(('nd', what), '?'):>8}   verbs {ioctl.get(('verbs', what), '?'):>8}"
          f"   nd-nocache {ioctl.get(('nd-nocache', what), '?'):>8}")
failures = open(sys.argv[2]).read().strip()
print("jobs that failed:", "none" if not failures else "\n  " + failures.replace("\n", "\n  "))
PY
