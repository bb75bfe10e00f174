#!/bin/sh
# check_failure.sh SCENARIO PROGRAM LAUNCHER... — run a failure scenario of
# mpi_checks.c under the MPI launcher, bounded by 120 s, and check that the
# job ended by itself (no hang) with the surviving rank's expected report.
#   fail_input: rank 1 rejects bad input and stops; rank 0 must fail its
#               next collective with a timeout error (its 3 s timeout).
#   killed:     rank 1 is SIGKILLed; the job must end: either the launcher
#               tears it down, or rank 0's 5 s timeout fails the step.
set -u
scenario=$1 prog=$2
shift 2
t0=$(date +%s)
out=$(timeout -k 5 120 "$@" "$prog" "$scenario" 2>&1)
rc=$?
took=$(( $(date +%s) - t0 ))
printf '%s\n' "$out"
echo "check_failure: $scenario: launcher exit status $rc after $took s"
# (137 alone is no hang: OpenMPI's launcher passes on a rank's SIGKILL.)
if [ $rc -eq 124 ] || [ $took -ge 120 ]; then echo "check_failure: FAIL: the job hung (stopped after 120 s)"; exit 1; fi
if printf '%s\n' "$out" | grep -q "FAIL:"; then echo "check_failure: FAIL: a rank reported a failure"; exit 1; fi
case $scenario in
  fail_input)
    for want in "rank 1: ok bad input rejected" "rank 0: ok failed in" "rank 0: ok later collectives fail at once" \
                "rank 0: ok dist_finalize refuses"; do
      printf '%s\n' "$out" | grep -q "$want" || { echo "check_failure: FAIL: missing '$want'"; exit 1; }
    done ;;
  killed)
    printf '%s\n' "$out" | grep -q "rank 1: killing myself" || { echo "check_failure: FAIL: rank 1 never got to step 3"; exit 1; }
    if [ $rc -eq 0 ]; then echo "check_failure: FAIL: the job reported success with a dead rank"; exit 1; fi ;;
  *) echo "check_failure: unknown scenario $scenario"; exit 2 ;;
esac
echo "check_failure: $scenario: ok"
