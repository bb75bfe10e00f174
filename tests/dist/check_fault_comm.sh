#!/bin/sh
# check_fault_comm.sh PROGRAM LAUNCHER... — the communicator-creation fault
# sweep under MPI with 2 ranks (issue 24 part 2; mpi_fault_comm.c says what
# each point checks). For each rank in turn: a counting run gives the
# injection points P (host allocations and file calls inside
# loom_comm_init on that rank); then N = 1 .. P + 1, each in a fresh job
# bounded by 60 s, until creation completes with no fault reached. Fails on
# a hang, a crash, a "FAIL:" line, a missing report or a LeakSanitizer
# report; MPI's own allocations are not counted (mpi_fault_comm.c says how).
set -u
prog=$1
shift
T=2   # the communicators' timeout: the peer of a failed rank waits this long
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/supp" <<'SUPP'
leak:libmpi.so
leak:libopen-pal.so
leak:libopen-rte.so
leak:libpmix.so
leak:libhwloc.so
leak:libevent
leak:mca_
leak:libmpich.so
SUPP
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export LSAN_OPTIONS="suppressions=$tmp/supp:print_suppressions=0"
fail() { echo "fault_comm: FAIL: $*"; exit 1; }

total=0
for f in 0 1; do
  peer=$((1 - f))
  out=$(timeout -k 5 60 "$@" "$prog" $f 0 $T 2>&1)
  rc=$?
  case $out in *SKIP:*) echo "$out" | grep SKIP:; exit 77 ;; esac
  printf '%s\n' "$out" | grep -q "FAIL:\|LeakSanitizer" && { printf '%s\n' "$out"; fail "the unfaulted run (rank $f counting)"; }
  [ $rc -eq 0 ] || { printf '%s\n' "$out"; fail "the unfaulted run exited with status $rc"; }
  points=$(printf '%s\n' "$out" | sed -n "s/^rank $f: faulted n=0 calls=\([0-9]*\) .*status=LOOM_OK.*/\1/p")
  [ -n "$points" ] || { printf '%s\n' "$out"; fail "the counting run of rank $f printed no report"; }
  refused=0 absorbed=0 peer_err=0 n=1
  while :; do
    t0=$(date +%s)
    out=$(timeout -k 5 60 "$@" "$prog" $f $n $T 2>&1)
    rc=$?
    took=$(( $(date +%s) - t0 ))
    line=$(printf '%s\n' "$out" | grep "^rank $f: faulted n=$n ")
    pline=$(printf '%s\n' "$out" | grep "^rank $peer: peer n=$n ")
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then printf '%s\n' "$out"; fail "rank $f, fault $n: the job hung (stopped after 60 s)"; fi
    if printf '%s\n' "$out" | grep -q "FAIL:\|ERROR: LeakSanitizer\|ERROR: AddressSanitizer\|runtime error:"; then
      printf '%s\n' "$out"; fail "rank $f, fault $n"; fi
    [ -n "$line" ] || { printf '%s\n' "$out"; fail "rank $f, fault $n: the faulted rank printed no report (crashed?)"; }
    [ -n "$pline" ] || { printf '%s\n' "$out"; fail "rank $f, fault $n: the peer printed no report (crashed, or killed before its timeout?)"; }
    echo "fault_comm: $line"
    echo "fault_comm: $pline  (job $took s)"
    case $line in
      *hit=0*) [ $n -gt "$points" ] || fail "rank $f: fault $n of $points points was not reached"; break ;;
      *status=LOOM_OK*) absorbed=$((absorbed + 1)) ;;
      *) refused=$((refused + 1)) ;;
    esac
    case $pline in *status=LOOM_OK*) ;; *) peer_err=$((peer_err + 1)) ;; esac
    [ $n -le $((points + 1)) ] || fail "rank $f: creation keeps reaching new calls ($n)"
    n=$((n + 1))
  done
  echo "fault sweep comm_init_mpi (rank $f faulted): $points injection points, $refused refused with a status, $absorbed absorbed; the peer failed by its timeout $peer_err times, never hung"
  total=$((total + points))
done
echo "fault_comm: ok ($total injection points on the two ranks)"
