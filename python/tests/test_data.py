"""Datasets and the loader from Python: arrays, IDX files, Python callbacks
(called from loom's threads), errors, positions."""
import os

import numpy as np
import pytest

import loom

FASHION = "/usr/share/datasets/fashion-mnist"


def test_arrays_loader_is_deterministic_and_complete(no_leak):
    x = np.arange(50 * 3, dtype=np.float32).reshape(50, 3)
    y = np.arange(50, dtype=np.int64)
    ds = loom.Dataset.from_arrays(x, y)
    assert len(ds) == 50
    np.testing.assert_array_equal(ds.read(7)[0], x[7])
    a = loom.Loader(ds, batch_size=8, shuffle=True, seed=1, workers=2)
    b = loom.Loader(ds, batch_size=8, shuffle=True, seed=1, workers=0)
    assert len(a) == 7
    seen = []
    for (xa, ya), (xb, yb) in zip(a, b):
        np.testing.assert_array_equal(xa.numpy(), xb.numpy())
        np.testing.assert_array_equal(xa.numpy()[:, 0] / 3, ya.numpy())
        seen += ya.tolist()
    assert sorted(seen) == list(range(50))
    assert a.epoch == 1  # the loop ran to the end of epoch 0
    del a, b


def test_seek_repeats_batches(no_leak):
    x = np.arange(40, dtype=np.float32).reshape(40, 1)
    loader = loom.Loader(loom.Dataset.from_arrays(x), batch_size=4, shuffle=True, seed=3)
    first = [loader.next()[0].tolist() for _ in range(5)]
    loader.seek(0, 2)
    assert loader.position() == (0, 2)
    assert [loader.next()[0].tolist() for _ in range(3)] == first[2:5]
    del loader


def test_next_into_fills_my_tensors_like_next(no_leak):
    x = np.arange(21 * 3, dtype=np.float32).reshape(21, 3)
    y = np.arange(21, dtype=np.int64)
    ds = loom.Dataset.from_arrays(x, y)
    a = loom.Loader(ds, batch_size=8, shuffle=True, seed=5, workers=2)
    b = loom.Loader(ds, batch_size=8, shuffle=True, seed=5, workers=2)
    bx, by = loom.full((8, 3), -1.0), loom.full((8,), -1, dtype=loom.int64)
    for expect in (8, 8, 5, 0, 8):
        ref = a.next()
        n = b.next_into(bx, by)
        assert n == expect
        if ref is None:
            continue
        np.testing.assert_array_equal(bx.numpy()[:n], ref[0].numpy())
        np.testing.assert_array_equal(by.numpy()[:n], ref[1].numpy())
    assert b.position() == a.position()
    with pytest.raises(loom.Error) as e:
        b.next_into(loom.zeros(7, 3), by)
    assert e.value.status_name == "LOOM_ERR_INVALID_ARG" and "x has shape [7, 3]" in e.value.message
    assert b.position() == a.position()  # the bad call took no batch
    del a, b, bx, by


def test_python_callback_dataset(no_leak):
    calls = []

    def read(i):
        calls.append(i)
        return np.full((2, 2), i, dtype=np.float32), i % 2

    ds = loom.Dataset.from_callback(10, read, x_shape=(2, 2))
    loader = loom.Loader(ds, batch_size=5, workers=2)
    batches = list(loader)
    # Every sample once in the epoch (the workers may already be reading
    # the next epoch's, so `calls` can hold more than ten).
    assert len(batches) == 2 and set(calls) == set(range(10))
    seen = sorted(float(b[0].numpy()[k, 0, 0]) for b in batches for k in range(5))
    assert seen == list(range(10))
    assert batches[1][0].shape == (5, 2, 2) and batches[1][1].tolist() == [1, 0, 1, 0, 1]

    def broken(i):
        if i == 3:
            raise ValueError("sample three is bad")
        return np.zeros(2, dtype=np.float32), 0

    loader = loom.Loader(loom.Dataset.from_callback(8, broken, x_shape=(2,)), batch_size=2, workers=2)
    with pytest.raises(loom.Error, match="sample three is bad"):
        list(loader)
    del loader, batches


@pytest.mark.skipif(not os.path.exists(FASHION), reason="dataset-fashion-mnist is not installed")
def test_idx_files(no_leak):
    ds = loom.Dataset.idx(f"{FASHION}/t10k-images-idx3-ubyte.gz", f"{FASHION}/t10k-labels-idx1-ubyte.gz")
    assert len(ds) == 10000
    x, y = ds.read(0)
    assert x.shape == (28, 28) and x.dtype == np.uint8 and 0 <= int(y) <= 9
    with pytest.raises(loom.Error, match="idx"):
        loom.Dataset.idx(f"{FASHION}/t10k-labels-idx1-ubyte.gz", f"{FASHION}/t10k-images-idx3-ubyte.gz")


def test_sequence_datasets_feed_the_threaded_loader(no_leak):
    """A map-style dataset (len, [i] -> (x, y)), e.g. a torch Dataset, read by
    the loader's worker threads; and samples without labels."""
    torch = pytest.importorskip("torch")

    class Squares(torch.utils.data.Dataset):
        def __len__(self):
            return 30

        def __getitem__(self, i):
            return torch.full((2, 3), float(i)), i % 3

    ds = loom.Dataset.from_sequence(Squares())
    assert len(ds) == 30
    x, y = ds.read(7)
    assert x.shape == (2, 3) and x.dtype == np.float32 and y == 1
    seen = []
    for xb, yb in loom.Loader(ds, batch_size=4, shuffle=True, seed=5, workers=2):
        assert xb.shape[1:] == (2, 3) and yb.dtype == loom.int64
        np.testing.assert_array_equal(xb.numpy()[:, 0, 0] % 3, yb.numpy())
        seen += xb.numpy()[:, 0, 0].astype(int).tolist()
    assert sorted(seen) == list(range(30))
    plain = loom.Dataset.from_sequence([np.arange(4) * k for k in range(5)])  # x only, int64
    xs = [xb.numpy() for xb, yb in loom.Loader(plain, batch_size=5)]
    np.testing.assert_array_equal(xs[0][:, 1], np.arange(5))
    assert plain.read(2)[1] is None
    with pytest.raises(ValueError, match="empty"):
        loom.Dataset.from_sequence([])
