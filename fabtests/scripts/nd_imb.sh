#!/bin/bash
# nd_imb.sh BUILDDIR OUTDIR: the Intel MPI Benchmarks (IMB-MPI1) over
# "nd;ofi_rxm" beside "verbs;ofi_rxm", for Open MPI and for MPICH over OFI,
# two ranks, in one boot. ND_IMB_ROUNDS rounds; odd rounds run nd first
# (then its variants, ND_IMB_VARIANTS, then verbs), even rounds the other
# way round, so that a drift of the guest over the run falls on all. Each
# IMB run's output is kept in OUTDIR/raw, and its figures are appended to
# OUTDIR/imb.tsv, one per line:
#   MPI PROVIDER ROUND BENCHMARK PROCESSES BYTES METRIC VALUE
# (util/nd-plot imb-figures reads IMB's tables), and the RDMA device's
# counters that moved during it (Soft-RoCE's retransmits, duplicate
# requests and ACK timeouts among them; node 0's device across nodes) to
# OUTDIR/counters.tsv, one per line:
#   MPI PROVIDER ROUND DEVICE/PORT COUNTER CHANGE
# so that what the transport did under the figures is known. Each run prints PASS: when
# it exits 0 with a figure of every benchmark, FAIL: otherwise; the script
# closes with "imb: N passed, M failed" and exits non-zero on any failure.
# A run that fails keeps the figures it printed and is listed in
# OUTDIR/failures. util/nd-bench-imb runs this in the guest and
# util/nd-plot turns the figures into tables and pictures; util/nd-check's
# full tier runs a short one (stage imb).
#
# MPICH runs with MPIR_CVAR_NOLOCAL=1, Open MPI with pml cm, mtl ofi and btl
# self (nd_ompi_env), so that ranks on one host talk through the provider,
# not shared memory. Both providers run with FI_UNIVERSE_SIZE=64, which the
# verbs provider needs on Soft-RoCE to start (rxm's default CQ is beyond
# rxe's largest); nd does not, but then both run the same rxm.
#
# Environment:
#   ND_IMB_ROUNDS      rounds (3)
#   ND_IMB_MPIS        the MPIs, of openmpi and mpich ("openmpi mpich");
#                      IMB-MPI1 is built for each (util/nd-imb build MPI)
#   ND_IMB_BENCHMARKS  IMB-MPI1's benchmarks ("PingPong PingPing Sendrecv
#                      Exchange Uniband Biband Allreduce Alltoall Bcast
#                      Barrier")
#   ND_IMB_SIZES       message sizes in bytes ("0 1 4 16 64 256 1024 4096
#                      16384 65536 262144 1048576 4194304")
#   ND_IMB_ITERS       IMB's -iter, repetitions per size at most (200)
#   ND_IMB_VARIANTS    runs of nd under other settings beside the two, in
#                      the same rounds: NAME:VAR=VALUE[,VAR=VALUE...] a
#                      word (e.g. "ack19:FI_ND_ACK_TIMEOUT=19"); each is
#                      "nd-NAME" in the tables, judged beside verbs as nd
#                      is, and OUTDIR/variants says what it set
#   ND_IMB_TIME        IMB's -time, seconds per size at most (1)
#   ND_MPI_TIMEOUT     seconds each IMB run may take (900)
#   ND_IMB_WAIT        run by util/nd-cluster: seconds the other nodes wait
#                      for node 0's runs to end (7200)
#   ND_NODE, ND_NODES  set by util/nd-cluster (internal): this node's
#                      number and the node count. Node 0 then runs every
#                      rank on a node of its own (nd-node0, nd-node1, ...),
#                      launched over ssh; OUTDIR must be the nodes' shared
#                      directory (ND_MEET)
set -uo pipefail
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
PROG=nd_imb
[[ $# -eq 2 ]] || { usage >&2; exit 2; }
builddir=$(cd "$1" && pwd) || die "no build folder $1"
out=$2
srcdir=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
rounds=${ND_IMB_ROUNDS:-3}
read -ra mpis <<<"${ND_IMB_MPIS:-openmpi mpich}"
read -ra benchmarks <<<"${ND_IMB_BENCHMARKS:-PingPong PingPing Sendrecv Exchange Uniband Biband Allreduce Alltoall Bcast Barrier}"
sizes=${ND_IMB_SIZES:-0 1 4 16 64 256 1024 4096 16384 65536 262144 1048576 4194304}
# The runs of a round, in order: nd, its variants, verbs.
providers=("nd;ofi_rxm")
declare -A variant_settings=()
hosts=
ranks=2
if [[ -n ${ND_NODES:-} ]]; then
	if ((ND_NODE != 0)); then
		# Bounded: node 0 leaves .imb-done however its runs end.
		deadline=$((SECONDS + ${ND_IMB_WAIT:-7200}))
		until [[ -e $out/.imb-done ]] || ((SECONDS >= deadline)); do sleep 1; done
		exit 0
	fi
	trap ': >"$out/.imb-done"' EXIT
	ranks=$ND_NODES
	hosts=$(for ((i = 0; i < ND_NODES; i++)); do printf 'nd-node%d,' "$i"; done)
	hosts=${hosts%,}
fi

mkdir -p "$out/raw" || die "cannot make $out/raw"
: >"$out/imb.tsv"
rm -f "$out/failures" "$out/variants"
setting_pattern='[A-Za-z_][A-Za-z0-9_]*=[^,]*'
for word in ${ND_IMB_VARIANTS:-}; do
	name=nd-${word%%:*} settings=${word#*:}
	[[ $word == *:* && $name =~ ^nd-[a-z0-9][a-z0-9-]*$ && $settings =~ ^$setting_pattern(,$setting_pattern)*$ ]] ||
		die "ND_IMB_VARIANTS: \"$word\" is not NAME:VAR=VALUE[,VAR=VALUE...] (NAME of a-z, 0-9 and -)"
	[[ -z ${variant_settings[$name]:-} ]] || die "ND_IMB_VARIANTS: $name twice"
	variant_settings[$name]=$settings
	providers+=("$name;ofi_rxm")
	echo "$name ${settings//,/ }" >>"$out/variants"
done
providers+=("verbs;ofi_rxm")
# shellcheck disable=SC2086 # one size a word
printf '%s\n' $sizes >"$out/sizes"

declare -A imb
for mpi in "${mpis[@]}"; do
	imb[$mpi]=$("$srcdir/util/nd-imb" path "$mpi") || die "IMB-MPI1 for $mpi is not built (util/nd-imb build $mpi)"
done
mpich_prefix=
[[ " ${mpis[*]} " == *" mpich "* ]] && mpich_prefix=$("$srcdir/util/nd-mpich" folder)/prefix

export FI_PROVIDER_PATH=$builddir/.libs FI_UNIVERSE_SIZE=64

# launch MPI PROVIDER ARGS...: ARGS on the ranks of MPI over PROVIDER; a
# variant's name (nd-NAME;ofi_rxm) runs nd;ofi_rxm with its settings.
launch() {
	local mpi=$1 provider=$2 setting
	local -a settings=() forward=(-x FI_PROVIDER_PATH -x FI_UNIVERSE_SIZE)
	shift 2
	if [[ -n ${variant_settings[${provider%%;*}]:-} ]]; then
		IFS=, read -ra settings <<<"${variant_settings[${provider%%;*}]}"
		provider="nd;ofi_rxm"
	fi
	(
		for setting in "${settings[@]}"; do
			export "${setting?}"
			forward+=(-x "${setting%%=*}")
		done
		case $mpi in
		openmpi)
			nd_ompi_env "$provider"
			if [[ -n $hosts ]]; then
				exec timeout -k 10 "${ND_MPI_TIMEOUT:-900}" mpirun -np "$ranks" -H "$hosts" \
					"${forward[@]}" "$@"
			fi
			exec timeout -k 10 "${ND_MPI_TIMEOUT:-900}" mpirun -np 2 --oversubscribe "$@"
			;;
		mpich)
			export FI_PROVIDER=$provider MPIR_CVAR_NOLOCAL=1
			if [[ -n $hosts ]]; then
				exec timeout -k 10 "${ND_MPI_TIMEOUT:-900}" "$mpich_prefix/bin/mpiexec" -hosts "$hosts" -n "$ranks" "$@"
			fi
			exec timeout -k 10 "${ND_MPI_TIMEOUT:-900}" "$mpich_prefix/bin/mpiexec" -n 2 "$@"
			;;
		esac
	)
}

# device_counters: "DEVICE/PORT COUNTER VALUE" for every counter the RDMA
# devices here show (none where the device keeps none).
device_counters() {
	local f rest
	for f in /sys/class/infiniband/*/ports/*/hw_counters/*; do
		[[ -f $f && -r $f ]] || continue
		rest=${f#/sys/class/infiniband/}
		printf '%s/%s\t%s\t%s\n' "${rest%%/*}" "$(cut -d/ -f3 <<<"$rest")" "${f##*/}" "$(<"$f")"
	done 2>/dev/null
}
# counter_moves BEFORE AFTER: "DEVICE/PORT COUNTER CHANGE" for those that moved.
counter_moves() {
	awk -F'\t' -v OFS='\t' 'NR == FNR { was[$1 FS $2] = $3; next }
		($1 FS $2) in was && $3 != was[$1 FS $2] { print $1, $2, $3 - was[$1 FS $2] }' \
		<(printf '%s\n' "$1") <(printf '%s\n' "$2")
}
: >"$out/counters.tsv"

for ((round = 1; round <= rounds; round++)); do
	order=("${providers[@]}")
	if ((round % 2 == 0)); then
		order=()
		for ((i = ${#providers[@]} - 1; i >= 0; i--)); do order+=("${providers[i]}"); done
	fi
	for mpi in "${mpis[@]}"; do
		for provider in "${order[@]}"; do
			raw=$out/raw/$mpi-${provider%%;*}-$round.txt
			say "round $round: $mpi over $provider"
			start=$SECONDS
			run_status=0
			counters_before=$(device_counters)
			launch "$mpi" "$provider" "${imb[$mpi]}" "${benchmarks[@]}" -npmin "$ranks" -msglen "$out/sizes" \
				-iter "${ND_IMB_ITERS:-200}" -time "${ND_IMB_TIME:-1}" >"$raw" 2>&1 || run_status=$?
			moves=$(counter_moves "$counters_before" "$(device_counters)")
			if [[ -n $moves ]]; then
				printf '%s\n' "$moves" | sed "s|^|$mpi\t$provider\t$round\t|" >>"$out/counters.tsv"
				say "device counters that moved: $(awk -F'\t' '{ printf "%s%s %+d", (NR > 1 ? ", " : ""), $2, $3 }' <<<"$moves")"
			fi
			"$srcdir/util/nd-plot" imb-figures "$mpi" "$provider" "$round" <"$raw" >"$out/run.tsv"
			cat "$out/run.tsv" >>"$out/imb.tsv"
			what="$mpi over $provider, round $round: $(wc -l <"$out/run.tsv") figures in $((SECONDS - start)) s"
			missing=$(for bench in "${benchmarks[@]}"; do
				cut -f4 "$out/run.tsv" | grep -qx "$bench" || printf ' %s' "$bench"
			done)
			if ((run_status == 0)) && [[ -z $missing ]]; then
				pass "$what"
			else
				fail "$what, exit status $run_status${missing:+, none of}$missing (output: raw/${raw##*/})"
				echo "$mpi over $provider, round $round: exit status $run_status${missing:+, none of}$missing (output: raw/${raw##*/})" >>"$out/failures"
				tail -5 "$raw" >&2
			fi
		done
	done
done
rm -f "$out/run.tsv"
closing_line imb
