#!/usr/bin/env python3
"""checkpoint_vs_torch.py — save/load throughput of a 1 GiB checkpoint, loom
(bench_checkpoint, a subprocess) against safetensors.torch, in alternating
rounds on the same directory, with the disk and page-cache limits measured in
the same run.

Both sides write 16 f32 tensors of 64 MiB (by default):
  save       loom_safetensors_save (atomic: temp, fsync, rename, dir fsync)
             vs safetensors.torch.save_file + fsync of the file (the same
             durability; save_file alone, without fsync, is printed too),
             to a new name;
  save_replace  the same again over the file just saved (a trainer's
             periodic checkpoint: loom renames over it, torch truncates it);
  Between rounds and before each side's saves, unlinked files are
  committed with sync(): with online discard (ext4 -o discard), freeing a
  durable 1 GiB file TRIMs its blocks inside the next journal commit, and
  the previous phase's unlink must not be paid by the next timed fsync.
  After save_replace both sides sync() too: loom's rename frees the old
  file's blocks at its last close, after the call returns (the TRIMs then
  run in the background, outside the save's time), while torch's in-place
  truncate frees them inside its own timed fsync.
  load_after_save  open + every tensor + one byte per 4 KiB page touched,
             right after the saves (loom: zero-copy views of a private map;
             loom writes large files with O_DIRECT, so they are not in the
             page cache then, torch's buffered writes are);
  load_warm  the same with the file in the page cache (read once, untimed);
  load_cold  the same after posix_fadvise(DONTNEED) evicted the file.
One line per measurement, then one line per op with the medians and
ratio = loom throughput / safetensors.torch throughput (> 1: loom faster):
  bench=checkpoint_ratio op=save loom_gib_per_s=... torch_gib_per_s=... ratio=... disk_write_gib_per_s=...

Usage: /usr/bin/python3 bench/checkpoint/checkpoint_vs_torch.py --bench build/bench/bench_checkpoint
          [--mib 1024] [--tensors 16] [--rounds 3] [--dir /tmp]
(needs torch and the safetensors package; bench/checkpoint/run_checkpoint_vs_torch.sh
makes a venv with them).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file, save_file


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def touch(tensors):
    s = 0
    for t in tensors.values():
        s += int(t.view(-1).view(torch.uint8)[::4096].sum())
    return s


def line(impl, op, mib, r, seconds):
    print(f"bench=checkpoint impl={impl} op={op} mib={mib} round={r} seconds={seconds:.4f} "
          f"gib_per_s={mib / 1024 / seconds:.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--tensors", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default="/tmp")
    a = ap.parse_args()
    torch.manual_seed(1)
    per = a.mib * (1 << 20) // a.tensors // 4
    tensors = {f"model.layers.{i}.weight": torch.rand(per) for i in range(a.tensors)}
    path = os.path.join(a.dir, "bench_checkpoint_torch.safetensors")
    results = {}

    def record(impl, op, seconds, r):
        results.setdefault((impl, op), []).append(seconds)
        line(impl, op, a.mib, r, seconds)

    for r in range(a.rounds):
        out = subprocess.run([a.bench, "--mib", str(a.mib), "--tensors", str(a.tensors), "--dir", a.dir,
                              "--rounds", "1"], check=True, capture_output=True, text=True).stdout
        for ln in out.splitlines():
            kv = dict(f.split("=", 1) for f in ln.split())
            record(kv["impl"], kv["op"], float(kv["seconds"]), r)

        t0 = time.perf_counter()
        save_file(tensors, path)
        record("torch", "save_nofsync", time.perf_counter() - t0, r)
        os.unlink(path)
        os.sync()  # nothing of the previous step in the next timed fsync
        for op in ("save", "save_replace"):  # a new file, then over it (in place: save_file truncates)
            t0 = time.perf_counter()
            save_file(tensors, path)
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            record("torch", op, time.perf_counter() - t0, r)
        os.sync()  # as bench_checkpoint does before its loads
        for op in ("load_after_save", "load_warm", "load_cold"):
            if op == "load_warm":
                with open(path, "rb") as f:  # into the page cache
                    while f.read(64 << 20):
                        pass
            if op == "load_cold":
                evict(path)
            t0 = time.perf_counter()
            d = load_file(path)
            touch(d)
            record("torch", op, time.perf_counter() - t0, r)
            del d
        os.unlink(path)
        os.sync()

    med = {k: statistics.median(v) for k, v in results.items()}
    gib = a.mib / 1024
    for op in ("save", "save_replace", "load_after_save", "load_warm", "load_cold"):
        if ("loom", op) not in med or ("torch", op) not in med:
            continue
        limit = {"save": ("raw", "disk_write"), "save_replace": ("raw", "disk_write"),
                 "load_after_save": ("raw", "disk_read_cold"), "load_warm": ("raw", "pagecache_read"),
                 "load_cold": ("raw", "disk_read_cold")}[op]
        extra = f" {limit[1]}_gib_per_s={gib / med[limit]:.3f}" if limit in med else ""
        print(f"bench=checkpoint_ratio op={op} mib={a.mib} rounds={a.rounds} loom_gib_per_s={gib / med[('loom', op)]:.3f} "
              f"torch_gib_per_s={gib / med[('torch', op)]:.3f} ratio={med[('torch', op)] / med[('loom', op)]:.2f}"
              f"{extra}", flush=True)
    if ("torch", "save_nofsync") in med:
        print(f"bench=checkpoint_ratio op=save_vs_torch_without_fsync mib={a.mib} "
              f"ratio={med[('torch', 'save_nofsync')] / med[('loom', 'save')]:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
