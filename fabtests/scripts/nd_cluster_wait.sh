# nd_cluster_wait.sh: the bounded waits the cross-node scripts
# (fabtests/scripts/nd_cluster_*.sh) share: a library, sourced by those that
# wait, not run (no --help). Nodes meet through
# files in util/nd-cluster's shared directory ($ND_MEET): a side writes a
# file, or a line to one, when it is ready; the other waits for it, never
# longer than it is told. A script sources util/lib/nd-common.sh first, as
# every script does, then this file:
#   source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/nd_cluster_wait.sh"

# wait_for FILE SECONDS: true once FILE exists.
wait_for() {
	local deadline=$((SECONDS + $2))
	until [[ -e $1 ]]; do
		((SECONDS < deadline)) || return 1
		sleep 0.1
	done
}

# wait_for_line FILE TEXT SECONDS: true once FILE holds a line with TEXT.
wait_for_line() {
	local deadline=$((SECONDS + $3))
	until grep -q "$2" "$1" 2>/dev/null; do
		((SECONDS < deadline)) || return 1
		sleep 0.1
	done
}
