#!/bin/bash
# nd_upstream.sh FTDIR BUILDDIR [PROVIDER]: runs libfabric's own conformance
# suite, upstream fabtests installed in FTDIR (util/nd-fabtests builds it),
# where a real RDMA device exists (inside util/nd-guest, or on a host with an
# RDMA NIC), with no environment tuning:
#
#   MSG  runfabtests.sh -t quick, the MSG-endpoint tests, provider PROVIDER
#   RDM  runfabtests.sh -t short, the RDM tests, provider "PROVIDER;ofi_rxm"
#
# PROVIDER is nd (default; loaded from BUILDDIR/.libs) or verbs, for the
# comparison. Prints one line per test, "<suite> <result> <test>", then per
# suite "upstream(<suite>, PROVIDER): P pass, F fail, N notrun".
#
# For nd, the outcome of every test is compared with fabtests/upstream.expect
# (the tests nd does not pass yet, with the reason): a test that fails and is
# not listed, or that is listed and now passes, is an error. Closing line
# "upstream: N passed, M failed" counts those comparisons; exits non-zero
# when any is an error.
#
#   util/nd-guest -- fabtests/nd_upstream.sh ~/.cache/libfabric-nd/fabtests/1.17.0 build/release
set -uo pipefail

ftdir=$(cd "${1:?usage: nd_upstream.sh FTDIR BUILDDIR [PROVIDER]}" && pwd)
builddir=$(cd "${2:?usage: nd_upstream.sh FTDIR BUILDDIR [PROVIDER]}" && pwd)
prov=${3:-nd}
srcdir=$(cd "$(dirname "$0")/.." && pwd)
ip=${ND_GUEST_IP:-10.0.2.15}
limit=${ND_UPSTREAM_TIMEOUT:-120}
expect=$srcdir/fabtests/upstream.expect
version=$(cat "$ftdir/nd-fabtests-version" 2>/dev/null || basename "$ftdir")

if [ "$prov" = nd ]; then
	export FI_PROVIDER_PATH=$builddir/.libs
fi
unset FI_UNIVERSE_SIZE FI_PROVIDER

# runfabtests.sh writes its scratch files in the working directory.
workdir=$(mktemp -d)
trap 'rm -rf "$workdir"' EXIT
cd "$workdir" || exit 1

# The subsets of the issue that brought the suite in: MSG endpoints through
# the provider itself, RDM endpoints through libfabric's rxm over it.
msg_excludes='fi_rdm,-e rdm,-e dgram,fi_dgram,fi_av_,fi_scalable_ep,fi_rdm_'
rdm_excludes='dgram,-e msg,fi_msg'

results=$workdir/results
: >"$results"

# run_suite SUITE PROVIDER-ARG RUNFABTESTS-ARGS...: appends "SUITE RESULT
# NAME" lines to $results; a failed test's output is kept in $workdir.
run_suite() {
	local suite=$1 provarg=$2
	shift 2
	local out=$workdir/$suite.out
	# Each test's outcome is shown as it ends, for a run that takes minutes.
	PATH=$ftdir/bin:$PATH "$ftdir/bin/runfabtests.sh" -v -T "$limit" "$@" \
		-s "$ip" -c "$ip" "$provarg" 2>&1 | tee "$out" | awk -v suite="$suite" '
		/^- name:/ { sub(/^- name: */, ""); name = $0 }
		/^  result:/ { sub(/^  result: */, ""); r = $0; sub(/ .*/, "", r) }
		/^  time:/ { if (r != "Excluded") { printf "  %s %-8s %4ss %s\n", suite, r, $2, name; fflush() } }'
	awk -v suite="$suite" '
		/^- name:/ { sub(/^- name: */, ""); name = $0 }
		/^  result:/ { sub(/^  result: */, ""); r = $0; sub(/ .*/, "", r);
			       print suite, r, name }' "$out" >>"$results"
	local p f n
	p=$(grep -c "^$suite Pass " "$results")
	f=$(grep -c "^$suite Fail " "$results")
	n=$(grep -c "^$suite Notrun " "$results")
	echo "upstream($suite, $prov, fabtests $version): $p pass, $f fail, $n notrun"
}

run_suite MSG "$prov" -t quick -e "$msg_excludes"
run_suite RDM "$prov;ofi_rxm" -t short -e "$rdm_excludes"

[ "$prov" = nd ] || exit 0

# Compare with the expectations: "VERSION SUITE RESULT TEST NAME... # reason"
# lines, VERSION a fabtests version or '*', RESULT Fail or Notrun. A test not
# listed is expected to pass; any other outcome than the expected one is an
# error, so the list shrinks as nd learns and cannot go stale.
expected_result() { # SUITE NAME
	awk -v v="$version" -v s="$1" -v n="$2" '
		/^#/ || NF < 4 { next }
		{ line = $0; sub(/ *#.*/, "", line); split(line, f, " ");
		  t = line; sub(/^[^ ]+ +[^ ]+ +[^ ]+ +/, "", t);
		  if ((f[1] == v || f[1] == "*") && f[2] == s && t == n) { print f[3]; exit } }' \
		"$expect"
}

passed=0
failed=0
while read -r suite result name; do
	[ "$result" = Excluded ] && continue
	expected=$(expected_result "$suite" "$name")
	expected=${expected:-Pass}
	if [ "$result" = "$expected" ]; then
		passed=$((passed + 1))
		continue
	fi
	failed=$((failed + 1))
	if [ "$expected" = Pass ]; then
		echo "FAIL: $suite $name: $result, and fabtests/upstream.expect does not list it"
		awk -v n="$name" '/^- name:/ { x = $0; sub(/^- name: */, "", x); on = (x == n) }
			on' "$workdir/$suite.out" 2>/dev/null | head -80 | sed 's/^/    /'
	else
		echo "FAIL: $suite $name: $result, expected $expected: update fabtests/upstream.expect"
	fi
done <"$results"
echo "upstream: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
