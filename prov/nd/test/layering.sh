#!/bin/bash
# layering.sh: the provider's files include one another one way, top to
# bottom, as prov/nd/ARCHITECTURE.md draws them. Reads the #include lines of
# prov/nd/src, and the tiers from ARCHITECTURE.md's "tier N name: files"
# lines, and checks:
#   1. every source file is in exactly one tier, and ARCHITECTURE.md names
#      every file;
#   2. a file includes only files of its own tier and the tiers below;
#   3. the include graph has no loop (tsort finds an order);
#   4. the CQ and the counter know work queues, not endpoints nor each other;
#   5. parents name their children's *_open through nd.h's entry points, not
#      by including the children's headers.
# That no other file touches the CQ's lock or rings is the compiler's to
# keep: they are private (private_state.sh shows it).
# Prints the order found and ends with "layering: N passed, M failed".
set -uo pipefail
src=$(cd "$(dirname "$0")/../src" && pwd)
architecture=$src/../ARCHITECTURE.md
passed=0
failed=0

check() { # NAME CONDITION-EXIT-STATUS
	if [ "$2" -eq 0 ]; then
		passed=$((passed + 1))
		echo "PASS: $1"
	else
		failed=$((failed + 1))
		echo "FAIL: $1"
	fi
}

# includes FILE: the project headers FILE includes, one a line.
includes() {
	sed -n 's/^#include "\([^"]*\)".*/\1/p' "$src/$1"
}

# A node is a file's stem: nd_cq.cpp and nd_cq.h are one object.
edges=$(cd "$src" && for f in *.cpp *.h; do
	stem=${f%.*}
	for inc in $(includes "$f"); do
		[ "${inc%.*}" != "$stem" ] && echo "$stem ${inc%.*}"
	done
done)

# tier[STEM]: the tier ARCHITECTURE.md gives the file (0 is the lowest).
declare -A tier
status=0
while read -r number files; do
	for stem in $files; do
		if [ -n "${tier[$stem]:-}" ]; then
			echo "  $stem is in tiers ${tier[$stem]} and $number"
			status=1
		fi
		tier[$stem]=$number
	done
done < <(sed -n 's/^ *tier \([0-9]\)[^:]*: *\(.*\)$/\1 \2/p' "$architecture")
[ ${#tier[@]} -gt 0 ] || { echo "  ARCHITECTURE.md has no tier lines"; status=1; }
for f in "$src"/*.cpp "$src"/*.h; do
	stem=$(basename "${f%.*}")
	if [ -z "${tier[$stem]:-}" ]; then
		echo "  $stem is in no tier of ARCHITECTURE.md"
		status=1
	fi
	if ! grep -q "\b$stem\b" <(sed '/^ *tier [0-9]/d' "$architecture"); then
		echo "  ARCHITECTURE.md does not say what $stem is"
		status=1
	fi
done
check "every source file has one tier and a place in ARCHITECTURE.md" $status

status=0
while read -r from to; do
	[ -n "$from" ] || continue
	if [ "${tier[$from]:-9}" -lt "${tier[$to]:-0}" ]; then
		echo "  $from (tier ${tier[$from]}) includes $to (tier ${tier[$to]})"
		status=1
	fi
done <<<"$edges"
check "a file includes only its own tier and those below" $status

order=$(tsort <<<"$edges" 2>&1)
loop=0
grep -q "loop" <<<"$order" && loop=1
if [ $loop -eq 1 ]; then
	echo "the include graph has a loop:"
	grep -v '^nd' <<<"$order" | sed 's/^/  /'
else
	echo "order, top to bottom: $(tr '\n' ' ' <<<"$order")"
fi
check "the include graph runs one way" $loop

# forbidden FILE HEADER...: 0 when FILE includes none of HEADER...
forbidden() {
	local file=$1 status=0 inc
	shift
	for inc in $(includes "$file"); do
		for banned in "$@"; do
			if [ "$inc" = "$banned" ]; then
				echo "  $file includes $banned"
				status=1
			fi
		done
	done
	return $status
}

forbidden nd_cq.cpp nd_ep.h nd_ep_inject.h nd_cntr.h
check "nd_cq.cpp includes neither the endpoint nor the counter" $?
forbidden nd_cq.h nd_ep.h nd_cntr.h
check "nd_cq.h includes neither the endpoint nor the counter" $?
forbidden nd_cntr.cpp nd_ep.h nd_ep_inject.h nd_cq.h
check "nd_cntr.cpp includes neither the endpoint nor the CQ" $?
forbidden nd_cntr.h nd_ep.h nd_cq.h
check "nd_cntr.h includes neither the endpoint nor the CQ" $?
forbidden nd_wq.h nd_ep.h nd_cq.h nd_cntr.h nd_srx.h
check "nd_wq.h includes no object that uses it" $?
forbidden nd_fabric.cpp nd_domain.h nd_eq.h nd_pep.h nd_cq.h
check "the fabric names its children through nd.h" $?
forbidden nd_domain.cpp nd_ep.h nd_cq.h nd_cntr.h nd_srx.h nd_mr.h nd_eq.h
check "the domain names its children through nd.h" $?

echo "layering: $passed passed, $failed failed"
[ $failed -eq 0 ]
