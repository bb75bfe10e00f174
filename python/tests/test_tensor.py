"""Tensors from Python: creation, dtypes, views and indexing, ops against
NumPy, read-back, and loom.Error carrying loom's message."""
import numpy as np
import pytest

import loom


def test_creation_and_metadata(no_leak):
    x = loom.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert x.shape == (2, 3) and x.ndim == 2 and x.numel() == 6
    assert x.dtype == loom.float32 and x.device == "cpu"
    assert x.strides == (3, 1) and x.is_contiguous()
    assert loom.zeros(2, 3).tolist() == [[0.0] * 3] * 2
    assert loom.ones((4,), dtype="int64").tolist() == [1, 1, 1, 1]
    assert loom.full((2,), 7.5).tolist() == [7.5, 7.5]
    assert loom.arange(5).tolist() == [0, 1, 2, 3, 4]
    assert loom.tensor([1, 2, 3]).dtype == loom.int64
    assert loom.tensor(np.array([True, False])).dtype == loom.uint8
    assert loom.tensor(3.5).item() == 3.5


def test_every_dtype_round_trips_through_numpy(no_leak):
    for dt, npdt in [(loom.float32, np.float32), (loom.float16, np.float16), (loom.int32, np.int32),
                     (loom.int64, np.int64), (loom.uint8, np.uint8)]:
        a = (np.arange(12) % 7).astype(npdt).reshape(3, 4)
        t = loom.tensor(a)
        assert t.dtype == dt
        np.testing.assert_array_equal(t.numpy(), a)
    b = loom.tensor([1.0, 2.5, -3.0], dtype="bfloat16")
    assert b.dtype == loom.bfloat16
    assert b.numpy().dtype == np.float32 and b.tolist() == [1.0, 2.5, -3.0]


def test_random_is_seeded(no_leak):
    loom.manual_seed(3)
    a = loom.randn(100).numpy().copy()
    loom.manual_seed(3)
    b = loom.randn(100).numpy()
    np.testing.assert_array_equal(a, b)
    state = loom.rng_state()
    u1 = loom.rand(10).numpy().copy()
    loom.set_rng_state(state)
    np.testing.assert_array_equal(loom.rand(10).numpy(), u1)
    assert 0 < u1.min() and u1.max() < 1


def test_ops_match_numpy(no_leak):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    c = rng.standard_normal((5, 3)).astype(np.float32)
    ta, tb, tc = loom.tensor(a), loom.tensor(b), loom.tensor(c)
    close = lambda t, ref: np.testing.assert_allclose(t.numpy(), ref, rtol=1e-5, atol=1e-5)  # noqa: E731
    close(ta + tb, a + b)
    close(ta - tb, a - b)
    close(ta * tb, a * b)
    close(ta / (tb * tb + 1), a / (b * b + 1))
    close(ta + 2, a + 2)
    close(2 - ta, 2 - a)
    close(ta * 3, a * 3)
    close(1 / (ta * ta + 1), 1 / (a * a + 1))
    close(-ta, -a)
    close(ta.relu(), np.maximum(a, 0))
    close(ta.exp(), np.exp(a))
    close((ta * ta + 1).log(), np.log(a * a + 1))
    close((ta * ta).sqrt(), np.abs(a))
    close(ta ** 2, a ** 2)
    close(ta @ tc, a @ c)
    close(ta.sum(), a.sum())
    close(ta.sum(dim=1), a.sum(axis=1))
    close(ta.mean(dim=0, keepdim=True), a.mean(axis=0, keepdims=True))
    close(ta.max(dim=1), a.max(axis=1))
    np.testing.assert_array_equal(ta.argmax(dim=1).numpy(), a.argmax(axis=1))
    close(ta.log_softmax(dim=1), a - np.log(np.exp(a).sum(axis=1, keepdims=True)))
    logits, labels = loom.tensor(a), loom.tensor([0, 1, 2, 4])
    ref = -np.mean((a - np.log(np.exp(a).sum(axis=1, keepdims=True)))[np.arange(4), [0, 1, 2, 4]])
    assert abs(loom.cross_entropy(logits, labels).item() - ref) < 1e-5
    assert loom.accuracy(logits, labels) == np.mean(a.argmax(axis=1) == [0, 1, 2, 4])


def test_views_and_indexing(no_leak):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = loom.tensor(a)
    np.testing.assert_array_equal(t[1].numpy(), a[1])
    np.testing.assert_array_equal(t[:, 1:3].numpy(), a[:, 1:3])
    np.testing.assert_array_equal(t[0, ::2].numpy(), a[0, ::2])
    np.testing.assert_array_equal(t[-1, -1].numpy(), a[-1, -1])
    np.testing.assert_array_equal(t.transpose(0, 2).numpy(), a.transpose(2, 1, 0))
    np.testing.assert_array_equal(t.permute(1, 0, 2).numpy(), a.transpose(1, 0, 2))
    np.testing.assert_array_equal(t.reshape(4, 6).numpy(), a.reshape(4, 6))
    np.testing.assert_array_equal(t.view(-1).numpy(), a.reshape(-1))
    v = t[0]
    v.fill_(5.0)  # a view writes through
    assert t.numpy()[0].min() == 5.0 and t.numpy()[1].min() == 12.0
    t[1] = 0
    assert t.numpy()[1].max() == 0
    with pytest.raises(IndexError):
        t[2]


def test_casts_and_copies(no_leak):
    t = loom.tensor([1.5, -2.5, 3.25])
    assert t.to("float16").dtype == loom.float16
    assert t.half().float().tolist() == [1.5, -2.5, 3.25]
    assert t.to(loom.int32).tolist() == [1, -2, 3]
    c = t.clone()
    c.fill_(0)
    assert t.tolist() == [1.5, -2.5, 3.25]
    t.copy_(loom.tensor([9.0, 8.0, 7.0]))
    assert t.tolist() == [9.0, 8.0, 7.0]


def test_errors_carry_loom_messages(no_leak):
    with pytest.raises(loom.Error) as e:
        loom.zeros(2, 3) @ loom.zeros(2, 3)
    assert e.value.status_name == "LOOM_ERR_SHAPE"
    assert "matmul" in e.value.message and "[2, 3]" in e.value.message
    with pytest.raises(loom.Error) as e:
        loom.zeros(2, device="cuda:7")
    assert e.value.status_name == "LOOM_ERR_DEVICE"
    with pytest.raises(loom.Error, match="only float tensors can require grad"):
        loom.zeros(2, dtype="int64").requires_grad = True
    with pytest.raises(loom.Error, match="no loom training checkpoint|cannot open"):
        loom.load_file("/nonexistent.safetensors")
    with pytest.raises(TypeError, match="no dtype"):
        loom.zeros(2, dtype="float64")


def test_memory_summary_and_snapshot_come_back_as_python_objects(no_leak):
    """Text loom hands over (loom_memory_summary, loom_memory_snapshot_json)
    arrives as str / dict; the C memory went back through loom_free."""
    x = loom.zeros(1000)
    summary = loom.memory_summary("cpu")
    assert summary.startswith("loom memory summary: cpu")
    snap = loom.memory_snapshot("cpu")
    assert snap["device"] == "cpu" and snap["segments"]
    del x
    with pytest.raises(loom.Error) as e:
        loom.memory_summary("cuda:7")
    assert e.value.status_name == "LOOM_ERR_DEVICE"
