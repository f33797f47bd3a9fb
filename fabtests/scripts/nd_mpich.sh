#!/bin/bash
# nd_mpich.sh: MPICH over OFI (util/nd-mpich) on the provider built in
# BUILDDIR, in a guest (or on a host with an RDMA device).
#
#   nd_mpich.sh MPICH BUILDDIR MODE [PROVIDER [ARGS...]]
#
# MPICH is the folder `util/nd-mpich build` printed; PROVIDER is
# "nd;ofi_rxm" by default. Modes:
#   check     cpi, finalize and suite, as util/nd-check runs them
#   full      cpi, finalize, and on Soft-RoCE compare, elsewhere suite (the
#             mpich-full stage; with ND_MPICH_TIER=full)
#   suite [DIR...]
#             MPICH's own test suite (test/mpi, each run judged by MPICH's
#             runtests) in the DIRs given (default: attr coll comm datatype
#             errhan pt2pt rma threads/pt2pt), the tests of 2 to 4
#             processes; every outcome compared with
#             fabtests/test_configs/nd/mpich.expect, one PASS:/FAIL: line a
#             test
#   finalize [RUNS]
#             nd_mpi_finalize (100 messages sent just before MPI_Finalize)
#             RUNS times (ND_MPICH_FINALIZE_RUNS); a run that does not end
#             within ND_MPICH_FINALIZE_TIMEOUT seconds lost a message
#   cpi       MPICH's examples/cpi.c on 2 ranks
#   compare [DIR...]
#             the suite over nd;ofi_rxm and over verbs;ofi_rxm (with
#             FI_UNIVERSE_SIZE=64, without which verbs does not start on
#             Soft-RoCE) on the same boot; nd's runs judged as suite judges
#             them, the counts per directory, and judged: nd passes at
#             least as many, and none that verbs passes
# Closes with "mpich: N passed, M failed"; exits non-zero on any failure.
# In a guest, a rank that crashes leaves a core, and its threads'
# backtraces (gdb) follow its test's output.
#
# The ranks share one host and talk through OFI, not shared memory
# (MPIR_CVAR_NOLOCAL=1); nd's runs set nothing else: MPICH picks the AV
# type, thread level and completion semantics it wants. The ranks run as
# whoever runs it; in a guest run as root (ND_GUEST=1), as the test bed's
# user with a site's memory-lock limit (nd_as_site_user), as a cluster's
# users run them: mpiexec itself runs as the user, and across nodes logs
# in to them as the user (util/guest/cluster-node gives the user the
# nodes' key). MPICH's runtests stays root's, for the files it writes
# beside the programs.
#
# Environment:
#   ND_MPICH_TIMEOUT           seconds a suite test may run before MPICH's
#                              launcher ends it (MPITEST_TIMEOUT; 60)
#   ND_MPICH_TIER              check: every ND_MPICH_STRIDE-th test of a
#                              directory from the ND_MPICH_OFFSET-th, and not
#                              those mpich.expect marks Slow (listed, not
#                              run); full: every test (check)
#   ND_MPICH_STRIDE            the check tier's stride (24)
#   ND_MPICH_OFFSET            the check tier's first test, 0-based (0)
#   ND_MPICH_ONLY              only these programs, DIR/TEST separated by
#                              spaces (each with all its variants; unset:
#                              every one), to look at a few again
#   ND_MPICH_PARTS             each directory's tests in this many parts
#                              (every PARTS-th test from the k-th), each
#                              run and told as it ends, so that a run
#                              stopped part way keeps what it ran; compare
#                              runs each part over nd, then over verbs (1)
#   ND_MPICH_FIRST_PART        the part of the first DIR to start from,
#                              1-based: to go on with a run that was
#                              stopped (1)
#   ND_MPICH_FINALIZE_RUNS     finalize runs (5)
#   ND_MPICH_FINALIZE_TIMEOUT  seconds a finalize run may take (30)
#   ND_MPICH_HOSTS             nd-node0,nd-node1,...: the suite's ranks are
#                              spread over these hosts (round robin), started
#                              over ssh (unset: one host)
#   ND_MEET                    with ND_MPICH_HOSTS, the directory every node
#                              shares (util/nd-cluster sets it)
#   ND_GUEST                   1 in a guest (util/nd-guest sets it): the suite
#                              runs where it is, the guest's root being a
#                              throw-away overlay (else on a copy)
#   ND_GUEST_TRANSPORT         iwarp selects the iwarp lines of mpich.expect
#                              (roce; util/nd-guest sets it)
#   ND_TEST_DEVICE             the device named in the output (util/nd-guest
#                              sets it)
set -uo pipefail
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
PROG=nd_mpich
srcdir=$(cd "$(dirname "$0")/../.." && pwd)

mpich=$(cd "${1:?usage: nd_mpich.sh MPICH BUILDDIR MODE [PROVIDER [ARGS...]]}" && pwd)
builddir=$(cd "${2:?usage: nd_mpich.sh MPICH BUILDDIR MODE [PROVIDER [ARGS...]]}" && pwd)
mode=${3:?usage: nd_mpich.sh MPICH BUILDDIR MODE [PROVIDER [ARGS...]]}
provider=${4:-nd;ofi_rxm}
shift 4 2>/dev/null || set --
prefix=$mpich/prefix
[ -x "$prefix/bin/mpiexec" ] || die "$prefix/bin/mpiexec not found: build MPICH first (util/nd-mpich build)"
version=$(cat "$mpich/nd-mpich-done")
version=${version%%-*}
transport=${ND_GUEST_TRANSPORT:-roce}
# Across nodes (ND_MPICH_HOSTS) mpich.expect's "nodes" lines apply too.
nodes=0
[ -z "${ND_MPICH_HOSTS:-}" ] || nodes=1
expect=$srcdir/fabtests/test_configs/nd/mpich.expect

export FI_PROVIDER_PATH=$builddir/.libs FI_PROVIDER=$provider
export MPIR_CVAR_NOLOCAL=1
# libfabric 1.x loads libinfinipath (its psm provider), which catches
# SIGSEGV in every process to print addresses and leaves no core: the
# signal's own action leaves one, for crash_reports below.
export IPATH_NO_BACKTRACE=1
if [ -n "${ND_MPICH_HOSTS:-}" ]; then
	# Across nodes: hydra starts the ranks over ssh, in this directory,
	# which must be the same on every node (util/nd-cluster's shared one),
	# and hands them this environment.
	export MPITEST_MPIEXECARG="-hosts $ND_MPICH_HOSTS"
	work=${ND_MEET:?ND_MPICH_HOSTS needs a directory every node shares (ND_MEET)}/nd-mpich
	rm -rf "$work"
	mkdir -p "$work"
else
	# One host: hydra forks the ranks itself (no ssh).
	export HYDRA_LAUNCHER=fork
	work=$(mktemp -d)
fi
trap 'rm -rf "$work"' EXIT
# runtests writes beside the programs (its lists, results, a program it
# rebuilds). In a guest the suite runs where it is: the guest's root is a
# throw-away overlay of the host's, so nothing reaches the cache (a copy of
# its 100 MB took 85 s there). Elsewhere, and across nodes, on a copy.
if [ "${ND_GUEST:-0}" = 1 ] && [ -z "${ND_MPICH_HOSTS:-}" ]; then
	suite_root=$mpich/test/mpi
else
	suite_root=$work/mpi
fi
mpiexec=$prefix/bin/mpiexec
if [[ ${ND_GUEST:-0} == 1 && $(id -u) == 0 ]]; then
	# The user reaches MPICH, its suite and the programs built here
	# through their paths: the guest's root is a throw-away overlay, so
	# the modes change there only. The ranks then start as the user
	# through a mpiexec of that name (runtests finds its command lines by
	# it).
	# (Across nodes the suite is copied into $work below, keeping its
	# modes: $work is what opens.)
	nd_open_to_user "$prefix" "$work" || die "the user cannot reach MPICH"
	[[ -n ${ND_MPICH_HOSTS:-} ]] || nd_open_to_user "$suite_root" || die "the user cannot reach MPICH's suite"
	chmod 755 "$work"
	mkdir "$work/as-user"
	cat >"$work/as-user/mpiexec" <<-EOF
		#!/bin/bash
		source "$srcdir/util/lib/nd-common.sh"
		ulimit -c unlimited
		nd_exec_as_site_user "$prefix/bin/mpiexec" "\$@"
	EOF
	chmod 755 "$work/as-user/mpiexec"
	mpiexec=$work/as-user/mpiexec
	# A rank that crashes leaves its core here (the guest is thrown away
	# after the run, so its core_pattern may change), for crash_reports.
	cores=$work/cores
	if ! { mkdir -p "$cores" && chmod 1777 "$cores" && echo "$cores/core.%p.%E" >/proc/sys/kernel/core_pattern; }; then
		die "cannot keep the cores of crashed ranks in $cores"
	fi
fi

# crash_reports: for each core a crashed rank left (in a guest run as
# root: above), the program, and with gdb each thread's backtrace; the
# cores are then removed (a guest's disk is its memory). A rank that
# crashes fails its test already; this says where.
cores=${cores:-}
crash_reports() {
	local core exe pid
	[ -n "$cores" ] || return 0
	for core in "$cores"/core.*; do
		[ -f "$core" ] || continue
		pid=${core#"$cores"/core.}
		exe=${pid#*.}
		pid=${pid%%.*}
		exe=${exe//!//}
		echo "    a rank crashed: $exe (pid $pid, core of $(($(stat -c %s "$core") / 1048576)) MiB)"
		if command -v gdb >/dev/null; then
			# The thread that took the signal first: a summary that
			# keeps only the first lines keeps it.
			gdb -batch -q -nx -ex 'bt 20' -ex 'thread apply all bt 30' "$exe" "$core" 2>&1 |
				grep -E '^(#[0-9]|Thread |Program terminated)' | head -120 | sed 's/^/      /'
		else
			echo "      (no gdb here for its backtrace)"
		fi
		rm -f "$core"
	done
}

# expected KEY: the RESULT mpich.expect gives this MPICH version and
# transport for KEY ("DIR/TEST NP [ARGS]"), or nothing (must pass).
# Lines: VERSION TRANSPORT RESULT DIR/TEST NP [ARGS...] # why
expected() {
	awk -v v="$version" -v t="$transport" -v nodes="$nodes" -v key="$1" '
		{ sub(/[ \t]*#.*/, "") }
		NF >= 5 && ($1 == "*" || $1 == v) && ($2 == "*" || $2 == t || ($2 == "nodes" && nodes)) {
			k = $4; for (i = 5; i <= NF; i++) k = k " " $i
			if (k == key) { print $3; exit }
		}' "$expect"
}

# judge KEY RESULT SECONDS: RESULT is Pass, Fail, or Timeout (the run
# reached its launcher's limit: the test's own timeLimit, or
# ND_MPICH_TIMEOUT).
judge() {
	local want
	want=$(expected "$1")
	case ${want:-Pass}/$2 in
	Pass/Pass | Slow/Pass) pass "$1 ($3 s)" ;;
	Slow/Timeout) pass "$1 ($3 s): timed out, which mpich.expect allows it (Slow)" ;;
	Hang/Pass) pass "$1 ($3 s): passed this time (mpich.expect: Hang, an open defect)" ;;
	Hang/Timeout) pass "$1 ($3 s): hung, the open defect mpich.expect lists (Hang)" ;;
	Fail/Fail | Fail/Timeout) pass "$1 ($3 s): fails as mpich.expect says" ;;
	Pass/*) fail "$1 ($3 s): $2, and mpich.expect does not list it" ;;
	Slow/Fail | Hang/Fail) fail "$1 ($3 s): failed, not for time (mpich.expect allows it only to time out)" ;;
	Fail/Pass) fail "$1 ($3 s): passes: take it out of mpich.expect" ;;
	*) fail "$1: mpich.expect says '$want' (Fail, Slow or Hang)" ;;
	esac
}

# One directory of the suite through MPICH's runtests, where it may write
# (suite_root)
# (runtests builds what is missing and leaves files beside the programs),
# over the provider in FI_PROVIDER. Writes "RESULT<TAB>KEY<TAB>SECONDS" per
# run to RESULTS, KEY being DIR/TEST NP [ARGS]: variants of one program
# differ only by their arguments, which runtests prints (-verbose) before
# each run, in the order of its TAP lines. A failed run's output goes to
# RESULTS.out.
run_dir() { # DIR RESULTS [PART PARTS]
	local dir=$1 results=$2 part=${3:-0} parts=${4:-1} list tap=$work/tap out=$work/out limits=$work/limits
	[ -f "$suite_root/$dir/testlist" ] || { fail "$dir: no testlist in $mpich/test/mpi/$dir"; return 1; }
	# The tests of 2 to 4 processes (those of one do not reach the
	# network); in the check tier every STRIDE-th of them from OFFSET, and
	# not those mpich.expect lists (Slow, Fail or Hang).
	list=$suite_root/$dir/testlist.nd
	: >"$limits"
	awk -v v="$version" -v t="$transport" -v nodes="$nodes" -v dir="$dir" -v expect="$expect" \
		-v tier="${ND_MPICH_TIER:-check}" -v stride="${ND_MPICH_STRIDE:-24}" -v offset="${ND_MPICH_OFFSET:-0}" \
		-v only="${ND_MPICH_ONLY:-}" -v part="$part" -v parts="$parts" \
		-v limits="$limits" -v deflimit="${ND_MPICH_TIMEOUT:-60}" '
		BEGIN {
			n_only = split(only, o, /[ \t]+/)
			for (i = 1; i <= n_only; i++) wanted[o[i]] = 1
			while ((getline line < expect) > 0) {
				sub(/[ \t]*#.*/, "", line); n = split(line, f, /[ \t]+/)
				if (n >= 5 && (f[1] == "*" || f[1] == v) && (f[2] == "*" || f[2] == t || (f[2] == "nodes" && nodes)) && (f[3] == "Slow" || f[3] == "Fail" || f[3] == "Hang")) {
					k = f[4]; for (i = 5; i <= n; i++) k = k " " f[i]; if (!(k in listed)) listed[k] = f[3]
				}
			}
			if (tier != "check") stride = 1
		}
		{
			line = $0; sub(/^[ \t]+/, "", line); sub(/[ \t]*#.*/, "", line)
			n = split(line, f, /[ \t]+/)
			if (n < 2 || f[2] !~ /^[0-9]+$/ || f[2] < 2 || f[2] > 4) next
			if (n_only && !((dir "/" f[1]) in wanted)) next
			if (stride > 1 && (eligible++ % stride) != offset % stride) next
			k = dir "/" f[1] " " f[2]
			for (i = 3; i <= n; i++) if (f[i] ~ /^arg=/) k = k " " substr(f[i], 5)
			for (i = 3; i <= n; i++) if (f[i] ~ /^env=/) k = k " env:" substr(f[i], 5)
			if (tier == "check" && (k in listed)) { if (part == 0) print k " (" listed[k] ")" > "/dev/stderr"; next }
			if (parts > 1 && (selected++ % parts) != part) next
			# The launcher'"'"'s limit for this test: its own timeLimit, or MPITEST_TIMEOUT.
			lim = deflimit; for (i = 3; i <= n; i++) if (f[i] ~ /^timeLimit=[0-9]+$/) lim = substr(f[i], 11)
			print k "\t" lim > limits
			print
		}' "$suite_root/$dir/testlist" >"$list" 2>"$work/slow" || { fail "$dir: filtering its testlist"; return 1; }
	sed 's/^/    left to the full tier (listed in mpich.expect): /' "$work/slow"
	# A part (or an ND_MPICH_ONLY list) may hold none of this directory.
	[ -s "$list" ] || return 0
	# runtests ends a run early once more than half of its runs, and at
	# least 5, timed out (its g_num_timeout_thresh): the tests it did not
	# reach run in a new one, so that every test listed has a result.
	local total done=0 ran
	total=$(wc -l <"$list")
	cp "$list" "$list.all"
	while ((done < total)); do
		tail -n +"$((done + 1))" "$list.all" >"$list"
		rm -f "$tap"
		(cd "$suite_root/$dir" && MPITEST_TIMEOUT=${ND_MPICH_TIMEOUT:-60} "$suite_root/runtests" -srcdir=. \
			-tests="$(basename "$list")" -mpiexec="$mpiexec" -verbose \
			-tapfile="$tap") >"$out" 2>&1
		ran=$(grep -csE '^(not )?ok +[0-9]* *- ' "$tap")
		if ((${ran:-0} == 0)); then
			fail "$dir: runtests ran none of the $((total - done)) tests left"
			tail -20 "$out" | sed 's/^/    /'
			return 1
		fi
		awk -v dir="$dir" -v limits="$limits" '
			BEGIN { while ((getline line < limits) > 0) { split(line, f, "\t"); limit[f[1]] = f[2] } }
			# The command lines runtests prints (-verbose), in run order.
			FNR == NR {
				if ($0 ~ /^Env includes /) { env = $0; sub(/^Env includes */, "", env); next }
				if ($0 ~ /mpiexec -n [0-9]+ /) {
					sub(/.*mpiexec -n /, ""); np = $1
					# Across nodes runtests puts MPITEST_MPIEXECARG (-hosts
					# LIST) before the program: not part of the key.
					prog = $0; sub(/^[0-9]+ +/, "", prog); sub(/^-hosts +[^ ]+ +/, "", prog); sub(/^\.\//, "", prog)
					gsub(/  +/, " ", prog); sub(/ +$/, "", prog)
					cmd[++ncmd] = prog " " np
					envs[ncmd] = env; env = ""
				}
				next
			}
			# The "##" lines after a failed run (TAP) end with
			# "APPLICATION TIMED OUT" when the launcher ended it: a Timeout.
			/^ *## .*APPLICATION TIMED OUT/ { if (last) sub(/^Fail\t/, "Timeout\t", out[last]); next }
			/^(not )?ok +[0-9]* *- / {
				if ($0 ~ /# SKIP/) next
				result = ($0 ~ /^not ok/) ? "Fail" : "Pass"
				t = $0; sub(/.*time=/, "", t)
				# "PROG ARGS NP" -> "DIR/PROG NP ARGS"
				n = split(cmd[++i], f, " "); key = dir "/" f[1] " " f[n]
				for (j = 2; j < n; j++) key = key " " f[j]
				m = split(envs[i], e, " ")
				for (j = 1; j <= m; j++) key = key " env:" e[j]
				# A run that reached its limit was ended by the launcher,
				# though it may have printed " No Errors" as it was ended,
				# before the launcher said so: a Timeout.
				if (result == "Fail" && (key in limit) && t + 0 >= limit[key] + 0) result = "Timeout"
				out[++last] = result "\t" key "\t" sprintf("%.0f", t)
			}
			END { for (j = 1; j <= last; j++) print out[j] }' "$out" "$tap" >>"$results"
		# What failed runs printed (TAP's "##" lines), for the log.
		awk '/^not ok/ { show = 1; print "    " $0; next } /^ok/ { show = 0 } show && /^ *##/ { print "      " $0 }' \
			"$tap" | head -200 >>"$results.out"
		crash_reports >>"$results.out"
		done=$((done + ran))
		((done >= total)) ||
			echo "    $dir: runtests stopped after $done of $total ($(grep -m1 '^Terminating test' "$out")): the other $((total - done)) in a new run"
	done
}

# run_part DIR PART RESULTS JUDGE: part PART (0-based) of DIR's tests over
# FI_PROVIDER into RESULTS, told as it ends: with JUDGE "judge", each run
# judged against mpich.expect (nd's runs); with "list", those that did not
# pass (a provider run beside nd's, not judged). Its time is printed: the
# runs are a part of the stage's time.
run_part() {
	local dir=$1 part=$2 results=$3 verdicts=$4 parts=${ND_MPICH_PARTS:-1} start=$SECONDS before label result key seconds
	before=$(wc -l <"$results")
	run_dir "$dir" "$results" "$part" "$parts"
	label=$dir
	((parts == 1)) || label="$dir (part $((part + 1)) of $parts)"
	echo "    $label over $FI_PROVIDER: $(tail -n +"$((before + 1))" "$results" | passed_of "$dir" -) passed, in $((SECONDS - start)) s"
	while IFS=$'\t' read -r result key seconds; do
		if [ "$verdicts" = judge ]; then
			judge "$key" "$result" "$seconds"
		elif [ "$result" != Pass ]; then
			echo "    $FI_PROVIDER: $key ($seconds s): $result"
		fi
	done < <(tail -n +"$((before + 1))" "$results")
}

# suite_copy: the suite where runtests may write.
suite_copy() {
	local start=$SECONDS
	[ -d "$suite_root" ] && return
	cp -a "$mpich/test/mpi" "$suite_root" || die "copying the suite to a writable folder failed"
	echo "    the suite copied to a writable folder in $((SECONDS - start)) s"
}

# fresh_results RESULTS...: each RESULTS file, and its .out, empty.
fresh_results() {
	local results
	for results in "$@"; do
		: >"$results"
		: >"$results.out"
	done
}

# each_part STEP DIR...: STEP DIR PART for every part (ND_MPICH_PARTS) of
# every DIR, in order, the first DIR from ND_MPICH_FIRST_PART.
each_part() {
	local step=$1 dir part first=$((${ND_MPICH_FIRST_PART:-1} - 1))
	shift
	for dir in "$@"; do
		for ((part = first; part < ${ND_MPICH_PARTS:-1}; part++)); do
			"$step" "$dir" "$part"
		done
		first=0
	done
}

# run_suite RESULTS JUDGE DIR...: every DIR over FI_PROVIDER into RESULTS,
# part by part, each part told as it ends (run_part).
run_suite() {
	local results=$1 verdicts=$2
	shift 2
	fresh_results "$results"
	suite_copy
	suite_part() { run_part "$1" "$2" "$results" "$verdicts"; }
	each_part suite_part "$@"
}

suite_dirs=(attr coll comm datatype errhan pt2pt rma threads/pt2pt)

# failed_output RESULTS: what the runs that did not pass printed, for the log.
failed_output() {
	if grep -qv "^Pass" "$1"; then
		echo "    what the failed runs over $2 printed:"
		cat "$1.out"
	fi
}

# nd's runs, each judged against mpich.expect.
suite() {
	local dirs=("$@")
	((${#dirs[@]})) || dirs=("${suite_dirs[@]}")
	echo "== MPICH $version's test suite over $provider on ${ND_TEST_DEVICE:-the device}, tier ${ND_MPICH_TIER:-check}: ${dirs[*]}"
	run_suite "$work/nd.results" judge "${dirs[@]}"
	failed_output "$work/nd.results" "$provider"
}

finalize() {
	local runs=${1:-${ND_MPICH_FINALIZE_RUNS:-5}} run rc out=$work/finalize.log start
	echo "== nd_mpi_finalize over $provider: $runs runs of 100 messages sent just before MPI_Finalize"
	"$prefix/bin/mpicc" -O2 -Wall -o "$work/nd_mpi_finalize" "$srcdir/fabtests/functional/nd_mpi_finalize.c" ||
		{ fail "nd_mpi_finalize did not compile"; return; }
	for ((run = 1; run <= runs; run++)); do
		start=$SECONDS
		# Warnings on: a rank that fails says why (nd's and rxm's lines
		# come before MPICH's error stack).
		FI_LOG_LEVEL=${FI_LOG_LEVEL:-warn} timeout -k 5 "${ND_MPICH_FINALIZE_TIMEOUT:-30}" \
			"$mpiexec" -n 2 "$work/nd_mpi_finalize" -n 100 >"$out" 2>&1
		rc=$?
		if [ "$rc" -eq 0 ] && grep -q "^nd_mpi_finalize: 100 passed, 0 failed" "$out"; then
			pass "finalize run $run ($((SECONDS - start)) s)"
		else
			# Not 124: a rank failed. MPICH exits with its error code's
			# low byte (143: a fatal MPI_ERR_OTHER) and hydra ORs the
			# ranks' statuses.
			fail "finalize run $run: exit $rc$( ((rc != 124)) || echo ": a message was lost (the receiver waited)")"
			# All of it when short; else the warnings and MPICH's error
			# stacks, then the end (hydra's ten-line notice, the
			# receiver's last words).
			if (($(wc -l <"$out") <= 30)); then
				cat "$out"
			else
				grep -m 20 -E '<warn>|Abort\(|Fatal error|failed' "$out"
				echo "... the run's last lines:"
				tail -12 "$out"
			fi | sed 's/^/    /'
		fi
		crash_reports
	done
}

# cpi, with nd's info log: where nd offers ofi_rxm its flow control
# (libfabric 1.x, a transport other than iWARP), rxm must have turned it
# on, so that the suite after it runs the paths MPI jobs run on such NICs.
cpi() {
	local out=$work/cpi.log flow
	echo "== MPICH's cpi over $provider"
	"$prefix/bin/mpicc" -O2 -o "$work/cpi" "$mpich/examples/cpi.c" -lm || { fail "cpi did not compile"; return; }
	if FI_LOG_LEVEL=info FI_LOG_PROV=nd timeout -k 5 120 "$mpiexec" -n 2 "$work/cpi" >"$out" 2>&1 &&
		grep -q "pi is approximately" "$out"; then
		pass "cpi over $provider"
	else
		fail "cpi over $provider"
		grep -v '^libfabric:' "$out" | tail -10 | sed 's/^/    /'
	fi
	crash_reports
	[[ $provider == nd\;ofi_rxm && $transport != iwarp ]] || return 0
	fi_info --version 2>/dev/null | grep -q '^libfabric: 1\.' || return 0
	flow=$(grep -c "ofi_rxm's flow control on" "$out")
	if ((flow > 0)); then
		pass "cpi: ofi_rxm's flow control on, on $flow endpoint(s)"
	else
		fail "cpi: nd offers ofi_rxm its flow control here, and no endpoint turned it on"
	fi
}

# passed_of DIR RESULTS: "PASSED/RUN" of DIR's runs in RESULTS.
passed_of() {
	awk -F'\t' -v d="$1/" 'index($2, d) == 1 { n++; p += $1 == "Pass" } END { print p + 0 "/" n + 0 }' "$2"
}

# nd beside the verbs provider on the same boot: the suite over both, nd's
# runs judged against mpich.expect as suite judges them, per directory the
# counts of each, and judged: nd passes at least as many as verbs, and no
# test that verbs passes fails over nd. verbs runs with FI_UNIVERSE_SIZE=64,
# without which it does not start on Soft-RoCE.
compare() {
	local dirs=("$@") dir
	((${#dirs[@]})) || dirs=("${suite_dirs[@]}")
	echo "== MPICH $version's test suite, nd;ofi_rxm beside verbs;ofi_rxm (FI_UNIVERSE_SIZE=64), tier ${ND_MPICH_TIER:-check}"
	# Part by part, nd's then verbs', so that a run stopped part way has
	# both providers' runs of the same tests.
	fresh_results "$work/nd.results" "$work/verbs.results"
	suite_copy
	compare_part() {
		run_part "$1" "$2" "$work/nd.results" judge
		FI_PROVIDER="verbs;ofi_rxm" FI_UNIVERSE_SIZE=64 run_part "$1" "$2" "$work/verbs.results" list
	}
	each_part compare_part "${dirs[@]}"
	failed_output "$work/nd.results" "$provider"
	failed_output "$work/verbs.results" "verbs;ofi_rxm"
	printf '    %-16s %-14s %s\n' directory "nd pass/run" "verbs pass/run"
	for dir in "${dirs[@]}"; do
		printf '    %-16s %-14s %s\n' "$dir" "$(passed_of "$dir" "$work/nd.results")" \
			"$(passed_of "$dir" "$work/verbs.results")"
	done
	local nd_pass verbs_pass worse
	nd_pass=$(grep -c "^Pass" "$work/nd.results")
	verbs_pass=$(grep -c "^Pass" "$work/verbs.results")
	if ((nd_pass >= verbs_pass)); then
		pass "nd passes $nd_pass tests, verbs $verbs_pass"
	else
		fail "nd passes $nd_pass tests, verbs $verbs_pass"
	fi
	worse=$(awk -F'\t' 'FNR == NR { if ($1 == "Pass") ok[$2] = 1; next } $1 != "Pass" && ($2 in ok) { print $2 }' \
		"$work/verbs.results" "$work/nd.results")
	if [ -z "$worse" ]; then
		pass "no test that verbs passes fails over nd"
	else
		fail "tests that verbs passes fail over nd: $(echo "$worse" | paste -sd ';')"
	fi
}

case $mode in
check)
	cpi
	finalize
	suite "$@"
	;;
full)
	# Soft-RoCE runs the suite beside verbs; verbs is not compared on
	# soft-iWARP (the issue that brought MPICH in asks it on Soft-RoCE).
	cpi
	finalize
	if [ "$transport" = roce ]; then compare "$@"; else suite "$@"; fi
	;;
suite) suite "$@" ;;
finalize) finalize "$@" ;;
cpi) cpi ;;
compare) compare "$@" ;;
*) die "unknown mode '$mode' (check, full, suite, finalize, cpi or compare)" ;;
esac
closing_line mpich
