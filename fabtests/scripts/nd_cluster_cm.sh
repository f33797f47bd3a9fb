#!/bin/bash
# nd_cluster_cm.sh BUILDDIR [COUNTS...]: connection setup across the nodes of
# util/nd-cluster N (util/nd-check's cross-node stage: N = 2, one client
# node, and N = 4, three client nodes against one server). Node 0 serves,
# every other node connects at once, for each count of concurrent
# connections per client (default 16 64):
#   - nd and libfabric's verbs provider through fabtests/benchmarks/nd_cm_bench -S/-C,
#     3 rounds plus a warm-up, queue pairs as cmtime's (-Q), and a message
#     each way on every connection with its bytes checked (-x);
#   - rdma-core's cmtime beside them (raw rdma_cm, no data; missing, it fails),
#     one run.
# A client's rate is its N connections over the time to their N
# FI_CONNECTED (cmtime: the sum of its resolve, QP and connect steps); with
# several client nodes the aggregate is the sum of theirs, all connecting
# at once. Figures are printed, never judged: a run passes when every
# connection was established, carried its bytes intact and came down, and
# fails otherwise (PASS:/FAIL: on node 0, with the clients' failures).
# Every wait is bounded. In the guests the programs run as the test bed's
# user (nd_as_site_user), as a cluster's users run them.
#
# Environment:
#   ND_CLUSTER_CM_ROUNDS  rounds of nd and of verbs, after a warm-up (3)
#   ND_MEET, ND_NODE, ND_NODES  set by util/nd-cluster (internal): the
#                         nodes' shared directory, this node's number, the
#                         node count
set -u
# shellcheck source=../../util/lib/nd-common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../util/lib/nd-common.sh"
case ${1:-} in -h | --help) usage; exit 0 ;; esac
builddir=$(cd "${1:?usage: nd_cluster_cm.sh BUILDDIR [COUNTS...]}" && pwd)
shift
counts=("$@")
((${#counts[@]})) || counts=(16 64)
export FI_PROVIDER_PATH=$builddir/.libs
meet=${ND_MEET:?run by util/nd-cluster}
bench=$builddir/fabtests/benchmarks/nd_cm_bench
clients=$((ND_NODES - 1))
rounds=${ND_CLUSTER_CM_ROUNDS:-3}

# wait_for, wait_for_line
# shellcheck source=nd_cluster_wait.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/nd_cluster_wait.sh"
server=$(nd_node_ip 0)

# wait_for_all PREFIX SECONDS: every client node's PREFIX.<node> exists.
wait_for_all() {
	local i
	for ((i = 1; i <= clients; i++)); do
		wait_for "$1.$i" "$2" || return 1
	done
}

# publish_status FILE STATUS: tells node 0 that this client is done, once
# its other files are written: FILE appears whole (node 0 waits for it to
# exist, then reads it).
publish_status() {
	echo "$2" >"$1.tmp" && mv -f "$1.tmp" "$1"
}

# sum_rates PREFIX: the clients' rates, "a + b + c = sum", from PREFIX.<node>.
sum_rates() {
	local i r list=() total=0
	for ((i = 1; i <= clients; i++)); do
		r=$(cat "$1.$i" 2>/dev/null)
		[[ $r =~ ^[0-9]+$ ]] || r=0
		list+=("$r")
		total=$((total + r))
	done
	if ((clients == 1)); then echo "$total"; else echo "$total ($(IFS=+; echo "${list[*]}"))"; fi
}

# trial K PROVIDER N: one nd_cm_bench trial, node 0 serving all clients.
trial() {
	local k=$1 prov=$2 n=$3 port=$((9300 + $1))
	local name="cross-node connection setup, $prov, $clients client node(s) x $n connections"
	if ((ND_NODE == 0)); then
		nd_as_site_user timeout 300 "$bench" -p "$prov" -S -a "$server" -P "$port" -k "$clients" -n "$n" \
			-r "$rounds" -Q -x >"$meet/cm.$k.server" 2>&1 &
		local pid=$! deadline=$((SECONDS + 60))
		until grep -q listening "$meet/cm.$k.server" 2>/dev/null || ((SECONDS >= deadline)); do sleep 0.1; done
		: >"$meet/cm.$k.up"
		wait "$pid"
		local rc=$?
		# The clients say how theirs went.
		wait_for_all "$meet/cm.$k.status" 120
		local bad=0 i
		for ((i = 1; i <= clients; i++)); do
			[[ $(cat "$meet/cm.$k.status.$i" 2>/dev/null) == 0 ]] || bad=1
		done
		if ((rc == 0 && !bad)); then
			pass "$name: $(sum_rates "$meet/cm.$k.rate") conn/s, every message checked"
		else
			fail "$name (server exit $rc)"
			sed 's/^/    server: /' "$meet/cm.$k.server"
			for ((i = 1; i <= clients; i++)); do
				sed "s/^/    node $i: /" "$meet/cm.$k.client.$i" 2>/dev/null
			done
		fi
	else
		local status=1
		if wait_for "$meet/cm.$k.up" 180; then
			nd_as_site_user timeout 240 "$bench" -p "$prov" -C "$server" -P "$port" -n "$n" -r "$rounds" -Q -x -q \
				>"$meet/cm.$k.client.$ND_NODE" 2>&1
			status=$?
		else
			echo "the server did not start" >"$meet/cm.$k.client.$ND_NODE"
		fi
		sed -n 's/.*: \([0-9]*\) conn\/s.*/\1/p' "$meet/cm.$k.client.$ND_NODE" >"$meet/cm.$k.rate.$ND_NODE"
		publish_status "$meet/cm.$k.status.$ND_NODE" "$status"
	fi
}

# cmtime_trial K N: rdma-core's cmtime, one server for all client nodes.
cmtime_trial() {
	local k=$1 n=$2 port=$((9400 + $1))
	if ((ND_NODE == 0)); then
		# cmtime's server never exits by itself: it is stopped once
		# every client is done.
		nd_as_site_user timeout 300 cmtime -b "$server" -p "$port" -c $((clients * n)) >"$meet/cmt.$k.server" 2>&1 &
		local pid=$!
		sleep 1
		: >"$meet/cmt.$k.up"
		wait_for_all "$meet/cmt.$k.status" 240
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		# cmtime reports its steps once all N connected; its exit status
		# is shown but not judged (rdma-core 44's client can return
		# non-zero after a run that reported every step).
		local bad=0 i statuses=""
		for ((i = 1; i <= clients; i++)); do
			[[ $(cat "$meet/cmt.$k.rate.$i" 2>/dev/null) -gt 0 ]] || bad=1
			statuses+=" $(cat "$meet/cmt.$k.status.$i" 2>/dev/null)"
		done
		local name="cross-node connection setup, cmtime (raw rdma_cm), $clients client node(s) x $n connections"
		if ((!bad)); then
			pass "$name: $(sum_rates "$meet/cmt.$k.rate") conn/s (exit status${statuses})"
		else
			fail "$name"
			sed 's/^/    server: /' "$meet/cmt.$k.server" | tail -20
			for ((i = 1; i <= clients; i++)); do
				tail -20 "$meet/cmt.$k.client.$i" 2>/dev/null | sed "s/^/    node $i: /"
			done
		fi
	else
		wait_for "$meet/cmt.$k.up" 180
		nd_as_site_user timeout 120 cmtime -s "$server" -p "$port" -c "$n" </dev/null >"$meet/cmt.$k.client.$ND_NODE" 2>&1
		local status=$?
		# As fabtests/scripts/nd_cm_bench.sh reads it: N over the sum of the
		# resolve, QP creation and connect steps. Written before the
		# status file, which tells node 0 that this node is done.
		awk -v n="$n" '/^(resolve addr|resolve route|create qp|connect) *:/ {
			split($0, f, ":"); split(f[2], v, " "); total += v[1] }
			END { if (total > 0) printf "%.0f\n", n / (total / 1000); else print 0 }' \
			"$meet/cmt.$k.client.$ND_NODE" >"$meet/cmt.$k.rate.$ND_NODE"
		publish_status "$meet/cmt.$k.status.$ND_NODE" "$status"
	fi
}

start=$SECONDS
k=0
for n in "${counts[@]}"; do
	trial "$((k += 1))" nd "$n"
	trial "$((k += 1))" verbs "$n"
	# rdma-core's cmtime beside them; a missing one fails (once, on node 0).
	if command -v cmtime >/dev/null; then
		cmtime_trial "$k" "$n"
	elif ((ND_NODE == 0)); then
		need_tool cmtime rdmacm-utils
	fi
done
((ND_NODE == 0)) && echo "cross-node connection setup: $((SECONDS - start)) s"
exit 0
