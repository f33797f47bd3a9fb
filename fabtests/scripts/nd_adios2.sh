#!/bin/bash
# nd_adios2.sh BUILDDIR [CORE [STEPS]]: ADIOS2's SST engine over the
# provider built in BUILDDIR, with SST's RDMA data plane (libfabric, an
# FI_EP_RDM endpoint: ofi_rxm over CORE, default nd). Compiles
# fabtests/functional/nd_adios2_sst.c against the system's ADIOS2 (serial C
# bindings, adios2-config.serial: Debian 13's libadios2-serial-c-dev; Debian
# 12 has no ADIOS2 2.x) and streams STEPS steps (default 40) of 1 MiB and
# 128 B from a writer to a reader, every word checked.
#
# How a user points ADIOS2 2.10 at a provider: it has no setting for the
# provider, and takes the first RDM provider whose domain is FABRIC_IFACE,
# so FI_PROVIDER="CORE,ofi_rxm" leaves it only CORE's. The pass needs both
# programs to exit 0 and both to say, at SstVerbose=5, that they chose the
# "rdma" data plane over "CORE;ofi_rxm": SST would otherwise fall back to
# another data plane (UCX's, or its own over TCP) and still carry the bytes.
#
# In a guest run as root both programs run as the test bed's user with a
# site's memory-lock limit (nd_as_site_user), as a cluster's users run
# them, in a directory they may write (the writer's contact file).
#
# Prints the reader's FIGURE line (MB/s, from the open to the last step).
# Bounded: each program is killed after ND_ADIOS2_TIMEOUT seconds (120).
#
# Environment:
#   ND_TEST_DEVICE     the device, FABRIC_IFACE (rxe0)
#   ND_ADIOS2_TIMEOUT  seconds after which each program is killed (120)
set -uo pipefail
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
builddir=$(cd "${1:?usage: nd_adios2.sh BUILDDIR [CORE [STEPS]]}" && pwd)
core=${2:-nd}
steps=${3:-40}
srcdir=$(cd "$(dirname "$0")/../.." && pwd)

command -v adios2-config.serial >/dev/null ||
	{ echo "nd_adios2.sh: adios2-config.serial not found (Debian 13 package libadios2-serial-c-dev)"; exit 1; }
work=$(mktemp -d)
trap 'kill "${writer:-}" 2>/dev/null; rm -rf "$work"' EXIT
# shellcheck disable=SC2046 # adios2-config prints several flags
gcc -O2 -Wall -Wextra -o "$work/nd_adios2_sst" "$srcdir/fabtests/functional/nd_adios2_sst.c" \
	$(adios2-config.serial -c) || exit 1

export FI_PROVIDER_PATH=$builddir/.libs FI_PROVIDER=$core,ofi_rxm
export FABRIC_IFACE=${ND_TEST_DEVICE:-rxe0} SstVerbose=5
limit=${ND_ADIOS2_TIMEOUT:-120}
# The user writes here (a throw-away directory of this run).
chmod 1777 "$work" || exit 1
cd "$work" || exit 1
# The writer publishes its contact file (nd-adios2-sst.sst) here and waits
# for its one reader; the reader waits for the file.
nd_as_site_user timeout -k 5 "$limit" ./nd_adios2_sst -r writer -n "$steps" >writer.log 2>&1 &
writer=$!
declare -A rc
nd_as_site_user timeout -k 5 "$limit" ./nd_adios2_sst -r reader -n "$steps" >reader.log 2>&1
rc[reader]=$?
wait "$writer"
rc[writer]=$?
writer=

verdict=0
for role in writer reader; do
	if [ "${rc[$role]}" -ne 0 ]; then
		echo "nd_adios2.sh: the $role exited ${rc[$role]}"
		verdict=1
	fi
	if ! grep -q 'Selecting DataPlane "rdma"' "$role.log" ||
		! grep -q "provider type $core;ofi_rxm\." "$role.log"; then
		echo "nd_adios2.sh: the $role did not use the RDMA data plane over $core;ofi_rxm"
		verdict=1
	fi
done
grep -h -E 'RDMA Dataplane|DataPlane "|^nd_adios2_sst|^FIGURE' writer.log reader.log
if [ "$verdict" -ne 0 ]; then
	for role in writer reader; do
		echo "--- the $role's output, its last lines:"
		grep -v -e '^libfabric:' "$role.log" | tail -25
	done
fi
exit "$verdict"
