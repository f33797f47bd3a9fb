#!/bin/bash
# nd_mpi.sh BUILDDIR [PROVIDER [RANKS [PROGRAM [ARGS...]]]]: an MPI job
# over the provider built in BUILDDIR. Compiles PROGRAM (check:
# nd_mpi_check.c, the default; threads: nd_mpi_threads.c, 8 threads a rank
# under MPI_THREAD_MULTIPLE, 2 ranks) with the system's mpicc and runs it,
# with ARGS (nd_mpi_check -m BYTES: the largest message), on
# RANKS local ranks (default 2) through Open MPI's OFI MTL (pml cm, mtl ofi),
# restricted to PROVIDER (default "nd;ofi_rxm", libfabric's RDM layer over
# nd). Open MPI fails the job when no provider of that name is found, so a
# pass means nd carried every byte. Bounded: the job is killed after
# ND_MPI_TIMEOUT seconds (default 300). Runs with Open MPI 4.1 (Debian 12)
# and 5 (Debian 13) alike.
#
# Environment:
#   ND_MPI_TIMEOUT      seconds after which the MPI job is killed (300)
#   ND_MPI_EXPECT_CACHE 1: also fail unless every rank's nd ran its
#                       registration cache and dropped entries for memory
#                       the program released (nd's info log of the cache's
#                       figures when Open MPI closes the domain): the
#                       released-memory check then proves the cache saw
#                       each release inside MPI, not that there was none
set -euo pipefail
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
builddir=$(cd "${1:?usage: nd_mpi.sh BUILDDIR [PROVIDER [RANKS [check|threads [ARGS...]]]]}" && pwd)
provider=${2:-nd;ofi_rxm}
ranks=${3:-2}
program=nd_mpi_${4:-check}
shift $(($# < 4 ? $# : 4))
[ -f "$(dirname "$0")/../functional/$program.c" ] || { echo "nd_mpi.sh: no program '${4:-}' (check or threads)" >&2; exit 2; }
srcdir=$(cd "$(dirname "$0")/../.." && pwd)

for tool in mpicc mpirun; do
	command -v "$tool" >/dev/null ||
		{ echo "nd_mpi.sh: $tool not found (Debian packages openmpi-bin, libopenmpi-dev)"; exit 1; }
done
mpirun --version | head -1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpicc -O2 -Wall -pthread -o "$work/$program" "$srcdir/fabtests/functional/$program.c"

export FI_PROVIDER_PATH=$builddir/.libs
# No tuning: ofi_rxm sizes its CQ for a universe of 256 peers by default,
# 262,144 entries, beyond rxe's largest CQ (32,767); nd opens it at the
# device's size and reserves room per endpoint at fi_enable (libfabric's
# verbs provider refuses it, and needs FI_UNIVERSE_SIZE=64 here).
# Open MPI's OFI MTL over PROVIDER alone (nd-common.sh says why each
# setting).
nd_ompi_env "$provider"

if [[ ${ND_MPI_EXPECT_CACHE:-0} != 1 ]]; then
	timeout -k 10 "${ND_MPI_TIMEOUT:-300}" \
		mpirun -np "$ranks" --oversubscribe "$work/$program" "$@"
	exit
fi
export FI_LOG_LEVEL=info FI_LOG_PROV=nd FI_LOG_SUBSYS=mr
# Each rank's log (stderr) in a file of its own: lines the ranks write at
# once interleave on a shared stderr.
rc=0
timeout -k 10 "${ND_MPI_TIMEOUT:-300}" \
	mpirun -np "$ranks" --oversubscribe \
	sh -c 'exec "$0" "$@" 2>"'"$work"'/rank.$OMPI_COMM_WORLD_RANK.log"' "$work/$program" "$@" || rc=$?
invalidating=0
for log in "$work"/rank.*.log; do
	[[ -e $log ]] || continue
	echo "== ${log##*/}"
	cat "$log"
	# At the domain's close: "registration cache: H hits, ..., N invalidations".
	if grep -qE 'registration cache: [0-9]+ hits, .* [1-9][0-9]* invalidations' "$log"; then
		invalidating=$((invalidating + 1))
	fi
done
((rc == 0)) || exit "$rc"
if ((invalidating < ranks)); then
	echo "nd_mpi.sh: $invalidating of $ranks ranks report a registration cache that dropped released memory" \
		"(nd's log above says why a cache was off)" >&2
	exit 1
fi
echo "nd_mpi.sh: every rank's registration cache dropped the memory the program released"
