#!/bin/bash
# nd_help_check.sh: every script a user or developer runs answers --help
# with its variables. For every executable file in util/ and
# fabtests/scripts/ (the sourced libraries, util/lib/nd-common.sh and
# fabtests/scripts/nd_cluster_wait.sh, are not executable; the guest's own
# PID-1 stages are left out, see SKIP below) it checks that
#   - its text handles --help at all (a script that does not is not run:
#     it would do its work instead);
#   - SCRIPT --help and SCRIPT -h, run under timeout 10 from a scratch
#     directory that is also HOME (XDG_CACHE_HOME under it; PATH unchanged,
#     stdin /dev/null), exit 0 and print something, and leave that HOME
#     empty (a help that creates a cache did more than help);
#   - every ND_ variable the script's own text names appears in its --help
#     output, but the ones INTERNAL lists below, each with its reason.
# Prints "PASS: SCRIPT" or "FAIL: SCRIPT (why)" per script, closes with
# "help: N passed, M failed" and exits non-zero on any failure. Runs in
# about 15 s on the host; builds, boots and installs nothing.
#
#   fabtests/scripts/nd_help_check.sh [-h|--help]
#
# Environment: reads no variable of its own.
set -uo pipefail
# pass, fail, closing_line
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac

top=$(cd "$(dirname "$0")/../.." && pwd)
PROG=nd_help_check

# Executables that are not run here, with the reason.
declare -A SKIP=(
	[util/guest/init]="the guest's /init (busybox sh, PID 1 of the initramfs): it runs only inside util/nd-guest's guest, and on a host would install busybox's links in /bin"
	[util/guest/stage2]="the guest's second stage, PID 1 after switch_root: it runs only inside util/nd-guest's guest, and powers the machine off"
)

# ND_ names in the scripts' text that are no variable a user sets: the
# help need not list them.
declare -A INTERNAL=(
	[ND_GUEST_IP_DEFAULT]="a constant of util/lib/nd-common.sh (10.0.2.15), not read from the environment"
	[ND_GUEST_IP6_DEFAULT]="a constant of util/lib/nd-common.sh (fd00::15), not read from the environment"
	[ND_CLUSTER_NET]="a constant of util/lib/nd-common.sh (10.0.3), not read from the environment"
	[ND_CLUSTER_NET6]="a constant of util/lib/nd-common.sh (fd00::3), not read from the environment"
	[ND_CLUSTER_HOST_BASE]="a constant of util/lib/nd-common.sh (10), not read from the environment"
	[ND_VALGRIND]="a shell array of util/lib/nd-common.sh (the valgrind command line), not read from the environment"
)

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# run_help SCRIPT OPTION OUTFILE: the script's help, from a fresh scratch
# HOME; prints the exit status.
run_help() {
	local home=$scratch/home rc
	rm -rf "$home"
	mkdir "$home"
	(cd "$home" && HOME=$home XDG_CACHE_HOME=$home/.cache timeout 10 "$top/$1" "$2" </dev/null >"$3" 2>"$3.err")
	rc=$?
	if [ -n "$(ls -A "$home")" ]; then
		echo "wrote to HOME: $(cd "$home" && find . -mindepth 1 | head -3 | paste -sd ' ')" >>"$3.home"
	fi
	echo "$rc"
}

timed_out() { [ "$1" -ne 124 ] || echo " (timed out after 10 s)"; }

check_script() {
	local name=$1 out=$scratch/out why=() rc err var missing=()
	if ! grep -q -e '--help' "$top/$name"; then
		fail "$name (its text does not handle --help; not run)"
		return
	fi
	rm -f "$out.home"
	rc=$(run_help "$name" -h "$out")
	if [ "$rc" -ne 0 ]; then
		why+=("-h exits $rc$(timed_out "$rc")")
	elif [ ! -s "$out" ]; then
		why+=("-h prints nothing")
	fi
	rc=$(run_help "$name" --help "$out")
	err=$(head -c 200 "$out.err" | tr '\n' ' ' | sed 's/ *$//')
	if [ "$rc" -ne 0 ]; then
		why+=("--help exits $rc$(timed_out "$rc")${err:+: $err}")
	elif [ ! -s "$out" ]; then
		why+=("--help prints nothing")
	else
		# \b: FI_ND_* (the provider's own settings) are not these.
		while read -r var; do
			[ -z "${INTERNAL[$var]:-}" ] || continue
			grep -qE "(^|[^A-Z0-9_])$var([^A-Z0-9_]|\$)" "$out" || missing+=("$var")
		done < <(grep -oE '\bND_[A-Z0-9_]+' "$top/$name" | sort -u)
		((${#missing[@]} == 0)) || why+=("--help does not name ${missing[*]}")
	fi
	[ ! -s "$out.home" ] || why+=("$(sort -u "$out.home" | head -1)")
	if ((${#why[@]})); then
		local joined
		joined=$(IFS=';'; echo "${why[*]}")
		fail "$name (${joined//;/; })"
	else
		pass "$name"
	fi
}

while IFS= read -r name; do
	[ -x "$top/$name" ] || continue
	if [ -n "${SKIP[$name]:-}" ]; then
		echo "not run: $name (${SKIP[$name]})"
		continue
	fi
	check_script "$name"
done < <(cd "$top" && find util fabtests/scripts -type f | LC_ALL=C sort)
closing_line help
