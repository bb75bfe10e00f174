#!/bin/sh
# check-prof-env.sh EXAMPLE — LOOM_PROFILE=path profiles a whole program
# that never calls the profiler: the README example (100 MLP steps) writes
# a Chrome trace at exit and prints the summary table; a bad path is a
# warning, not a failure of the program.
set -eu
prog="$1"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
LOOM_PROFILE="$tmp/trace.json" "$prog" >"$tmp/out.txt" 2>"$tmp/err.txt"
grep -q "loom profiler:" "$tmp/err.txt" || { echo "no summary on stderr:"; cat "$tmp/err.txt"; exit 1; }
grep -q "trace written to $tmp/trace.json" "$tmp/err.txt"
python3 - "$tmp/trace.json" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
host = [e for e in ev if e.get("ph") == "X" and e.get("pid") == 1]
lin = sum(1 for e in host if e["name"] == "linear" and e["cat"] == "op")
adam = sum(1 for e in host if e["name"] == "adamw step")
assert lin == 200 and adam == 100, f"{lin} linear ops and {adam} optimizer steps, want 200 and 100"
assert any(e.get("ph") == "C" for e in ev), "no memory counters"
print(f"LOOM_PROFILE: {len(ev)} events, {lin} linear ops, {adam} optimizer steps")
PY
LOOM_PROFILE=/nonexistent-dir/t.json "$prog" >"$tmp/out2.txt" 2>"$tmp/err2.txt"
grep -q "LOOM_PROFILE=/nonexistent-dir/t.json: .*cannot create" "$tmp/err2.txt" || { cat "$tmp/err2.txt"; exit 1; }
echo "prof env: ok"
