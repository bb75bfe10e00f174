#!/usr/bin/env python3
"""check-layers.py — keep loom's dependencies pointing one way (docs/design.md).

Every source file under lib/ belongs to a layer (its first directory), every
public header include/loom/X.h to the layer that implements it. A file may
include headers of its own layer or of a layer below it, never above:

    core → device → prof → alloc → graph → tensor → ops → autograd
         → amp → nn → optim → data → dist → io

With --objects DIR (a build's loom_obj.dir), the same rule is also checked on
the compiled objects: a symbol an object uses must be defined by an object of
its own layer or one below, so a prototype declared by hand instead of
included cannot hide an upward call.

Prints every back-edge (file, line, what it includes and why that points up)
and exits 1 if there is any; exits 0 with a one-line summary otherwise.
"""
import argparse
import os
import re
import subprocess
import sys

LAYERS = ["core", "device", "prof", "alloc", "graph", "tensor", "ops", "autograd",
          "amp", "nn", "optim", "data", "dist", "io"]
RANK = {name: i for i, name in enumerate(LAYERS)}

# Public headers: the layer whose code they declare. The umbrellas, loom.h
# and loom.hpp (C++ RAII over all of loom.h), sit above every layer: they are
# for users only; no file under lib/ or include/ may include them.
UMBRELLAS = ("loom.h", "loom.hpp")
PUBLIC = {
    "export.h": "core", "status.h": "core", "free.h": "core", "shutdown.h": "core", "dtype.h": "core", "log.h": "core", "rng.h": "core",
    "device.h": "device", "prof.h": "prof", "alloc.h": "alloc", "graph.h": "graph",
    "tensor.h": "tensor", "ops.h": "ops", "autograd.h": "autograd", "amp.h": "amp",
    "nn.h": "nn", "gpt.h": "nn", "optim.h": "optim", "batch.h": "optim", "data.h": "data",
    "dist.h": "dist", "io.h": "io", "metrics.h": "io",
}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".hpp")


def lib_layer(rel):
    """Layer of a path relative to lib/ ('ops/cpu/gemm.c' -> 'ops')."""
    head = rel.split("/", 1)[0]
    return head if head in RANK else None


def target_layer(root, src_dir, inc):
    """Layer an #include names, or None for system / third-party headers."""
    if inc.startswith("loom/"):
        name = inc[len("loom/"):]
        if name in UMBRELLAS:
            return "UMBRELLA"
        return PUBLIC.get(name, "UNKNOWN_PUBLIC")
    lib = os.path.join(root, "lib")
    for base in (lib, src_dir):
        cand = os.path.normpath(os.path.join(base, inc))
        if os.path.exists(cand) and cand.startswith(lib + os.sep):
            return lib_layer(os.path.relpath(cand, lib))
    if os.path.exists(os.path.normpath(os.path.join(src_dir, inc))) and src_dir.endswith(os.path.join("include", "loom")):
        return PUBLIC.get(os.path.basename(inc), "UNKNOWN_PUBLIC")
    return None


def sources(root):
    for top, layer_of in (("lib", None), ("include/loom", "public")):
        base = os.path.join(root, top)
        for d, _, files in os.walk(base):
            for f in sorted(files):
                if f.endswith(SOURCE_EXT):
                    path = os.path.join(d, f)
                    if layer_of == "public":
                        layer = "UMBRELLA" if f in UMBRELLAS else PUBLIC.get(f, "UNKNOWN_PUBLIC")
                    else:
                        layer = lib_layer(os.path.relpath(path, base))
                    yield path, layer


def check_includes(root):
    problems = []
    count = 0
    for path, layer in sources(root):
        rel = os.path.relpath(path, root)
        if layer == "UNKNOWN_PUBLIC":
            problems.append(f"{rel}: public header missing from check-layers.py's PUBLIC map")
            continue
        if layer is None:
            problems.append(f"{rel}: not inside a known layer directory ({', '.join(LAYERS)})")
            continue
        with open(path, errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                tgt = target_layer(root, os.path.dirname(path), m.group(1))
                if tgt is None:
                    continue
                count += 1
                if layer == "UMBRELLA":
                    continue
                if tgt == "UMBRELLA":
                    problems.append(f"{rel}:{lineno}: includes {m.group(1)} (the users' umbrella); include the headers it needs")
                elif tgt == "UNKNOWN_PUBLIC":
                    problems.append(f"{rel}:{lineno}: includes {m.group(1)}, a public header missing from the PUBLIC map")
                elif RANK[tgt] > RANK[layer]:
                    problems.append(f"{rel}:{lineno}: {layer} includes {m.group(1)} ({tgt}), a layer above it")
    return problems, count


def check_objects(objdir):
    """Symbol-level check over the compiled objects of loom_obj."""
    defs, uses = {}, {}
    for d, _, files in os.walk(objdir):
        for f in files:
            if not f.endswith(".o"):
                continue
            obj = os.path.join(d, f)
            rel = os.path.relpath(obj, objdir)
            layer = lib_layer(rel)
            if layer is None:
                continue
            out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[1] in "TDBRVWG":
                    defs[parts[2]] = (layer, rel)
                elif len(parts) == 2 and parts[0] == "U":
                    uses.setdefault((layer, rel), set()).add(parts[1])
    problems = []
    for (layer, rel), syms in sorted(uses.items()):
        for s in sorted(syms):
            if s in defs and RANK[defs[s][0]] > RANK[layer]:
                problems.append(f"{rel}: {layer} calls {s}, defined in {defs[s][1]} ({defs[s][0]}), a layer above it")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--objects", help="a build's lib/CMakeFiles/loom_obj.dir: also check symbol references")
    args = ap.parse_args()
    root = os.path.normpath(args.root)
    problems, count = check_includes(root)
    if args.objects:
        problems += check_objects(args.objects)
    if problems:
        print("check-layers: dependencies that point up the layer order "
              "(" + " → ".join(LAYERS) + "):")
        for p in problems:
            print("  " + p)
        return 1
    what = "includes" + (" and object symbols" if args.objects else "")
    print(f"check-layers: {count} loom includes checked, {what} all point down the layer order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
