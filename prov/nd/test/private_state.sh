#!/bin/bash
# private_state.sh: the rules the compiler keeps. The completion queue's
# lock, rings and verbs CQs, and a work queue's posting counters, are
# private (nd_cq.h, nd_wq.h): other objects reach them through the few
# operations they need. Compiles small files the way the provider's own are
# compiled and checks that code reaching into that state does not compile,
# for the reason that it is private (in gcc's words or clang's), while the same file using the public
# operations does (so that a failure is the rule's, not a broken command).
# Run by `make check`, which sets ND_CXX and ND_CPPFLAGS; by hand:
#   ND_CXX="g++ -std=c++20" ND_CPPFLAGS="-I prov/nd/src -I include" prov/nd/test/private_state.sh
# Ends with "private_state: N passed, M failed".
set -uo pipefail
: "${ND_CXX:?ND_CXX (the compiler and its standard) is not set}"
: "${ND_CPPFLAGS:?ND_CPPFLAGS (the include flags of the provider) is not set}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0

# compiles NAME BODY: 0 when a file including the two headers with BODY in a
# function of a CompletionQueue `cq`, a SendQueue `queue`, a ReceiveQueue
# `receives`, an endpoint's ReceiveCredits `credits` and a shared transmit
# context's SendBudget `budget` compiles; the
# compiler's words are in $work/NAME.log.
compiles() {
	cat >"$work/$1.cpp" <<EOF
#include "nd_cq.h"
#include "nd_wq.h"
void reach(nd::CompletionQueue &cq, nd::SendQueue &queue, nd::ReceiveQueue &receives, nd::ReceiveCredits &credits,
	   nd::SendBudget &budget, ibv_send_wr *wr)
{
	(void)cq; (void)queue; (void)receives; (void)credits; (void)budget; (void)wr;
	$2
}
EOF
	# shellcheck disable=SC2086 # the flags are words
	$ND_CXX $ND_CPPFLAGS -fsyntax-only "$work/$1.cpp" >"$work/$1.log" 2>&1
}

verdict() { # OK TEXT
	if [ "$1" -eq 0 ]; then
		passed=$((passed + 1))
		echo "PASS: $2"
	else
		failed=$((failed + 1))
		echo "FAIL: $2"
	fi
}

# The public operations compile: the command and headers work.
compiles public '(void)cq.progress(); (void)cq.is_internal(); queue.unclaim(wr); (void)queue.poster_view(); (void)queue.outstanding(); receives.unclaim_recv(0); (void)receives.posted(); (void)credits.can_send(); (void)budget.left();'
status=$?
[ $status -eq 0 ] || sed 's/^/  /' "$work/public.log" | head -20
verdict $status "code using the CQ's and the work queue's public operations compiles"

# refused NAME TEXT BODY: BODY does not compile, and the compiler says
# that what it names is private (or protected: a queue's kinds' own).
refused() {
	local status=1
	if compiles "$1" "$3"; then
		echo "  compiled: $3"
	elif grep -qE "is (private|protected) within this context|is a (private|protected) member of|calling a (private|protected) (constructor|destructor)" "$work/$1.log"; then
		status=0
	else
		echo "  failed, but not for privacy:"
		sed 's/^/  /' "$work/$1.log" | head -10
	fi
	verdict $status "$2"
}

refused cq_ready "another object cannot read the CQ's ring of entries" '(void)cq.ready.size();'
refused cq_errors "another object cannot take from the CQ's error ring" 'cq.errors.pop_front();'
refused cq_lock "another object cannot take the CQ's lock" 'cq.lock.lock();'
refused cq_complete "another object cannot complete a work completion past the CQ's lock" 'ibv_wc wc{}; nd::CqEntry e; (void)cq.complete(wc, &e);'
refused cq_slots "another object cannot touch the CQ's verbs CQs" '(void)cq.slots.size();'
refused wq_reads "another object cannot move a send queue's count of reads posted" 'queue.reads_posted_ = 0;'
refused wq_signaled "another object cannot move a send queue's next signaled request" 'queue.signal_at_.store(0);'
refused wq_signaled_head "another object cannot move a send queue's last signaled request" 'queue.set_signaled_head(0);'
refused wq_give_back "another object cannot give slots back without unclaiming them" 'queue.give_back(1);'
refused wq_commit "another object cannot publish a slot it did not claim" 'receives.publish(0);'
refused wq_head "another object cannot move a ring's head" 'receives.head_.store(0);'
refused wq_records "another object cannot write a ring's records" 'receives.records_[0].context = nullptr;'
refused credits_sent "another object cannot move the messages counted against the peer's receives" 'credits.sent_ = 0;'
refused credits_told "another object cannot move the count the peer was told of" 'credits.advertised_.store(0);'
refused budget_used "another object cannot move a shared context's count without taking or giving back" 'budget.used_.store(0);'
refused wq_delete "a queue is not deleted as the ring alone (its kind's destructor runs)" 'nd::WorkQueue &ring = queue; delete &ring;'

echo "private_state: $passed passed, $failed failed"
[ $failed -eq 0 ]
