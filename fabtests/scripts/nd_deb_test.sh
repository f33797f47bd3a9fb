#!/bin/bash
# nd_deb_test.sh DEB: installs the package util/nd-deb built, as a user
# would, and checks that libfabric finds nd with no environment variable,
# that the man page and the extension header (C and C++) are in place, that
# the programs of examples/ build with pkg-config alone and run, and that
# removing the package removes the provider. Runs where a real RDMA
# device exists and the system may be changed: in the Soft-RoCE guest, whose
# root is a throw-away overlay. FI_PROVIDER_PATH and FI_PROVIDER are unset.
#
# Environment:
#   ND_TEST_DEVICE  the device the installed provider must list (rxe0)
#   ND_GUEST        1 in util/nd-guest's guest (internal): man-db's index
#                   rebuild is switched off there
# and fabtests/scripts/nd_examples.sh's (ND_EXAMPLES_PORT, ND_GUEST_IP).
set -uo pipefail
# fail (prints FAIL: and counts in $failed)
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
deb=$(readlink -f "${1:?usage: nd_deb_test.sh DEB}")
device=${ND_TEST_DEVICE:-rxe0}
unset FI_PROVIDER_PATH FI_PROVIDER

lists_nd() { fi_info -p nd 2>/dev/null | grep -q "domain: $device"; }

lists_nd && fail "nd is listed before the package is installed"
# apt-get resolves the dependencies from what is installed; nothing needs
# downloading on a system that has libfabric and rdma-core
# (apt_from_installed, nd-common.sh, which also keeps man-db's index
# rebuild out of the guest: the page is still installed, checked below).
if ! apt_from_installed install -y -q --no-install-recommends "$deb"; then
	fail "apt-get install $deb"
	exit 1
fi
dpkg -s libfabric-nd | grep -E '^(Version|Depends):'

if lists_nd; then
	echo "ok: fi_info -p nd lists $device with no FI_PROVIDER_PATH"
	fi_info -p nd | head -8
else
	fail "fi_info -p nd does not list $device after installing"
	fi_info -p nd
fi
[[ -f /usr/share/man/man7/fi_nd.7.gz ]] && echo "ok: fi_nd(7) installed" || fail "no fi_nd(7)"
# The extension header from C++ too (the examples below are C).
work=$(mktemp -d)
printf '%s\n' '#include <rdma/fi_ext_nd.h>' \
	'int main(void) { return FI_ND_CONNRESP == 0 || FI_OPT_ND_MANUAL_COMPLETE == 0; }' >"$work/ext.cpp"
if g++ -Wall -Werror -o "$work/ext" "$work/ext.cpp" -lfabric && "$work/ext"; then
	echo "ok: <rdma/fi_ext_nd.h> compiles and links with g++"
else
	fail "<rdma/fi_ext_nd.h> with g++"
fi
rm -rf "$work"
# examples/: built with pkg-config's flags alone, and run.
if "$(dirname "$0")/nd_examples.sh"; then
	echo "ok: examples/ build with pkg-config alone and run"
else
	fail "examples/ (fabtests/scripts/nd_examples.sh)"
fi

apt_from_installed remove -y -q libfabric-nd >/dev/null || fail "apt-get remove libfabric-nd"
lists_nd && fail "nd is still listed after the package was removed"
echo "nd_deb_test: $((failed == 0 ? 1 : 0)) passed, $((failed == 0 ? 0 : 1)) failed"
[[ $failed -eq 0 ]]
