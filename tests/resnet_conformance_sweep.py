#!/usr/bin/env python3
"""resnet_conformance_sweep.py — run tests/test_resnet_conformance over many
seeds and CPU instruction sets and tabulate, per model and instruction set,
the worst share of each tolerance over the seeds (1.0 = at the tolerance).

    tests/resnet_conformance_sweep.py --build build-dev --seeds 1-10 \\
        --isa avx512,avx2,scalar --out bench/results/resnet-conformance-sweep-DATE.md

Each (seed, instruction set) is one run of the test program with
LOOM_CONFORMANCE_SEED and LOOM_CPU_ISA set (all its cases, one at a time);
an instruction set this CPU lacks is skipped. The test's per-case line
("conformance MODEL FORMAT isa=... seed=...: ... | of tolerance: fwd F grads
G sgd S | kinks ...") gives the numbers; a failed case is counted from
Criterion's "[FAIL]" line and its message kept. Exit status 1 when any case
failed or did not report. Plain Python 3 (no torch here: the test runs the
reference under LOOM_TEST_PYTHON, /usr/bin/python3 by default)."""
import argparse
import datetime
import os
import re
import subprocess
import sys
import time

LINE = re.compile(r"^conformance (\S+) (\S+) isa=(\S+) seed=(\d+): .*\| of tolerance: fwd (\S+) grads (\S+) sgd (\S+) \| "
                  r"kinks (\d+), loom flipped (\d+) \(at most (\S+) sigma from the kink\), torch f32 flipped (\d+) "
                  r"\((\d+) outside the window; fit recovered them: (\w+)\)")
FAIL = re.compile(r"^\[FAIL\] resnet_conformance::(\S+)")
CASES = {"resnet18": ("resnet18", "nhwc"), "resnet34": ("resnet34", "nchw"), "resnet50": ("resnet50", "nhwc"),
         "resnet50_nchw": ("resnet50", "nchw"), "resnet20_option_a": ("resnet20", "nchw"),
         "resnet56_option_b": ("resnet56", "nhwc")}
NEED = {"avx512": ["avx512f"], "avx2": ["avx2", "fma"], "scalar": []}


def seeds(spec):
    out = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b or a) + 1))
    return out


def cpu():
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return "unknown (no lscpu)", ""
    info = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    model = info.get("Model name", "?").strip()
    return (f"{model} (family {info.get('CPU family', '?').strip()}, model {info.get('Model', '?').strip()}), "
            f"{info.get('CPU(s)', '?').strip()} CPUs", info.get("Flags", ""))


def report(args, isas, runs, results, failures, started, cpu_name, final):
    """The Markdown table so far (to --out, and to stdout at the end)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or "?"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                           cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    out = [f"- Date: {datetime.date.today().isoformat()}",
           f"- Commit: {commit}{' (with uncommitted changes)' if dirty else ''}",
           f"- CPU: {cpu_name} (lscpu)",
           f"- Command: `{' '.join([os.path.relpath(sys.argv[0])] + sys.argv[1:])}`",
           f"- Seeds: {args.seeds}{'' if final else ' (still running)'}; runs: {len(runs)}, "
           f"{sum(r[2] for r in runs) / max(len(runs), 1):.0f} s each on "
           f"average (all cases, one at a time), {time.time() - started:.0f} s in all",
           "",
           "Worst share of each tolerance over the seeds (1.0 = at the tolerance): forward quantities (logits, loss, "
           "BatchNorm statistics, eval logits, torchvision's weights in loom) against 1e-5; gradients against max(1e-5, "
           "8 x PyTorch's own float32 error with every kink on float64's side); the SGD step. Kinks: candidates "
           "summed over the seeds; loom / PyTorch float32 flipped: how many of them each took the other side of, "
           "summed; sigma: the farthest from its kink a flip loom took was, in standard deviations of float32's "
           "forward error (candidates reach 8); fit misses: seeds where the fit did not recover PyTorch float32's "
           "known flips.",
           "",
           "| model | format | ISA | seeds passed | fwd | grads | sgd | kinks | loom flipped | max sigma | "
           "PyTorch f32 flipped | fit misses |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for model, fmt in CASES.values():
        for isa in isas:
            r = results.get((model, fmt, isa))
            if not r:
                out.append(f"| {model} | {fmt} | {isa} | 0 | | | | | | | | |")
                continue
            out.append(f"| {model} | {fmt} | {isa} | {r['seeds']}/{sum(1 for x in runs if x[0] == isa)} | {r['fwd']:.2f} | "
                       f"{r['grads']:.2f} | {r['sgd']:.2f} | {r['kinks']} | {r['flips']} | {r['sigma']:.2g} | "
                       f"{r['f32']} ({r['outside']} outside) | {r['unrecovered']} |")
    out.append("")
    out.append(f"Failures: {len(failures)}" + ("" if not failures else ""))
    for isa, seed, case, why in failures:
        out.append(f"- isa={isa} seed={seed} {case}: {why}")
    text = "\n".join(out) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if final:
        sys.stdout.write(text)


ROW = re.compile(r"^\| (\S+) \| (\S+) \| (\S+) \| (\d+)/(\d+) \| (\S+) \| (\S+) \| (\S+) \| (\d+) \| (\d+) \| (\S+) \| "
                 r"(\d+) \((\d+) outside\) \| (\d+) \|$")


def merge(paths, out_path):
    """One table from several: per row, passed and runs summed, the worst shares and sigma the largest, the
    counts summed; the sources' header lines and failures kept."""
    rows, order, heads, fails = {}, [], [], []
    for path in paths:
        with open(path) as f:
            lines = f.read().splitlines()
        heads.append(f"- {os.path.basename(path)}: " + "; ".join(x[2:] for x in lines if x.startswith("- ") and
                                                                  not x.startswith("- isa=")))
        fails += [x for x in lines if x.startswith("- isa=")]
        for line in lines:
            m = ROW.match(line)
            if not m:
                continue
            key, v = m.groups()[:3], m.groups()[3:]
            if key not in rows:
                order.append(key)
                rows[key] = [0, 0, 0.0, 0.0, 0.0, 0, 0, 0.0, 0, 0, 0]
            r = rows[key]
            for i, (kind, x) in enumerate(zip("ssmmmssmsss", v)):
                r[i] = max(r[i], float(x)) if kind == "m" else r[i] + int(x)
    text = "\n".join(["Merged from:"] + heads + ["", "| model | format | ISA | seeds passed | fwd | grads | sgd | kinks | "
                                                  "loom flipped | max sigma | PyTorch f32 flipped | fit misses |",
                                                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"])
    for key in order:
        r = rows[key]
        text += (f"\n| {' | '.join(key)} | {r[0]}/{r[1]} | {r[2]:.2f} | {r[3]:.2f} | {r[4]:.2f} | {r[5]} | {r[6]} | "
                 f"{r[7]:.2g} | {r[8]} ({r[9]} outside) | {r[10]} |")
    text += f"\n\nFailures: {len(fails)}\n" + "".join(x + "\n" for x in fails)
    if out_path:
        with open(out_path, "w") as f:
            f.write(text)
    sys.stdout.write(text)
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build-dev", help="build directory holding tests/test_resnet_conformance")
    ap.add_argument("--seeds", default="1-10", help="e.g. 1-10 or 1,5,9-12")
    ap.add_argument("--isa", default="avx512,avx2,scalar")
    ap.add_argument("--python", default=os.environ.get("LOOM_TEST_PYTHON", "/usr/bin/python3"))
    ap.add_argument("--out", help="write the Markdown table here (else stdout)")
    ap.add_argument("--merge", nargs="+", metavar="TABLE",
                    help="instead of running: combine the tables of sweeps run side by side (e.g. two halves of the "
                         "seeds, one per core) into one, to --out")
    args = ap.parse_args()
    if args.merge:
        return merge(args.merge, args.out)
    prog = os.path.join(args.build, "tests", "test_resnet_conformance")
    cpu_name, flags = cpu()
    results, failures, started = {}, [], time.time()
    isas = [i for i in args.isa.split(",") if all(f in flags.split() for f in NEED[i])]
    for isa in args.isa.split(","):
        if isa not in isas:
            print(f"skipping {isa}: this CPU lacks {' '.join(NEED[isa])}", file=sys.stderr)
    runs = []
    # Seeds outer, instruction sets inner, the table rewritten after each run:
    # a sweep cut short still covers every set evenly and leaves its table.
    for seed in seeds(args.seeds):
        for isa in isas:
            env = dict(os.environ, LOOM_CPU_ISA=isa, LOOM_CONFORMANCE_SEED=str(seed), LOOM_TEST_PYTHON=args.python)
            t0 = time.time()
            p = subprocess.run([prog, "-j1", "--verbose"], env=env, capture_output=True, text=True)
            runs.append((isa, seed, time.time() - t0))
            seen = set()
            lines = (p.stdout + p.stderr).splitlines()
            for i, line in enumerate(lines):
                m = LINE.match(line)
                if m:
                    model, fmt, _, _, fwd, grads, sgd, kinks, lf, sig, tf, outside, rec = m.groups()
                    r = results.setdefault((model, fmt, isa), dict(seeds=0, fwd=0, grads=0, sgd=0, kinks=0, flips=0,
                                                                   sigma=0, f32=0, outside=0, unrecovered=0))
                    r["seeds"] += 1
                    for k, v in (("fwd", fwd), ("grads", grads), ("sgd", sgd), ("sigma", sig)):
                        r[k] = max(r[k], float(v))
                    r["kinks"] += int(kinks)
                    r["flips"] += int(lf)
                    r["f32"] += int(tf)
                    r["outside"] += int(outside)
                    r["unrecovered"] += rec != "yes"
                    seen.add((model, fmt))
                f = FAIL.match(line)
                if f:
                    why = " ".join(x.strip() for x in lines[max(0, i - 6):i] if "[----]" in x)
                    failures.append((isa, seed, f.group(1), why))
            for case, key in CASES.items():
                if key not in seen and not any(x[:3] == (isa, seed, case) for x in failures):
                    failures.append((isa, seed, case, f"no result line (exit status {p.returncode})"))
            print(f"isa={isa} seed={seed}: {len(seen)}/{len(CASES)} cases passed ({runs[-1][2]:.0f} s)", file=sys.stderr)
            report(args, isas, runs, results, failures, started, cpu_name, final=False)

    report(args, isas, runs, results, failures, started, cpu_name, final=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
