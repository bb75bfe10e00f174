#!/usr/bin/env python3
"""check-raw-calls.py [--root DIR] — fails when code under lib/ calls a raw
allocation or file function (malloc, free, open, read, fsync, mmap, gzread,
...) instead of its wrapper in lib/core/sys.h, or one of the raw calls that
has no wrapper yet: such a call escapes fault injection (core/fault.h).
scripts/route-raw-calls.py fixes the routed ones mechanically. ctest
raw_calls runs it; raw_calls_catches_malloc proves it fails on a fixture."""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import raw_calls  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    args = ap.parse_args()
    root = Path(args.root)
    banned = set(raw_calls.ROUTED) | set(raw_calls.FORBIDDEN)
    bad, checked = 0, 0
    for path in raw_calls.lib_files(root):
        rel = path.relative_to(root).as_posix()
        names = banned - raw_calls.ALLOWED.get(rel, set())
        text = path.read_text()
        checked += 1
        for off, name in raw_calls.find_calls(text, names):
            line = text.count("\n", 0, off) + 1
            fix = (f"use {raw_calls.ROUTED[name]} ({'core/sys.h' if name in raw_calls.ROUTED and raw_calls.ROUTED[name].startswith('loom_sys_') else 'data/data_file.h'}); "
                   "scripts/route-raw-calls.py rewrites these") if name in raw_calls.ROUTED else \
                "no wrapper: add one to lib/core/sys.h first"
            print(f"{rel}:{line}: raw call {name}() escapes fault injection: {fix}")
            bad += 1
    if bad:
        print(f"check-raw-calls: {bad} raw call(s) in lib/")
        return 1
    print(f"check-raw-calls: {checked} files under lib/, every allocation and file call goes through core/sys.h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
