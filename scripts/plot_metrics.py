#!/usr/bin/python3
"""plot_metrics.py — render a loom metrics.csv (wall_time,step,tag,value, as
written by `loom-mnist --logdir DIR`) to a PNG of the loss and accuracy curves.

  /usr/bin/python3 scripts/plot_metrics.py DIR/metrics.csv [OUT.png]

OUT defaults to metrics.png beside the CSV. Panels: training loss per logged
step with the per-epoch mean; batch accuracy per logged step with the test
accuracy at each epoch's end. Uses Debian's matplotlib (no display needed).
"""
import csv
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    series = {}
    with open(path, newline="") as f:
        rows = csv.DictReader(f)
        need = {"wall_time", "step", "tag", "value"}
        if not rows.fieldnames or not need.issubset(rows.fieldnames):
            raise SystemExit(f"plot_metrics: {path}: expected the columns {sorted(need)}, got {rows.fieldnames}")
        for r in rows:
            try:
                step, value = int(r["step"]), float(r["value"])
            except ValueError:
                raise SystemExit(f"plot_metrics: {path}: bad row {r}")
            series.setdefault(r["tag"], []).append((step, value))
    for pts in series.values():
        pts.sort()
    return series


def plot(ax, series, tag, label, style):
    pts = [(s, v) for s, v in series.get(tag, []) if math.isfinite(v)]
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label)
    return len(pts)


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    src = argv[1]
    out = argv[2] if len(argv) > 2 else os.path.join(os.path.dirname(src) or ".", "metrics.png")
    series = read(src)
    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    n = plot(loss_ax, series, "train/loss", "train loss (step)", "-")
    n += plot(loss_ax, series, "epoch/train_loss", "train loss (epoch mean)", "o-")
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("loss")
    loss_ax.set_title("loss")
    n += plot(acc_ax, series, "train/accuracy", "batch accuracy (step)", "-")
    n += plot(acc_ax, series, "epoch/test_accuracy", "test accuracy (epoch)", "o-")
    acc_ax.set_xlabel("step")
    acc_ax.set_ylabel("accuracy")
    acc_ax.set_title("accuracy")
    if n == 0:
        raise SystemExit(f"plot_metrics: {src} has no loss or accuracy scalars")
    for ax in (loss_ax, acc_ax):
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    print(f"plot_metrics: wrote {out} ({n} points)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
