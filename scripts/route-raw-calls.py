#!/usr/bin/env python3
"""route-raw-calls.py [--root DIR] — rewrite every raw allocation and file
call under lib/ (malloc, free, open, fsync, gzread, ...) into its wrapper
from lib/core/sys.h (loom_sys_malloc, ...), adding the include where a file
lacks it. Idempotent: run it again after merging code that calls the raw
functions; scripts/check-raw-calls.py (ctest raw_calls) then passes."""
import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import raw_calls  # noqa: E402

INCLUDES = {"loom_sys_": '#include "core/sys.h"', "loom_gz_": '#include "data/data_file.h"'}


def add_include(text, line):
    if line in text:
        return text
    # after the last include outside any #if (a header's guard aside)
    depth, incs = 0, []
    for m in re.finditer(r"^#\s*(if|ifdef|ifndef|endif|include)\b.*$", text, re.M):
        kind = m.group(1)
        if kind.startswith("if"):
            depth += 1
        elif kind == "endif":
            depth -= 1
        else:
            incs.append((depth, m))
    if incs:
        low = min(d for d, _ in incs)
        end = [m for d, m in incs if d == low][-1].end()
        return text[:end] + "\n" + line + text[end:]
    guard = re.search(r"^#define LOOM_\w+_H\s*$", text, re.M)
    at = guard.end() if guard else 0
    return text[:at] + "\n" + line + "\n" + text[at:]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    args = ap.parse_args()
    root = Path(args.root)
    total, files = 0, 0
    for path in raw_calls.lib_files(root):
        rel = path.relative_to(root).as_posix()
        allowed = raw_calls.ALLOWED.get(rel, set())
        names = [n for n in raw_calls.ROUTED if n not in allowed]
        text = path.read_text()
        calls = raw_calls.find_calls(text, names)
        if not calls:
            continue
        for off, name in reversed(calls):
            text = text[:off] + raw_calls.ROUTED[name] + text[off + len(name):]
        for prefix, line in INCLUDES.items():
            if any(raw_calls.ROUTED[name].startswith(prefix) for _, name in calls):
                text = add_include(text, line)
        path.write_text(text)
        total += len(calls)
        files += 1
        print(f"{rel}: {len(calls)} call(s) routed")
    print(f"route-raw-calls: {total} call(s) in {files} file(s)")


if __name__ == "__main__":
    main()
