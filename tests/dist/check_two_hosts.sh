#!/bin/sh
# check_two_hosts.sh LOOM_MNIST MPIRUN — data parallelism across two "hosts"
# on one machine (issue 24 part 4): two network namespaces joined by a veth
# pair, one rank in each, launched by OpenMPI's mpirun over TCP (its rsh
# agent is a small `ip netns exec` wrapper: no ssh). Checks, in order:
#   1. the MNIST MLP trained data-parallel across the namespaces ends with
#      parameters (the whole checkpoint: weights, AdamW state, loader
#      position, RNG, step) byte-identical to the same 2-rank run inside one
#      namespace (shared-memory transport);
#   2. the link taken down mid-run (from outside, after the first checkpoint):
#      both ranks fail with loom's collective timeout error within
#      LOOM_DIST_TIMEOUT (+ slack), and the job ends by itself (no hang);
#   3. the last checkpoint is intact: a relaunch with --resume (link up)
#      restores it and ends byte-identical to the uninterrupted run.
# Needs root, iproute2 and OpenMPI; otherwise it exits 77 (ctest: skipped)
# saying why. Every wait is bounded; the namespaces, the veth pair and any
# process left in them are removed on exit. docs/distributed.md has the
# multi-host recipe this test follows.
set -u
bin=$1 mpirun=$2
skip() { echo "two_hosts: SKIP: $*"; exit 77; }
fail() { echo "two_hosts: FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || skip "needs root (network namespaces and a veth pair)"
command -v ip >/dev/null 2>&1 || skip "no ip (iproute2)"
command -v "$mpirun" >/dev/null 2>&1 || skip "no MPI launcher '$mpirun'"
"$mpirun" --version 2>/dev/null | grep -qE "Open MPI|OpenRTE" || skip "the launcher is not OpenMPI's mpirun (the rsh agent and MCA flags here are OpenMPI's)"

T=${LOOM_TWO_HOSTS_TIMEOUT:-10}   # loom's collective timeout (LOOM_DIST_TIMEOUT) in the runs
id=$$
nsA=loomA$id nsB=loomB$id vA=lmA$id vB=lmB$id
# A /24 of 10.0.0.0/8 from the pid, so that concurrent runs do not collide.
net=10.$((id % 200 + 20)).$((id / 200 % 250))
ipA=$net.1 ipB=$net.2
tmp=$(mktemp -d)
bg=""

cleanup() {
  [ -n "$bg" ] && kill "$bg" 2>/dev/null
  for ns in $nsA $nsB; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  ip link del "$vA" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

ip netns add "$nsA" 2>"$tmp/err" || skip "cannot create a network namespace: $(cat "$tmp/err")"
ip netns add "$nsB" || fail "ip netns add $nsB"
ip link add "$vA" type veth peer name "$vB" || fail "ip link add (veth)"
ip link set "$vA" netns "$nsA" && ip link set "$vB" netns "$nsB" || fail "moving the veth ends"
ip -n "$nsA" addr add "$ipA/24" dev "$vA" && ip -n "$nsB" addr add "$ipB/24" dev "$vB" || fail "addresses"
for ns in $nsA $nsB; do
  ip -n "$ns" link set lo up || fail "lo up in $ns"
  # A cut link leaves mpirun's abort message to the other host's daemon
  # unacknowledged; TCP gives up on it after tcp_retries2 retransmissions
  # (default 15: ~15 minutes). 4: ~6 s, so the job ends by itself.
  ip netns exec "$ns" sh -c 'echo 4 > /proc/sys/net/ipv4/tcp_retries2' || fail "tcp_retries2 in $ns"
done
ip -n "$nsA" link set "$vA" up && ip -n "$nsB" link set "$vB" up || fail "link up"
# `link set up` returns before the veth pair has carrier and its subnet
# route is back: wait for both (a relaunch right after the cut link came
# back up once failed to connect, "unable to complete a TCP connection").
link_ready() {
  for _ in $(seq 50); do
    if ip -n "$nsA" -o link show dev "$vA" | grep -q 'state UP' && ip -n "$nsB" -o link show dev "$vB" | grep -q 'state UP' &&
       ip -n "$nsA" route show | grep -q "dev $vA" && ip -n "$nsB" route show | grep -q "dev $vB"; then
      return 0
    fi
    sleep 0.1
  done
  fail "the veth pair did not come up within 5 s"
}
link_ready
# tcp_ready NS_LISTEN NS_CONNECT IP: a TCP connection from NS_CONNECT to a
# listener in NS_LISTEN at IP succeeds (retried for up to 10 s). Without
# python3 there is no probe and only link_ready stands.
tcp_ready() {
  command -v python3 >/dev/null 2>&1 || return 0
  port=$(( (id % 20000) + 30000 ))
  timeout 15 ip netns exec "$1" python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); s.settimeout(12)
c, _ = s.accept(); c.close()' "$3" "$port" &
  lp=$!
  timeout 12 ip netns exec "$2" python3 -c '
import socket, sys, time
end = time.time() + 10
while True:
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close(); break
    except OSError:
        if time.time() > end: sys.exit(1)
        time.sleep(0.1)' "$3" "$port"
  ok=$?
  kill "$lp" 2>/dev/null; wait "$lp" 2>/dev/null
  return $ok
}
tcp_ready "$nsA" "$nsB" "$ipA" && tcp_ready "$nsB" "$nsA" "$ipB" || fail "no TCP connection across the veth pair within 10 s of bringing it up"

# The rsh agent: `agent HOST COMMAND...` runs COMMAND in HOST's namespace
# through a shell, as ssh would.
cat > "$tmp/agent" <<EOF
#!/bin/sh
host=\$1
shift
case \$host in
  $ipA) ns=$nsA ;;
  $ipB) ns=$nsB ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
EOF
chmod +x "$tmp/agent"
printf '%s slots=1\n%s slots=1\n' "$ipA" "$ipB" > "$tmp/hosts"

# Small generated IDX data (random pixels and labels; deterministic).
mkdir "$tmp/data"
gen() {  # gen PREFIX N SEED
  LC_ALL=C awk -v n="$2" -v seed="$3" '
    function be(v) { printf "%c%c%c%c", int(v / 16777216) % 256, int(v / 65536) % 256, int(v / 256) % 256, v % 256 }
    BEGIN { srand(seed); be(2051); be(n); be(28); be(28); for (i = 0; i < n * 784; i++) printf "%c", int(rand() * 256) }' \
    > "$tmp/data/$1-images-idx3-ubyte"
  LC_ALL=C awk -v n="$2" -v seed="$3" '
    function be(v) { printf "%c%c%c%c", int(v / 16777216) % 256, int(v / 65536) % 256, int(v / 256) % 256, v % 256 }
    BEGIN { srand(seed + 1); be(2049); be(n); for (i = 0; i < n; i++) printf "%c", int(rand() * 10) }' \
    > "$tmp/data/$1-labels-idx1-ubyte"
}
gen train 2048 1
gen t10k 256 2

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LOOM_DIST_TIMEOUT=$T
# 2048 samples / (2 ranks x 32) = 32 steps an epoch, 6 epochs, a checkpoint every 10 steps.
train="--data $tmp/data --epochs 6 --hidden 256,256 --batch 32 --device cpu --threads 1 --workers 1 --schedule constant"
# mpirun in namespace A (its node is local there), rank 1 through the agent
# into B; TCP only, on the veth subnet (the out-of-band channel too).
# Output per rank into files on the shared filesystem, so what a rank
# prints survives the cut link.
two_hosts() {  # two_hosts LIMIT_S OUTDIR TRAINER-FLAGS...
  lim=$1 out=$2
  shift 2
  timeout -k 5 "$lim" ip netns exec "$nsA" "$mpirun" --hostfile "$tmp/hosts" -np 2 --map-by node \
    --mca plm_rsh_agent "$tmp/agent" --mca btl tcp,self \
    --mca btl_tcp_if_include "$net.0/24" --mca oob_tcp_if_include "$net.0/24" \
    --output-filename "$out" -x LOOM_DIST_TIMEOUT ${ASAN_OPTIONS:+-x ASAN_OPTIONS} "$bin" "$@"
}
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
ranks_err() { cat "$1"/*/rank.*/stderr 2>/dev/null; }

# 1. One namespace (the machine's own: shared memory) vs two.
t0=$(now)
timeout -k 5 300 "$mpirun" -n 2 --oversubscribe -x LOOM_DIST_TIMEOUT "$bin" $train --quiet --save "$tmp/local" \
  > "$tmp/local.log" 2>&1 || { cat "$tmp/local.log"; fail "the single-namespace 2-rank run failed"; }
echo "two_hosts: single-namespace 2-rank run: $(secs "$t0" "$(now)") s"
t0=$(now)
two_hosts 300 "$tmp/out_full" $train --quiet --save "$tmp/full" > "$tmp/full.log" 2>&1
rc=$?
grep -v '^$' "$tmp/full.log"
[ $rc -eq 0 ] || { ranks_err "$tmp/out_full"; fail "the two-namespace run failed (exit status $rc; 124: it hung)"; }
grep -q "world_size=2" "$tmp/full.log" || fail "the two-namespace run printed no result line with world_size=2"
echo "two_hosts: two-namespace 2-rank run over TCP: $(secs "$t0" "$(now)") s"
cmp "$tmp/local/checkpoint.safetensors" "$tmp/full/checkpoint.safetensors" ||
  fail "the two-namespace run's final checkpoint differs from the single-namespace run's"
echo "two_hosts: ok two namespaces == one namespace (final checkpoints byte-identical)"

# 2. The link goes down after the first checkpoint (step 10 of 192).
t0=$(now)
two_hosts $((T + 90)) "$tmp/out_cut" $train --quiet --save "$tmp/cut" --save-every 10 > "$tmp/cut.log" 2>&1 &
bg=$!
while [ ! -f "$tmp/cut/checkpoint.safetensors" ] && kill -0 "$bg" 2>/dev/null; do sleep 0.05; done
ip -n "$nsA" link set "$vA" down || fail "link down"
t_down=$(now)
[ -f "$tmp/cut/checkpoint.safetensors" ] || fail "the run ended before its first checkpoint"
echo "two_hosts: link $vA down at $(secs "$t0" "$t_down") s into the run"
# Each rank must report loom's timeout error within T of the cut (the
# collective it waits in began before it), + 5 s for a loaded machine.
limit=$((T + 5))
for r in 0 1; do
  while ! grep -qs "did not complete within the $T s timeout" "$tmp"/out_cut/*/rank.$r/stderr; do
    [ "$(secs "$t_down" "$(now)" | cut -d. -f1)" -lt $limit ] || {
      ranks_err "$tmp/out_cut"; fail "rank $r reported no timeout error within $limit s of the cut (timeout $T s)"; }
    sleep 0.1
  done
  echo "two_hosts: ok rank $r failed $(secs "$t_down" "$(now)") s after the cut: $(grep -h "did not complete" "$tmp"/out_cut/*/rank.$r/stderr | head -1)"
done
wait "$bg"
rc=$?
bg=""
took=$(secs "$t_down" "$(now)")
grep -v '^$' "$tmp/cut.log" | grep -v "^-*$"
[ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "mpirun did not end by itself after the cut (stopped by the test's limit)"
[ $rc -ne 0 ] || fail "the cut run reported success"
echo "two_hosts: ok the job ended by itself $took s after the cut (mpirun exit status $rc)"
for ns in $nsA $nsB; do
  for p in $(ip netns pids "$ns"); do
    case $(cat /proc/"$p"/comm 2>/dev/null) in
      loom-mnist*) fail "a rank (pid $p) is still running in $ns after the job ended" ;;
    esac
  done
done

# 3. Link up; relaunch with --resume from the last checkpoint. What the
# failed job left (its daemons, neighbour entries that went FAILED while the
# link was down) goes first, as an operator would clear it, and the link
# must carry TCP both ways before the relaunch (in CI runs at 4b011a6 and
# f0f8a80, under load, the relaunch's daemons once could not connect back).
for ns in $nsA $nsB; do
  for p in $(ip netns pids "$ns"); do kill -9 "$p" 2>/dev/null; done
done
ip -n "$nsA" link set "$vA" up || fail "link up again"
link_ready
ip -n "$nsA" neigh flush all 2>/dev/null
ip -n "$nsB" neigh flush all 2>/dev/null
tcp_ready "$nsA" "$nsB" "$ipA" && tcp_ready "$nsB" "$nsA" "$ipB" || fail "no TCP connection across the veth pair within 10 s of bringing it back up"
t0=$(now)
two_hosts 300 "$tmp/out_resume" $train --save "$tmp/cut" --save-every 10 --resume > "$tmp/resume.log" 2>&1
rc=$?
# A launch that failed before any rank ran (mpirun could not start or reach
# its daemon: no rank output at all) says nothing about loom; retry it once,
# saying so. A failure after a rank started is a failure.
if [ $rc -ne 0 ] && ! ls "$tmp"/out_resume/*/rank.* >/dev/null 2>&1 && grep -q "unable to complete a TCP connection\|unable to reliably start" "$tmp/resume.log"; then
  echo "two_hosts: the relaunch's mpirun could not start its daemon (no rank ran); retrying the launch once:"
  grep -v '^$' "$tmp/resume.log" | head -8
  rm -rf "$tmp/out_resume"
  two_hosts 300 "$tmp/out_resume" $train --save "$tmp/cut" --save-every 10 --resume > "$tmp/resume.log" 2>&1
  rc=$?
fi
[ $rc -eq 0 ] || { cat "$tmp/resume.log"; ranks_err "$tmp/out_resume"; fail "the resumed run failed (exit status $rc)"; }
step=$(sed -n 's/^resumed from .* at step \([0-9]*\)$/\1/p' "$tmp/resume.log")
[ -n "$step" ] || { cat "$tmp/resume.log"; fail "the resumed run did not resume from the checkpoint"; }
[ "$step" -gt 0 ] && [ $((step % 10)) -eq 0 ] && [ "$step" -lt 192 ] || fail "resumed at step $step"
echo "two_hosts: resumed at step $step in $(secs "$t0" "$(now)") s"
cmp "$tmp/full/checkpoint.safetensors" "$tmp/cut/checkpoint.safetensors" ||
  fail "the resumed run's final checkpoint differs from the uninterrupted run's"
echo "two_hosts: ok interrupted + resumed == uninterrupted (final checkpoints byte-identical)"
echo "two_hosts: ok"
