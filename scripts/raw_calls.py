"""raw_calls.py — what scripts/route-raw-calls.py rewrites and
scripts/check-raw-calls.py forbids: the C library's allocation and file
calls that lib/ must make through lib/core/sys.h (fault injection,
docs/design.md §12), and where the raw calls may stay."""
import re
from pathlib import Path

# raw name -> the wrapper lib/ calls instead
ROUTED = {n: "loom_sys_" + n for n in (
    "malloc", "calloc", "realloc", "aligned_alloc", "posix_memalign", "strdup", "strndup", "free",
    "open", "read", "pread", "write", "fsync", "close", "rename", "unlink", "mmap", "munmap",
    "fopen", "fread", "fwrite", "fflush", "fclose", "getline")}
# zlib's file calls go through data/data_file.h
ROUTED.update({"gzopen": "loom_gz_open", "gzread": "loom_gz_read"})
# Further raw calls nothing in lib/ may make (they would allocate or do file
# I/O behind the counter's back); add a wrapper to sys.h before using one.
FORBIDDEN = ("valloc", "pvalloc", "memalign", "asprintf", "vasprintf", "open_memstream",
             "getdelim", "fdopen", "freopen", "tmpfile", "mkstemp", "creat", "openat", "pwrite",
             "fdatasync", "renameat", "mremap")

# The entry points themselves.
ALLOWED = {
    "lib/core/sys.h": set(ROUTED) | set(FORBIDDEN),
    "lib/data/data_file.h": {"gzopen", "gzread"},
    "lib/data/gz_fallback.h": {"gzopen", "gzread"},
}

SOURCE_GLOBS = ("*.c", "*.h", "*.cu", "*.cuh")


def lib_files(root):
    lib = Path(root) / "lib"
    for pattern in SOURCE_GLOBS:
        yield from sorted(lib.rglob(pattern))


def code_mask(text):
    """text with comments, strings and character literals blanked (same length,
    newlines kept), so calls are matched only in code."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
        elif c == "#" and text.startswith("include", i + 1 + len(text[i + 1:]) - len(text[i + 1:].lstrip(" "))):
            j = text.find("\n", i)   # #include <...>: not code
            j = n if j < 0 else j
        else:
            i += 1
            continue
        for k in range(i, j):
            if out[k] != "\n":
                out[k] = " "
        i = j
    return "".join(out)


def call_re(names):
    # a call of a plain function: not a member (a.read(, p->free(), not part of a longer name
    return re.compile(r"(?<![\w.>])(" + "|".join(sorted(names, key=len, reverse=True)) + r")\s*\(")


def find_calls(text, names):
    """(offset, name) of each call of one of names in the code of text."""
    if not names:
        return []
    masked = code_mask(text)
    return [(m.start(1), m.group(1)) for m in call_re(names).finditer(masked)]
