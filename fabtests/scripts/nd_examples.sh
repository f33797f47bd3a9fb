#!/bin/bash
# nd_examples.sh: builds the programs of examples/ as a user would, with
# `cc -Wall -Werror ... $(pkg-config --cflags --libs libfabric)` and nothing
# else (so the libfabric-nd package must be installed: it brings
# <rdma/fi_ext_nd.h> and puts the provider where libfabric finds it), then
# runs nd_server and nd_client against each other on this host's address
# and checks what each says. Run where an RDMA device exists: util/nd-demo
# and the check's package test (nd_deb_test.sh) run it in the guest.
# Exits non-zero, saying why, when a program does not build, fails, or does
# not print what it must.
#
#   fabtests/scripts/nd_examples.sh [-h|--help]
#
# Environment:
#   ND_EXAMPLES_PORT  the server's port (7471)
#   ND_GUEST_IP       the address to run on (10.0.2.15, the default of
#                     util/lib/nd-common.sh; util/nd-guest sets it)
set -uo pipefail
# nd_guest_ip
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
port=${ND_EXAMPLES_PORT:-7471}
ip=$(nd_guest_ip)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0

flags=$(pkg-config --cflags --libs libfabric) || { echo "nd_examples: no pkg-config file for libfabric"; exit 1; }
for src in "$srcdir"/examples/*.c; do
	name=$(basename "$src" .c)
	# shellcheck disable=SC2086 # pkg-config's flags are words
	if cc -Wall -Werror -o "$work/$name" "$src" $flags; then
		echo "built $name with: cc -Wall -Werror -o $name $name.c \$(pkg-config --cflags --libs libfabric)"
	else
		echo "nd_examples: examples/$name.c does not build with pkg-config's flags alone"
		exit 1
	fi
done

"$work/nd_server" -a "$ip" -p "$port" >"$work/server.out" 2>&1 &
server=$!
# The client's first request would be refused by nobody listening: wait
# for the server to say it listens.
for _ in $(seq 100); do
	grep -q listening "$work/server.out" && break
	kill -0 "$server" 2>/dev/null || break
	sleep 0.1
done
timeout 120 "$work/nd_client" -p "$port" "$ip" >"$work/client.out" 2>&1
client_rc=$?
timeout 30 tail --pid="$server" -f /dev/null || kill "$server" 2>/dev/null
wait "$server"
server_rc=$?
cat "$work/server.out" "$work/client.out"
need() { # FILE PATTERN WHAT
	grep -q -- "$2" "$work/$1" || { echo "nd_examples: $3 (no \"$2\" in its output)"; status=1; }
}
[[ $client_rc -eq 0 ]] || { echo "nd_examples: nd_client exited $client_rc"; status=1; }
[[ $server_rc -eq 0 ]] || { echo "nd_examples: nd_server exited $server_rc"; status=1; }
need client.out 'refused, with "come back with a name"' "the reject's private data did not reach the client"
need client.out "read them back: the same" "the RDMA write and read did not round-trip"
need server.out "4096 of 4096 bytes written as expected" "the server did not find the client's bytes"
need server.out "shut the connection down" "the server saw no FI_SHUTDOWN"
((status == 0)) && echo "nd_examples: nd_server and nd_client built with pkg-config alone and ran as ND says"
exit $status
