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
# For nd, the outcome of every test is compared with fabtests/test_configs/nd/upstream.expect
# (the tests nd does not pass yet, with the reason): a test that fails and is
# not listed, or that is listed and now passes, is an error. Closing line
# "upstream: N passed, M failed" counts those comparisons; exits non-zero
# when any is an error.
#
#   util/nd-guest -- fabtests/scripts/nd_upstream.sh ~/.cache/libfabric-nd/fabtests/1.17.0 build/release
#
# ND_UPSTREAM_REMOTE=SERVER,CLIENT runs the tests with their server on host
# SERVER and their client on host CLIENT, both reached by ssh (runfabtests.sh's
# own remote mode, as on a cluster; util/nd-cluster's nodes nd-node0,
# nd-node1), on the addresses those names resolve to; FTDIR and BUILDDIR
# must be at the same paths there. The subsets are then the tests that move
# data (see msg_set below). The same expectations apply: a test that behaves
# differently across hosts is a finding, not an exclusion.
#
# Environment:
#   ND_UPSTREAM_REMOTE      SERVER,CLIENT (above; unset: this host alone)
#   ND_UPSTREAM_REMOTE_SET  across hosts: quick keeps five tests, data runs
#                           the fifteen that move data (quick)
#   ND_UPSTREAM_TIMEOUT     seconds each test may take (120)
#   ND_UPSTREAM_REPEATS     all: every test of the sets; dc: not the plain
#                           variant of a test that also runs byte-verifying
#                           (-v), which stands for it, with or without -U;
#                           none: nor rxm's
#                           delivery-complete repeats (-U) (all; util/nd-check
#                           runs none, and in its full tier Debian 13 with
#                           dc, so that each test runs there at least once)
#   ND_GUEST                1 in a guest (util/nd-guest sets it): run as
#                           root there, one host's programs run as the test
#                           bed's user (nd_exec_as_site_user)
#   ND_GUEST_TRANSPORT      iwarp: judged against upstream.iwarp.expect, the
#                           sets changed (roce; util/nd-guest sets it)
#   ND_GUEST_IP             this host's address (10.0.2.15; util/nd-guest
#                           sets it)
#   ND_UPSTREAM_SERVER_IP, ND_UPSTREAM_CLIENT_HOST, ND_UPSTREAM_AS_USER
#                           set here for fabtests/scripts/nd_ssh_after_listen
#                           (internal); its ND_UPSTREAM_LISTEN_WAIT (30)
#                           applies
set -uo pipefail
# nd_guest_ip, nd_wait_for_listener
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac

ftdir=$(cd "${1:?usage: nd_upstream.sh FTDIR BUILDDIR [PROVIDER]}" && pwd)
builddir=$(cd "${2:?usage: nd_upstream.sh FTDIR BUILDDIR [PROVIDER]}" && pwd)
prov=${3:-nd}
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
ip=$(nd_guest_ip)
remote=${ND_UPSTREAM_REMOTE:-}
limit=${ND_UPSTREAM_TIMEOUT:-120}
# The expectations of the guest's transport: Soft-RoCE's (and InfiniBand's)
# or iWARP's (util/nd-guest --transport iwarp sets ND_GUEST_TRANSPORT).
case ${ND_GUEST_TRANSPORT:-roce} in
iwarp) expect=$srcdir/fabtests/test_configs/nd/upstream.iwarp.expect ;;
*) expect=$srcdir/fabtests/test_configs/nd/upstream.expect ;;
esac
version=$(cat "$ftdir/nd-fabtests-version" 2>/dev/null || basename "$ftdir")

if [ "$prov" = nd ]; then
	export FI_PROVIDER_PATH=$builddir/.libs
fi
unset FI_UNIVERSE_SIZE FI_PROVIDER

# Where the two sides run: this host on its own address, or the two hosts
# of ND_UPSTREAM_REMOTE by ssh, each test's processes given the provider
# path explicitly (-E) rather than trusting ssh to carry the environment.
where=(-s "$ip" -c "$ip" -p "$ftdir/bin")
hosts=(nd-local-server nd-local-client)
server_ip=$ip client_host=nd-local-client
if [ -n "$remote" ]; then
	s_host=${remote%%,*}
	c_host=${remote#*,}
	s_ip=$(getent ahostsv4 "$s_host" | awk 'NR == 1 { print $1 }')
	c_ip=$(getent ahostsv4 "$c_host" | awk 'NR == 1 { print $1 }')
	if [ -z "$s_ip" ] || [ -z "$c_ip" ] || [ "$s_host" = "$remote" ]; then
		say "ND_UPSTREAM_REMOTE=$remote: needs SERVER,CLIENT host names that resolve"
		exit 2
	fi
	where=(-s "$s_ip" -c "$c_ip" -p "$ftdir/bin")
	[ -n "${FI_PROVIDER_PATH:-}" ] && where+=(-E "FI_PROVIDER_PATH=$FI_PROVIDER_PATH")
	hosts=("$s_host" "$c_host")
	server_ip=$s_ip client_host=$c_host
	echo "upstream: servers on $s_host ($s_ip), clients on $c_host ($c_ip)"
fi

# runfabtests.sh writes its scratch files in the working directory.
workdir=$(mktemp -d)
trap 'rm -rf "$workdir"' EXIT
cd "$workdir" || exit 1

# On one host in a guest run as root, each test's programs run as the test
# bed's user with a site's memory-lock limit (nd_exec_as_site_user in
# nd_ssh_after_listen), as a cluster's users run them; runfabtests.sh and
# what watches the programs stay root's. The user reaches the fabtests and
# the provider through their paths, and the programs start in the working
# directory. Across hosts (nodes of util/nd-cluster) the commands log in
# to the nodes as the user (ssh -l), whom util/guest/cluster-node gives the
# nodes' key and the test bed's cache; their memory-lock limit is sshd's,
# a site's (unlimited) in the guests.
if [[ ${ND_GUEST:-0} == 1 && $(id -u) == 0 ]]; then
	nd_open_to_user "$ftdir/bin" "$builddir/.libs" || exit 1
	chmod 755 "$workdir"
	export ND_UPSTREAM_AS_USER=1
fi

# runfabtests.sh's commands go through fabtests/scripts/nd_ssh_after_listen,
# on one host (the two sides named nd-local-server and nd-local-client, run
# here) as across hosts: a test's server starts with no program of the test
# before it still running, and across hosts a test's client starts once its
# server listens, not one second after the server's ssh was started.
mkdir -p "$workdir/ssh-bin"
ln -s "$srcdir/fabtests/scripts/nd_ssh_after_listen" "$workdir/ssh-bin/ssh"
export PATH=$workdir/ssh-bin:$PATH ND_UPSTREAM_SERVER_IP=$server_ip ND_UPSTREAM_CLIENT_HOST=$client_host

# The subsets of the issue that brought the suite in: MSG endpoints through
# the provider itself, RDM endpoints through libfabric's rxm over it.
msg_excludes='fi_rdm,-e rdm,-e dgram,fi_dgram,fi_av_,fi_scalable_ep,fi_rdm_'
rdm_excludes='dgram,-e msg,fi_msg'

# The test sets: quick (unit, functional and short tests) for MSG, short for
# RDM. Across hosts, where a test costs 10-20 s in emulated guests (two ssh
# logins and the programs' start), the subset is the tests that move data
# over the wire, once each: the short sets (pingpong, bandwidth, RMA,
# atomics, multi-receive), with the byte-verifying variant (-v) of each
# pair and without rxm's delivery-complete repeats (-U). The unit tests run
# on one host and the functional ones are checked in the one-host run.
#
# At 35-55 s per test even these fifteen take about 11 minutes, so by default
# (ND_UPSTREAM_REMOTE_SET=quick) the cross-host run keeps five of them:
# a byte-verifying ping-pong and an RDMA read of each subset, and MSG's
# multi-receive buffers; ND_UPSTREAM_REMOTE_SET=data runs the fifteen.
msg_set=quick
rdm_set=short
# On soft-iWARP (a stage of its own beside the Soft-RoCE ones) the same
# sets, less the repeats that add no coverage there: each test's
# byte-verifying variant (-v) stands for the plain one, and rxm's
# delivery-complete repeats (-U) are Soft-RoCE's and the cross-node run's.
if [ "${ND_GUEST_TRANSPORT:-roce}" = iwarp ] && [ -z "$remote" ]; then
	msg_excludes+=',^fi_msg_pingpong -I 5$,^fi_msg_bw -I 5$'
	rdm_excludes+=', -U$,^fi_rdm_pingpong -I 5$,^fi_rdm_tagged_pingpong -I 5$,^fi_rdm_tagged_bw -I 5$'
fi
if [ -n "$remote" ]; then
	msg_set=short
	msg_excludes+=',^fi_msg_pingpong -I 5$,^fi_msg_bw -I 5$'
	rdm_excludes+=', -U$,^fi_rdm_pingpong -I 5$,^fi_rdm_tagged_pingpong -I 5$,^fi_rdm_tagged_bw -I 5$'
	if [ "${ND_UPSTREAM_REMOTE_SET:-quick}" = quick ]; then
		msg_excludes+=',^fi_msg_bw,^fi_rma_bw -e msg -o write'
		rdm_excludes+=',^fi_rma_bw -e rdm -o write,^fi_rdm_atomic,^fi_rdm_cntr_pingpong,^fi_multi_recv -e rdm,^fi_rdm_pingpong,^fi_rdm_tagged_bw'
	fi
fi

case ${ND_UPSTREAM_REPEATS:-all} in
all) ;;
dc | none)
	msg_excludes+=',^fi_msg_pingpong -I 5$,^fi_msg_bw -I 5$'
	rdm_excludes+=',^fi_rdm_pingpong -I 5$,^fi_rdm_tagged_pingpong -I 5$,^fi_rdm_tagged_bw -I 5$'
	# The same rule among the delivery-complete repeats: "-v -U" stands
	# for "-U". fabtests 2.x has byte-verifying atomics too.
	rdm_excludes+=',^fi_rdm_pingpong -I 5 -U$,^fi_rdm_tagged_pingpong -I 5 -U$,^fi_rdm_tagged_bw -I 5 -U$'
	case $version in
	1.*) ;;
	*) rdm_excludes+=',^fi_rdm_atomic -I 5 -o all$,^fi_rdm_atomic -I 5 -o all -U$' ;;
	esac
	[ "$ND_UPSTREAM_REPEATS" = dc ] || rdm_excludes+=', -U$'
	;;
*)
	say "ND_UPSTREAM_REPEATS=$ND_UPSTREAM_REPEATS: say all, dc or none"
	exit 2
	;;
esac

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
		"${where[@]}" "$provarg" "${hosts[@]}" 2>&1 | tee "$out" | awk -v suite="$suite" '
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
	echo "upstream($suite, $prov, fabtests $version${remote:+, across $remote}): $p pass, $f fail, $n notrun"
}

run_suite MSG "$prov" -t "$msg_set" -e "$msg_excludes"
run_suite RDM "$prov;ofi_rxm" -t "$rdm_set" -e "$rdm_excludes"

# A test whose client was refused because nobody listened yet runs once
# more, on its own, its client started once its server listens. Two starts
# race when the host's CPUs are taken (the other lane of the check):
#   - runfabtests.sh starts the client one second after the server, and on
#     one host the client does not wait (nd_ssh_after_listen): a server
#     slower than that refuses the client's out-of-band socket ("connect:
#     Connection refused") or its fi_connect;
#   - fabtests' MSG tests with an out-of-band socket (fi_unexpected_msg,
#     fi_bw, fi_multi_ep, fi_multi_recv with -e msg) have the client call
#     fi_connect as soon as that socket's handshake is done, while the
#     server still has fi_getinfo, its fabric and fi_listen to go; no wait
#     outside the programs can order those two.
# One other race runs once more, fi_cq_data's: its server returns as soon
# as it has read the message's completion, and closes. Soft-RoCE's
# responder posts that completion before it sends the message's
# acknowledgement (rxe_resp.c: do_complete, then acknowledge), so a server
# that closes in between leaves the client's send unacknowledged, and the
# client's send completes in error (flushed) though the server reported
# the data. It is rerun only when the server said both checks passed.
# A second failure, or any other failure, stands.
refused='eq_readerr 111 \(Connection refused\), provider errno: (111|65544) |^ *connect: Connection refused$'
rerun_note=$workdir/reruns
: >"$rerun_note"
rerun_reason() { # NAME BLOCK: why the test runs again, if it does
	if grep -qE "$refused" <<<"$2"; then
		echo "the first run's client was refused before its server listened"
	elif [[ $1 == fi_cq_data* ]] && grep -q "remote_cq_data: success" <<<"$2" &&
		grep -q "fi_cq_data_entry.len verify: success" <<<"$2" &&
		grep -q "provider errno: 5 (Work Request Flushed Error)" <<<"$2"; then
		echo "the first run's server closed before Soft-RoCE acknowledged the send it had received"
	else
		return 1
	fi
}
rerun_raced() { # SUITE
	local suite=$1 name block s_cmd c_cmd env_prefix= s_pid c_ret s_ret start reason
	while read -r name; do
		block=$(awk -v n="$name" '/^- name:/ { x = $0; sub(/^- name: */, "", x); on = (x == n) }
			on' "$workdir/$suite.out")
		reason=$(rerun_reason "$name" "$block") || continue
		s_cmd=$(sed -n 's/^ *server_cmd: *//p' <<<"$block" | head -1)
		c_cmd=$(sed -n 's/^ *client_cmd: *//p' <<<"$block" | head -1)
		[ -n "$s_cmd" ] && [ -n "$c_cmd" ] || continue
		[ -n "$remote" ] && [ -n "${FI_PROVIDER_PATH:-}" ] && env_prefix="export FI_PROVIDER_PATH=$FI_PROVIDER_PATH;"
		start=$SECONDS
		timeout "$limit" ssh -n "${hosts[0]}" "$env_prefix $s_cmd" >"$workdir/rerun-server.out" 2>&1 &
		s_pid=$!
		sleep 1
		[ -n "$remote" ] || nd_wait_for_listener "$(basename "${s_cmd%% *}")" 30 1
		timeout "$limit" ssh -n "${hosts[1]}" "$env_prefix $c_cmd" >"$workdir/rerun-client.out" 2>&1
		c_ret=$?
		if [ "$c_ret" -ne 0 ] && kill -0 "$s_pid" 2>/dev/null; then
			sleep 2
			kill -9 "$s_pid" 2>/dev/null
		fi
		wait "$s_pid"
		s_ret=$?
		if [ "$s_ret" -eq 0 ] && [ "$c_ret" -eq 0 ]; then
			echo "  $suite Pass     $((SECONDS - start))s $name (second run: $reason)"
			echo "$suite $name" >>"$rerun_note"
			awk -v s="$suite" -v n="$name" '{ line = $0 } $1 == s && $2 == "Fail" {
				t = $0; sub(/^[^ ]+ +[^ ]+ +/, "", t); if (t == n) line = s " Pass " n } { print line }' \
				"$results" >"$results.new" && mv "$results.new" "$results"
		else
			echo "  $suite Fail     $((SECONDS - start))s $name (second run too: server $s_ret, client $c_ret)"
			sed 's/^/      rerun server: /' "$workdir/rerun-server.out" | tail -5
			sed 's/^/      rerun client: /' "$workdir/rerun-client.out" | tail -5
		fi
	done < <(awk -v s="$suite" '$1 == s && $2 == "Fail" { sub(/^[^ ]+ +[^ ]+ +/, ""); print }' "$results")
}
rerun_raced MSG

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
		echo "FAIL: $suite $name: $result, and upstream/$(basename "$expect") does not list it"
		awk -v n="$name" '/^- name:/ { x = $0; sub(/^- name: */, "", x); on = (x == n) }
			on' "$workdir/$suite.out" 2>/dev/null | head -80 | sed 's/^/    /'
	else
		echo "FAIL: $suite $name: $result, expected $expected: update upstream/$(basename "$expect")"
	fi
done <"$results"
if [ -s "$rerun_note" ]; then
	echo "upstream: passed on a second run (the first lost a race said above): $(sed 's/^[^ ]* //' "$rerun_note" | paste -sd';')"
fi
echo "upstream: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
