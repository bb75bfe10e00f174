"""check_events.py — TensorBoard reads what loom writes.

  python check_events.py LOGDIR

Loads LOGDIR with TensorBoard's own EventAccumulator (its pure-Python
record reader checks both masked CRC-32C of every record, and stops at the
first bad one) and checks that every row of LOGDIR/metrics.csv is there as a
scalar with the same tag, step and value (TensorBoard stores floats: the CSV's
double rounded to float32). Then it shows the check can fail: it flips one
byte of a record's data CRC in a copy of the event file and asserts that
TensorBoard's reader rejects that record (and so the check finds scalars
missing), and that its record reader raises DataLossError on it.
"""
import csv
import glob
import os
import shutil
import struct
import sys
import tempfile

import numpy as np
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.tensorflow_stub import errors
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New


def expected(logdir):
    want = {}
    with open(os.path.join(logdir, "metrics.csv"), newline="") as f:
        for r in csv.DictReader(f):
            want.setdefault(r["tag"], {})[int(r["step"])] = float(r["value"])
    return want


def mismatches(logdir, want):
    """What TensorBoard has that differs from want (empty: all match)."""
    acc = event_accumulator.EventAccumulator(logdir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    problems = []
    for tag, steps in want.items():
        if tag not in tags:
            problems.append(f"tag {tag} missing")
            continue
        got = {e.step: e.value for e in acc.Scalars(tag)}
        for step, value in steps.items():
            if step not in got:
                problems.append(f"{tag} step {step} missing")
            else:
                v32 = np.float32(value)
                if not (got[step] == v32 or (np.isnan(v32) and np.isnan(got[step]))):
                    problems.append(f"{tag} step {step}: tensorboard {got[step]!r}, csv {value!r} (float32 {v32!r})")
        extra = set(got) - set(steps)
        if extra:
            problems.append(f"{tag}: steps {sorted(extra)[:5]} not in the csv")
    for tag in tags - set(want):
        problems.append(f"tag {tag} not in the csv")
    return problems


def record_offsets(path):
    """(start, length) of each record, walking the framing."""
    data = open(path, "rb").read()
    out, pos = [], 0
    while pos + 12 <= len(data):
        (n,) = struct.unpack("<Q", data[pos:pos + 8])
        out.append((pos, n))
        pos += 12 + n + 4
    if pos != len(data):
        raise SystemExit(f"check_events: {path}: {len(data) - pos} bytes after the last whole record")
    return out


def main(argv):
    if len(argv) != 2:
        raise SystemExit(__doc__)
    logdir = argv[1]
    files = glob.glob(os.path.join(logdir, "*tfevents*"))
    if len(files) != 1:
        raise SystemExit(f"check_events: expected one event file in {logdir}, found {files}")
    want = expected(logdir)
    nscalars = sum(len(s) for s in want.values())
    if nscalars == 0:
        raise SystemExit("check_events: metrics.csv has no rows")
    problems = mismatches(logdir, want)
    if problems:
        raise SystemExit("check_events: TensorBoard disagrees with metrics.csv:\n  " + "\n  ".join(problems[:20]))

    # The check must be able to fail: corrupt one record's data CRC.
    recs = record_offsets(files[0])
    victim = len(recs) // 2
    start, n = recs[victim]
    with tempfile.TemporaryDirectory() as tmp:
        bad = os.path.join(tmp, os.path.basename(files[0]))
        shutil.copy(files[0], bad)
        shutil.copy(os.path.join(logdir, "metrics.csv"), tmp)
        with open(bad, "r+b") as f:
            f.seek(start + 12 + n)  # the data CRC
            b = f.read(1)
            f.seek(start + 12 + n)
            f.write(bytes([b[0] ^ 0x01]))
        reader = PyRecordReader_New(bad)
        rejected = False
        try:
            for _ in range(len(recs)):
                reader.GetNext()
        except errors.DataLossError as e:
            rejected = "crc" in str(e).lower()
        except errors.OutOfRangeError:
            pass
        if not rejected:
            raise SystemExit("check_events: TensorBoard's reader accepted a corrupted CRC")
        lost = mismatches(tmp, want)
        if not lost:
            raise SystemExit("check_events: the check still passed on a corrupted file: it cannot fail")
    print(f"tensorboard: {nscalars} scalars of {len(want)} tags match metrics.csv; "
          f"a corrupted CRC in record {victim} of {len(recs)} is rejected ({len(lost)} scalars then missing)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
