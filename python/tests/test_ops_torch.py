"""The ops PyTorch users reach for first, under PyTorch's names, against
PyTorch itself: broadcasting arithmetic, @, indexing and slicing (ints,
slices, None, ...), reshape / view / permute / transpose / flatten /
unsqueeze / squeeze, cat and stack, softmax, sigmoid, tanh — values and
gradients."""
import numpy as np
import pytest

import loom
from conftest import needs


def _pair(*shape, seed=0):
    torch = needs("torch")
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return loom.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


def _same(mine, ref, rtol=1e-5, atol=1e-6):
    assert tuple(mine.shape) == tuple(ref.shape), (mine.shape, ref.shape)
    np.testing.assert_allclose(mine.numpy(), ref.detach().numpy(), rtol=rtol, atol=atol)


CASES = {
    "broadcast add/mul/sub/div": lambda F, a, b: ((a + b) * b - a / (b * b + 1)).sum(0),
    "scalars both sides": lambda F, a, b: (2 - a) * 3 + 1 / (a * a + 1) - b ** 2,
    "batched matmul @ (broadcast)": lambda F, a, b: a @ b.reshape(4, 3),
    "index and slice": lambda F, a, b: a[1, :, 1:3] * b[:, 0:2] + (a[:, :, ::2] * b[None, ..., 0:2]).sum(0),
    "negative index, None, ...": lambda F, a, b: a[-1][..., None] * b[0, 2],
    "reshape -1, permute, transpose": lambda F, a, b: a.reshape(-1, 4).permute(1, 0).transpose(0, 1).reshape(2, 12),
    "flatten, unsqueeze, squeeze": lambda F, a, b: a.flatten(1).unsqueeze(0).squeeze(0).unsqueeze(-1),
    "view": lambda F, a, b: a.view(6, 4) * 2,
    "softmax": lambda F, a, b: a.softmax(-1) * a,
    "log_softmax dim 1": lambda F, a, b: a.log_softmax(1),
    "sigmoid, tanh": lambda F, a, b: a.sigmoid() + b.tanh().sum(),
    "sum, mean, max dims": lambda F, a, b: a.sum(1, keepdim=True) + a.mean((0, 2), keepdim=True) - a.amax(2, True) + a.amin(0),
    "exp, log, sqrt, relu": lambda F, a, b: (a.exp() + 1).log() + (a * a + 1).sqrt() + a.relu(),
}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_torch_values_and_gradients(name, no_leak):
    torch = needs("torch")
    f = CASES[name]
    a, ta = _pair(2, 3, 4)
    b, tb = _pair(3, 4, seed=1)
    out, ref = f(loom, a, b), f(torch, ta, tb)
    _same(out, ref)
    w = np.random.default_rng(2).standard_normal(tuple(ref.shape)).astype(np.float32)
    (out * loom.tensor(w)).sum().backward()
    (ref * torch.from_numpy(w)).sum().backward()
    _same(a.grad, ta.grad, rtol=1e-4, atol=1e-5)
    if tb.grad is not None:
        _same(b.grad, tb.grad, rtol=1e-4, atol=1e-5)


def test_cat_and_stack_match_torch(no_leak):
    torch = needs("torch")
    parts = [_pair(2, k, 3, seed=k) for k in (1, 2, 3, 1, 2, 1, 1)]  # seven: past one op's five inputs
    mine, ref = loom.cat([p for p, _ in parts], 1), torch.cat([t for _, t in parts], 1)
    _same(mine, ref)
    w = np.random.default_rng(9).standard_normal(tuple(ref.shape)).astype(np.float32)
    (mine * loom.tensor(w)).sum().backward()
    (ref * torch.from_numpy(w)).sum().backward()
    for (p, t) in parts:
        _same(p.grad, t.grad)
    s = [_pair(3, 2, seed=k) for k in range(3)]
    _same(loom.stack([p for p, _ in s], 1), torch.stack([t for _, t in s], 1))
    _same(loom.cat([p for p, _ in s], -1), torch.cat([t for _, t in s], -1))
    with pytest.raises(loom.Error, match="all must agree except in dim 0"):
        loom.cat([loom.zeros(2, 3), loom.zeros(2, 4)])
    with pytest.raises(loom.Error, match="cast one of them"):
        loom.cat([loom.zeros(2), loom.zeros(2, dtype=loom.int64)])


def test_indexing_errors_and_setitem():
    t = loom.arange(12).reshape(3, 4)
    with pytest.raises(IndexError, match="out of range"):
        t[3]
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        t[..., ...]
    t[1, 1:3] = 7.0
    assert t[1].tolist() == [4.0, 7.0, 7.0, 7.0]
    assert t[..., -1].tolist() == [3.0, 7.0, 11.0]
    assert t[None].shape == (1, 3, 4) and t[:, None, 2].shape == (3, 1)


def test_functional_cnn_ops_match_torch(no_leak):
    torch = needs("torch")
    F, TF = loom.nn.functional, torch.nn.functional
    x, tx = _pair(2, 3, 9, 9)
    w, tw = _pair(4, 3, 3, 3, seed=1)
    b, tb = _pair(4, seed=2)
    _same(F.conv2d(x, w, b, stride=2, padding=1), TF.conv2d(tx, tw, tb, stride=2, padding=1), rtol=1e-4, atol=1e-5)
    _same(F.conv2d(x, w, None, dilation=2), TF.conv2d(tx, tw, None, dilation=2), rtol=1e-4, atol=1e-5)
    _same(F.max_pool2d(x, 3, 2, 1), TF.max_pool2d(tx, 3, 2, 1))
    _same(F.avg_pool2d(x, 2, ceil_mode=True), TF.avg_pool2d(tx, 2, ceil_mode=True))
    _same(F.adaptive_avg_pool2d(x, (2, 3)), TF.adaptive_avg_pool2d(tx, (2, 3)))
    rm, rv = loom.zeros(3), loom.ones(3)
    trm, trv = torch.zeros(3), torch.ones(3)
    g, tg = _pair(3, seed=3)
    _same(F.batch_norm(x, rm, rv, g, None, training=True, momentum=0.2),
          TF.batch_norm(tx, trm, trv, tg, None, training=True, momentum=0.2), rtol=1e-4, atol=1e-5)
    _same(rv, trv)
    lw, tlw = _pair(5, 243, seed=4)
    _same(F.linear(x.flatten(1), lw, b[:1].expand(5)), TF.linear(tx.flatten(1), tlw, tb[:1].expand(5)),
          rtol=1e-4, atol=1e-4)
    d = F.dropout(loom.ones(1000), 0.25)
    kept = d.numpy()
    assert set(np.unique(kept)) <= {0.0, np.float32(1 / 0.75)} and 0.6 < (kept > 0).mean() < 0.9
    assert F.dropout(x, 0.5, training=False) is not None
