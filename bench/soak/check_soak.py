#!/usr/bin/env python3
"""check_soak.py -- says whether each series of a soak run stays flat.

Reads the CSVs bench_soak writes (one or more; a file may hold several
models) and, per model and per series (rss_bytes, reserved_bytes,
allocated_bytes, open_fds, threads), compares every sample taken after the
warm-up with the first one after it: the series is flat when none differs
from that reference by more than the tolerance (1 % by default; for the
counts, fds and threads, that means equal). Also prints each series' value
at the end of warm-up, its min and max after it, and the drift from the
reference to the last sample.

Warm-up (--warmup MODEL=STEPS, repeatable): the steps before the state of a
run stops changing by design: the first evaluation and checkpoint (step 500
in bench_soak's defaults) size the evaluation batches and the checkpoint
writer's buffers, and the first profiler cycles. Defaults: mlp=1000 (5 % of
20,000 steps), resnet20=500 (the first evaluation at step 500 reserves its
larger batches).

Usage: check_soak.py [--tolerance 0.01] [--warmup mlp=1000] FILE.csv...
Prints a table in Markdown and exits 1 if any series grows or shrinks
beyond the tolerance.
"""
import argparse
import csv
import sys

SERIES = ["rss_bytes", "reserved_bytes", "allocated_bytes", "open_fds", "threads"]
DEFAULT_WARMUP = {"mlp": 1000, "resnet20": 500}


def load(paths):
    runs = {}
    for p in paths:
        with open(p, newline="") as f:
            for row in csv.DictReader(f):
                runs.setdefault(row["model"], []).append(row)
    return runs


def fmt(series, v):
    if series.endswith("_bytes"):
        return "%.1f MiB" % (v / 2**20)
    return "%d" % v


def check(runs, warmup, tol):
    ok = True
    print("| model | series | at warm-up end (step) | min after | max after | last | max deviation | flat (<= %g %%) |"
          % (100 * tol))
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for model, rows in runs.items():
        w = warmup.get(model, DEFAULT_WARMUP.get(model, 0))
        # A sample taken while the profiler records counts its open trace file:
        # bench_soak avoids them; skip any left (not comparable).
        after = [r for r in rows if int(r["step"]) >= w and r.get("profiler", "0") == "0"]
        if len(after) < 2:
            print("| %s | (fewer than 2 samples after warm-up %d) | | | | | | no |" % (model, w))
            ok = False
            continue
        for s in SERIES:
            vals = [float(r[s]) for r in after]
            ref = vals[0]
            dev = max(abs(v - ref) for v in vals)
            rel = dev / ref if ref else (0.0 if dev == 0 else float("inf"))
            flat = rel <= tol
            ok &= flat
            print("| %s | %s | %s (%s) | %s | %s | %s | %.3f %% | %s |" % (
                model, s, fmt(s, ref), after[0]["step"], fmt(s, min(vals)), fmt(s, max(vals)),
                fmt(s, vals[-1]), 100 * rel, "yes" if flat else "**NO**"))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--tolerance", type=float, default=0.01)
    ap.add_argument("--warmup", action="append", default=[], metavar="MODEL=STEPS")
    a = ap.parse_args()
    warmup = {}
    for w in a.warmup:
        m, _, n = w.partition("=")
        if not n.isdigit():
            ap.error("--warmup takes MODEL=STEPS, got %r" % w)
        warmup[m] = int(n)
    ok = check(load(a.csv), warmup, a.tolerance)
    print("\nverdict: %s" % ("every series flat after warm-up" if ok else
                            "SOMETHING GROWS (or shrinks), or too few samples after warm-up"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
