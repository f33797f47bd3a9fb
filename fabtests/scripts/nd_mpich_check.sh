#!/bin/bash
# nd_mpich_check.sh: nd_mpich.sh's reading of MPICH's runtests, on the
# host, with a stand-in for runtests whose answers are known. runtests ends
# a run early once enough of its runs timed out; the stand-in ends every
# run after three tests the same way, so that nd_mpich.sh must run the
# rest in new runs until every listed test has a result, each judged
# against mpich.expect (a pass, a timeout mpich.expect does not allow, a
# failure). A runtests that runs nothing must fail the directory, not
# loop. Prints "PASS: ..." or "FAIL: ..." per check, closes with
# "mpich-script: N passed, M failed" and exits non-zero on any failure.
# Runs in a second; needs nothing beyond bash and awk.
#
#   fabtests/scripts/nd_mpich_check.sh [-h|--help]
#
# Environment: reads no variable of its own. Sets nd_mpich.sh's
# ND_MPICH_TIER (full), ND_GUEST (0) and ND_MPICH_HOSTS (empty) for its
# runs, and for the stand-in runtests ND_FAKE_LOG (the file each run's
# list name is added to) and ND_FAKE_PER_RUN (the tests a run reaches, 3).
set -uo pipefail
# pass, fail, closing_line
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
PROG=nd_mpich_check
top=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A stand-in MPICH: what nd_mpich.sh looks for, and a runtests that runs
# at most ND_FAKE_PER_RUN tests of its list a run, answering each from its
# name (timeout*: the launcher's timeout, fail*: a failure, else a pass).
mpich=$work/mpich
mkdir -p "$mpich/prefix/bin" "$mpich/test/mpi/fake" "$work/build/.libs"
echo "4.0.2-3" >"$mpich/nd-mpich-done"
printf '#!/bin/sh\nexit 0\n' >"$mpich/prefix/bin/mpiexec"
chmod 755 "$mpich/prefix/bin/mpiexec"
cat >"$mpich/test/mpi/runtests" <<'EOF'
#!/bin/bash
for arg; do
	case $arg in
	-tests=*) list=${arg#-tests=} ;;
	-tapfile=*) tap=${arg#-tapfile=} ;;
	-mpiexec=*) mpiexec=${arg#-mpiexec=} ;;
	esac
done
echo "$list" >>"$ND_FAKE_LOG"
echo "TAP version 13" >"$tap"
n=0
while read -r prog np rest; do
	if ((n == ${ND_FAKE_PER_RUN:-3})); then
		echo "Terminating test because of too many timeout failures" >&2
		break
	fi
	n=$((n + 1))
	args=
	for f in $rest; do [[ $f == arg=* ]] && args="$args ${f#arg=}"; done
	echo "$mpiexec -n $np ./$prog$args"
	case $prog in
	timeout*)
		echo "not ok $n - ./$prog $np # time=61.2" >>"$tap"
		echo "## [mpiexec@host] APPLICATION TIMED OUT, TIMEOUT = 60s" >>"$tap"
		;;
	late*)
		# Ended by the launcher as it printed its verdict, before the
		# launcher said so.
		echo "not ok $n - ./$prog $np # time=60.4" >>"$tap"
		echo "##  No Errors" >>"$tap"
		;;
	slowfail*)
		echo "not ok $n - ./$prog $np # time=75.0" >>"$tap"
		echo "## Found 1 errors" >>"$tap"
		;;
	fail*)
		echo "not ok $n - ./$prog $np # time=2.0" >>"$tap"
		echo "## Found 1 errors" >>"$tap"
		;;
	*) echo "ok $n - ./$prog $np # time=1.0" >>"$tap" ;;
	esac
done <"$list"
EOF
chmod 755 "$mpich/test/mpi/runtests"
cat >"$mpich/test/mpi/fake/testlist" <<'EOF'
one 2
two 4 arg=-count=10
timeout_three 3
four 2
single 1
fail_five 2
six 4
seven 2
late_eight 2
slowfail_nine 2 timeLimit=300
EOF

run() { # OUTPUT-FILE, then nd_mpich.sh's arguments after MPICH BUILDDIR
	local out=$1
	shift
	ND_FAKE_LOG=$work/runs ND_MPICH_TIER=full ND_GUEST=0 ND_MPICH_HOSTS='' \
		"$top/fabtests/scripts/nd_mpich.sh" "$mpich" "$work/build" "$@" >"$out" 2>&1
}

# Nine tests of 2 to 4 processes, three a run: three runs of runtests.
: >"$work/runs"
run "$work/out" suite "nd;ofi_rxm" fake
rc=$?
results=$(grep -cE '^(PASS|FAIL): fake/' "$work/out")
if [ "$results" = 9 ]; then
	pass "every test listed has a result though runtests stops after three"
else
	fail "every test listed has a result though runtests stops after three (9 expected, $results seen)"
	sed 's/^/    /' "$work/out"
fi
runs=$(wc -l <"$work/runs")
if [ "$runs" = 3 ]; then pass "the rest run in new runs of runtests (3)"; else fail "runs of runtests: 3 expected, $runs seen"; fi
if grep -q "fake: runtests stopped after 3 of 9 (Terminating test because of too many timeout failures): the other 6 in a new run" "$work/out" &&
	grep -q "fake: runtests stopped after 6 of 9" "$work/out"; then
	pass "each early end is said, with runtests' reason"
else
	fail "each early end is said, with runtests' reason"
	sed 's/^/    /' "$work/out"
fi
for want in "PASS: fake/one 2 (1 s)" "PASS: fake/two 4 -count=10 (1 s)" \
	"FAIL: fake/timeout_three 3 (61 s): Timeout, and mpich.expect does not list it" \
	"PASS: fake/four 2 (1 s)" "FAIL: fake/fail_five 2 (2 s): Fail, and mpich.expect does not list it" \
	"PASS: fake/six 4 (1 s)" "PASS: fake/seven 2 (1 s)" \
	"FAIL: fake/late_eight 2 (60 s): Timeout, and mpich.expect does not list it" \
	"FAIL: fake/slowfail_nine 2 (75 s): Fail, and mpich.expect does not list it"; do
	if grep -qxF "$want" "$work/out"; then pass "judged: $want"; else fail "not judged as expected: $want"; fi
done
if grep -q "^FAIL: fake/single" "$work/out" || grep -q "^PASS: fake/single" "$work/out"; then
	fail "a test of one process was run"
else
	pass "a test of one process is not run"
fi
if [ "$rc" -ne 0 ] && grep -q "^mpich: 5 passed, 4 failed" "$work/out"; then
	pass "the run fails on the four failures, with its count"
else
	fail "the run fails on the four failures, with its count (exit $rc)"
	tail -3 "$work/out" | sed 's/^/    /'
fi

# A runtests that runs nothing: the directory fails, once.
: >"$work/runs"
ND_FAKE_PER_RUN=0 run "$work/out0" suite "nd;ofi_rxm" fake
rc=$?
if [ "$rc" -ne 0 ] && grep -q "^FAIL: fake: runtests wrote no results\|^FAIL: fake: runtests ran none of the 9 tests left" "$work/out0" &&
	[ "$(wc -l <"$work/runs")" = 1 ]; then
	pass "a runtests that runs nothing fails the directory, without looping"
else
	fail "a runtests that runs nothing fails the directory, without looping (exit $rc, $(wc -l <"$work/runs") runs)"
	sed 's/^/    /' "$work/out0"
fi

closing_line mpich-script
