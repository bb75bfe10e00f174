#!/usr/bin/python3
"""plot_soak.py -- draws a soak run's series (bench_soak's CSVs) into a PNG.

One row per model: left, RSS and the caching allocator's reserved and
allocated bytes (MiB) against the step; right, open file descriptors and
threads. The warm-up (check_soak.py's defaults, or --warmup MODEL=STEPS) is
shaded.

Usage: plot_soak.py --out bench/results/soak-DATE.png FILE.csv...
Needs matplotlib: Debian's python3-matplotlib (installed by scripts/setup.sh),
hence /usr/bin/python3 rather than whatever python3 is first on PATH.
"""
import argparse
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from check_soak import DEFAULT_WARMUP  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--warmup", action="append", default=[], metavar="MODEL=STEPS")
    a = ap.parse_args()
    warmup = dict(DEFAULT_WARMUP)
    for w in a.warmup:
        m, _, n = w.partition("=")
        warmup[m] = int(n)
    runs = {}
    for p in a.csv:
        with open(p, newline="") as f:
            for row in csv.DictReader(f):
                runs.setdefault(row["model"], []).append(row)
    fig, axes = plt.subplots(len(runs), 2, figsize=(12, 4 * len(runs)), squeeze=False)
    mib = 2.0**20
    for i, (model, rows) in enumerate(runs.items()):
        step = [int(r["step"]) for r in rows]
        mem, cnt = axes[i]
        for key, label in [("rss_bytes", "RSS"), ("reserved_bytes", "allocator reserved"),
                           ("allocated_bytes", "allocator allocated")]:
            mem.plot(step, [int(r[key]) / mib for r in rows], marker=".", label=label)
        # the two counts may coincide: different markers and dashes keep both visible
        for key, label, style in [("open_fds", "open fds", "o-"), ("threads", "threads", "x--")]:
            cnt.plot(step, [int(r[key]) for r in rows], style, markersize=4, label=label)
        for ax in (mem, cnt):
            ax.axvspan(0, warmup.get(model, 0), color="0.9", label="warm-up")
            ax.set_xlabel("step")
            ax.grid(True, alpha=0.3)
            ax.legend(loc="best", fontsize=8)
        mem.set_ylabel("MiB")
        mem.set_ylim(bottom=0)
        cnt.set_ylabel("count")
        cnt.set_ylim(bottom=0, top=max(int(r[k]) for r in rows for k in ("open_fds", "threads")) + 2)
        mem.set_title("%s: memory (%d steps)" % (model, step[-1]))
        cnt.set_title("%s: descriptors and threads" % model)
    fig.tight_layout()
    fig.savefig(a.out, dpi=90)
    print("wrote %s" % a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
