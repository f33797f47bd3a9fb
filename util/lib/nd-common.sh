# nd-common.sh: the one set of shell helpers the project's scripts share,
# sourced by every script of util/ and fabtests/scripts/, the same way, right
# after its `set` line and before it handles --help (the path holds from any
# directory, and through a symbolic link to the script, as nd_upstream.sh
# installs nd_ssh_after_listen as `ssh`):
#   util/:             source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib/nd-common.sh"
#   fabtests/scripts/: source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
# It holds:
#   - usage: a script's --help, the comment block its text opens with;
#   - messages: say, die (prefixed with $PROG, else the script's name;
#     die exits $DIE_STATUS, default 1);
#   - the test bed's addresses, defined here once;
#   - tallies: pass, fail, add_counts, run_check (one named check whose
#     output is shown only when it fails), closing_line;
#   - result parsing: counts_from_line (a "PREFIX: N passed, M failed"
#     line), counts_from_criterion (Criterion's "Synthesis:" lines),
#     counts_from_verdicts (PASS:/FAIL: lines);
#   - valgrind_clean: a command under valgrind with the project's flags;
#   - apt_from_installed: apt-get for a local package in the guest;
#   - nd_wait_for_listener: until a test program's server listens;
#   - host_mirror: the Debian mirror the host's apt sources name;
#   - nd_as_user: a command as the test bed's unprivileged user, under
#     Debian's default limits (nd_as_site_user: with a site's raised
#     memory-lock limit; nd_exec_as_user: in place of a wrapper script;
#     nd_open_to_user: the user reaches root's files through their path);
#   - nd_ompi_env: Open MPI's settings for a job over a libfabric provider
#     (need_mpi_over_ssh: its tools, for a job started over ssh).
# Works under `set -u` and without `set -e`; defines no traps.

# Addresses of the test bed (util/nd-guest and util/nd-cluster set them up;
# inside a guest ND_GUEST_IP and ND_GUEST_IP6 hold the node's own).
ND_GUEST_IP_DEFAULT=10.0.2.15
ND_GUEST_IP6_DEFAULT=fd00::15
# util/nd-cluster's node I has 10.0.3.(ND_CLUSTER_HOST_BASE + I).
ND_CLUSTER_NET=10.0.3
ND_CLUSTER_HOST_BASE=10
ND_CLUSTER_NET6=fd00::3
nd_guest_ip() { echo "${ND_GUEST_IP:-$ND_GUEST_IP_DEFAULT}"; }
nd_node_ip() { echo "$ND_CLUSTER_NET.$((ND_CLUSTER_HOST_BASE + $1))"; }

# usage: the script's help, the comment block from its second line to its
# first `set -` line, less the "# " of each line.
usage() { sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

say() { printf '%s: %s\n' "${PROG:-${0##*/}}" "$*" >&2; }
# die MESSAGE: says "error: MESSAGE" and exits $DIE_STATUS (1 unless the
# script sets it: util/nd-guest's harness failures are 125).
die() {
	say "error: $*"
	exit "${DIE_STATUS:-1}"
}

# Tallies of the script that sources this file.
passed=${passed:-0}
failed=${failed:-0}

# add_counts PASSED FAILED
add_counts() {
	passed=$((passed + $1))
	failed=$((failed + $2))
}
pass() {
	echo "PASS: $*"
	add_counts 1 0
}
fail() {
	echo "FAIL: $*"
	add_counts 0 1
}

# closing_line PREFIX: prints "PREFIX: N passed, M failed" and returns
# non-zero when anything failed.
closing_line() {
	echo "$1: $passed passed, $failed failed"
	[ "$failed" -eq 0 ]
}

# run_check NAME COMMAND...: one check. Its output is kept in a file and
# shown (last 60 lines) only when it fails; the line names its time.
run_check() {
	local name=$1 log start=$SECONDS
	shift
	log=$(mktemp)
	if "$@" >"$log" 2>&1; then
		pass "$name ($((SECONDS - start))s)"
	else
		fail "$name ($((SECONDS - start))s)"
		sed 's/^/    /' "$log" | tail -60
	fi
	rm -f "$log"
}

# counts_from_line PREFIX FILE: "N M" from the last "PREFIX: N passed, M
# failed" line of FILE; nothing when there is none.
counts_from_line() {
	local line
	line=$(grep -a "^$1: [0-9]* passed, [0-9]* failed" "$2" 2>/dev/null | tail -1)
	[ -n "$line" ] || return 0
	sed -n 's/^.*: \([0-9]*\) passed, \([0-9]*\) failed.*/\1 \2/p' <<<"$line"
}

# counts_from_criterion FILE...: "N M" summed over the Criterion
# "Synthesis: Tested: T | Passing: P | ..." lines of FILEs (M = T - P).
counts_from_criterion() {
	local p=0 f=0 t ok
	while read -r t ok; do
		p=$((p + ok))
		f=$((f + t - ok))
	done < <(grep -ah "Synthesis:" "$@" 2>/dev/null |
		sed -n 's/.*Tested: \([0-9]*\).*Passing: \([0-9]*\).*/\1 \2/p')
	echo "$p $f"
}

# counts_from_verdicts FILE: "N M", the PASS: and FAIL: verdict lines of
# FILE (anywhere on a line: util/nd-cluster prefixes its nodes' lines).
counts_from_verdicts() {
	echo "$(grep -ac "PASS: " "$1") $(grep -ac "FAIL: " "$1")"
}

# valgrind_clean COMMAND...: COMMAND under valgrind, failing on any error or
# definite/indirect leak (ND_VALGRIND, for a command that wraps it).
ND_VALGRIND=(valgrind --quiet --error-exitcode=99 --leak-check=full
	--errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect)
valgrind_clean() { "${ND_VALGRIND[@]}" "$@"; }

# nd_wait_for_listener PROGRAM SECONDS [RUNNING]: returns once PROGRAM
# listens on TCP (an out-of-band socket) or through rdma_cm, after SECONDS,
# or once PROGRAM, seen running, has ended (a server that gave up: no
# listener ever comes). RUNNING 1 says it was started already, so not
# seeing it means it ended; 0 (default) waits to see it start (across
# hosts its ssh login may not have started it yet). ss, rdma and pgrep
# name a process by its first 15 characters.
nd_wait_for_listener() {
	local comm=${1:0:15} deadline=$((SECONDS + $2)) seen=${3:-0}
	until ss -ltnp 2>/dev/null | grep -q "((\"$comm\"" ||
		rdma resource show cm_id 2>/dev/null | grep "comm $comm" | grep -q LISTEN; do
		((SECONDS < deadline)) || return 0
		if pgrep -x "$comm" >/dev/null; then
			seen=1
		elif ((seen)); then
			return 0
		fi
		sleep 0.2
	done
}

# need_tool TOOL PACKAGE: true when TOOL is on PATH (or an executable path);
# otherwise says which Debian package brings it, as a FAIL line of its own.
need_tool() {
	if command -v "$1" >/dev/null 2>&1; then return 0; fi
	fail "$1 not found (Debian package $2)"
	return 1
}

# need_mpi_over_ssh: true when Open MPI's compiler and launcher and sshd are
# there, for a job node 0 starts over ssh on every node; else need_tool's
# FAIL line names the first one missing.
need_mpi_over_ssh() {
	need_tool mpicc libopenmpi-dev && need_tool mpirun openmpi-bin && need_tool /usr/sbin/sshd openssh-server
}

# apt_from_installed ARGS...: apt-get for a package file whose dependencies
# are installed (the package tests, the demo), as a user would run it, but
# with no package sources: reading the archive's lists cost 26 s to install
# and 20 s to remove in the emulated guest, against 11 and 11. In the guest
# (ND_GUEST=1), whose root is a throw-away overlay, man-db's index rebuild
# that apt triggers (over a minute there) is switched off first; the pages
# themselves are still installed.
apt_from_installed() {
	if [[ ${ND_GUEST:-0} == 1 ]]; then
		rm -f /var/lib/man-db/auto-update
	fi
	DEBIAN_FRONTEND=noninteractive apt-get -o Dir::Etc::SourceList=/dev/null \
		-o Dir::Etc::SourceParts=/nonexistent "$@"
}

# The Debian mirror of the host's own apt sources (deb822 or one-line).
host_mirror() {
	local url
	url=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)\/\{0,1\}$/\1/p' \
		/etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
	[[ -n $url ]] || url=$(sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\{0,1\}\([^[:space:]]*\/debian\)\/\{0,1\}[[:space:]].*/\2/p' \
		/etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -1)
	[[ -n $url ]] || die "no Debian mirror found in the host's apt sources"
	echo "$url"
}

# The test bed's unprivileged user: the device tests run as it, as the users
# of an RDMA cluster run, not as root (root has CAP_IPC_LOCK, which lifts
# the memory-lock limit every user meets).
ND_TEST_USER=nd-user
# Its home: nothing of the user's lives there but what a guest puts in it
# (util/guest/cluster-node: its ssh key and settings).
ND_TEST_USER_HOME=/tmp
# nd_as_site_user COMMAND...: nd_as_user with the memory-lock limit a site
# sets for its RDMA users (unlimited): what ofi_rxm's defaults need.
nd_as_site_user() { ND_USER_MEMLOCK=unlimited nd_as_user "$@"; }
nd_exec_as_site_user() { ND_USER_MEMLOCK=unlimited nd_exec_as_user "$@"; }

# nd_as_user COMMAND...: COMMAND as ND_TEST_USER, without capabilities,
# under Debian's default limits for a user: 8 MiB of locked memory, 1024
# open files (524288 at most). ND_USER_MEMLOCK (KiB, or "unlimited")
# replaces the 8 MiB where a command runs as a site's RDMA users do, whose
# memlock limit the site raises in /etc/security/limits.conf (ofi_rxm's
# buffer pool alone is 16 MiB: docs/limits.md). In a guest run as root (ND_GUEST=1) the
# user is made on first use (the guest's root is a throw-away overlay);
# elsewhere COMMAND runs as whoever runs the script, under their limits.
nd_as_user() {
	if [[ ${ND_GUEST:-0} != 1 || $(id -u) != 0 ]]; then
		"$@"
		return
	fi
	(nd_exec_as_user "$@")
}

# nd_make_test_user: makes ND_TEST_USER where it does not exist yet (as
# root, in a guest); non-zero with a message when useradd fails.
nd_make_test_user() {
	id -u "$ND_TEST_USER" >/dev/null 2>&1 && return 0
	useradd --no-create-home --home-dir "$ND_TEST_USER_HOME" --shell /bin/bash "$ND_TEST_USER" && return 0
	echo "nd_as_user: useradd $ND_TEST_USER failed" >&2
	return 1
}

# nd_exec_as_user COMMAND...: nd_as_user in place of the calling shell
# (exec), for a wrapper script: a signal to the wrapper (timeout's) then
# reaches COMMAND itself. Status 125 when the user cannot be made.
nd_exec_as_user() {
	[[ ${ND_GUEST:-0} != 1 || $(id -u) != 0 ]] && exec "$@"
	nd_make_test_user || exit 125
	ulimit -Hn 524288 && ulimit -Sn 1024 && ulimit -l "${ND_USER_MEMLOCK:-8192}" || exit 125
	exec setpriv --reuid="$ND_TEST_USER" --regid="$ND_TEST_USER" --init-groups --inh-caps=-all \
		env HOME="$ND_TEST_USER_HOME" USER="$ND_TEST_USER" LOGNAME="$ND_TEST_USER" "$@"
}

# nd_open_to_user PATH...: in a guest run as root, opens each PATH's
# directories, and those above it, to other users (o+x) so that
# ND_TEST_USER reaches programs root built under /root/.cache. The guest's
# root is a throw-away overlay of the host's, so the modes change there
# only; elsewhere nothing changes (whoever runs the script already reaches
# them). Non-zero with a message when a chmod fails.
nd_open_to_user() {
	[[ ${ND_GUEST:-0} != 1 || $(id -u) != 0 ]] && return 0
	local d
	for d in "$@"; do
		while [ "$d" != / ] && [ "$d" != . ]; do
			chmod o+x "$d" || { echo "nd_open_to_user: chmod o+x $d failed" >&2; return 1; }
			d=$(dirname "$d")
		done
	done
}

# nd_ompi_env PROVIDER: exports Open MPI's settings for a job over the
# libfabric provider PROVIDER ("nd;ofi_rxm": libfabric's RDM layer over nd),
# for mpirun and every rank it starts (across nodes, util/guest/cluster-node's
# ssh passes OMPI_* on). Environment rather than mpirun options: the same
# spelling works for Open MPI 4.1 (Debian 12) and 5 (Debian 13).
#   - pml cm, mtl ofi: point-to-point traffic goes through Open MPI's OFI
#     MTL, restricted to PROVIDER (mtl_ofi_provider_include); Open MPI fails
#     the job when no provider of that name is found, so a pass means
#     PROVIDER carried every byte;
#   - btl self: only the intra-node transports for Open MPI's own byte
#     transfer layer: the point-to-point traffic is the MTL's;
#   - OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM): the guests run everything as root,
#     which mpirun otherwise refuses.
nd_ompi_env() {
	export OMPI_MCA_pml=cm OMPI_MCA_mtl=ofi OMPI_MCA_mtl_ofi_provider_include=$1
	export OMPI_MCA_btl=self
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
}
