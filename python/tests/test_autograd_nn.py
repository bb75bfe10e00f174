"""Autograd, modules, optimizers and the loss scaler from Python."""
import numpy as np
import pytest

import loom


def test_backward_matches_the_analytic_gradient(no_leak):
    a = np.array([[0.5, -1.0], [2.0, 0.25]], dtype=np.float32)
    x = loom.tensor(a, requires_grad=True)
    y = ((x * x) * 3 + x).sum()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 6 * a + 1, rtol=1e-6)
    x.zero_grad()
    assert x.grad is None
    with loom.no_grad():
        z = x * 2
        assert not z.requires_grad and not loom.is_grad_enabled()
    assert loom.is_grad_enabled()


def test_modules_have_pytorch_names_and_shapes(no_leak):
    loom.manual_seed(0)
    m = loom.nn.MLP(6, [16, 8], 3)
    names = [n for n, _ in m.named_parameters()]
    assert names == ["0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias"]
    assert [p.shape for p in m.parameters()] == [(16, 6), (16,), (8, 16), (8,), (3, 8), (3,)]
    assert all(p.requires_grad for p in m.parameters())
    assert "Linear(6, 16, relu)" in repr(m)
    m.eval()
    assert not m.training
    m.train()
    seq = loom.nn.Sequential(loom.nn.Linear(4, 5), loom.nn.ReLU(), loom.nn.Linear(5, 2))
    # the ReLU is fused into the Linear before it, so the second Linear is child 1
    assert [n for n, _ in seq.named_parameters()] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert seq(loom.zeros(7, 4)).shape == (7, 2)
    sd = seq.state_dict()
    other = loom.nn.Sequential(loom.nn.Linear(4, 5), loom.nn.ReLU(), loom.nn.Linear(5, 2))
    other.load_state_dict({k: v.clone() for k, v in sd.items()})
    for (_, p), (_, q) in zip(seq.named_parameters(), other.named_parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    with pytest.raises(loom.Error):
        loom.nn.Linear(3, 4)(loom.zeros(2, 5))


def _blobs(n=256, seed=1):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    centers = np.array([[2, 0], [-2, 1], [0, -2]], dtype=np.float32)
    x = centers[y] + rng.standard_normal((n, 2)).astype(np.float32) * 0.6
    return x.astype(np.float32), y.astype(np.int64)


@pytest.mark.parametrize("opt_name", ["adamw", "sgd"])
def test_training_learns(opt_name, no_leak):
    loom.manual_seed(1)
    x, y = _blobs()
    model = loom.nn.MLP(2, [32], 3)
    opt = (loom.optim.AdamW(model.parameters(), lr=1e-2) if opt_name == "adamw"
           else loom.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    sched = loom.optim.cosine(opt.lr, 10, 200, 1e-3)
    loader = loom.Loader(loom.Dataset.from_arrays(x, y), batch_size=32, shuffle=True, seed=2)
    losses, step = [], 0
    for _ in range(25):
        for xb, yb in loader:
            opt.lr = sched(step)
            loss = loom.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
    assert opt.steps == step == 200
    assert np.mean(losses[-8:]) < 0.5 * np.mean(losses[:8])
    with loom.no_grad():
        acc = loom.accuracy(model(loom.tensor(x)), loom.tensor(y))
    assert acc > 0.9
    del loader


def test_mixed_precision_with_the_loss_scaler(no_leak):
    loom.manual_seed(2)
    x, y = _blobs()
    model = loom.nn.MLP(2, [32], 3).set_precision("fp16", keep_last_fp32=True)
    assert model.precision == "mixed-fp16"
    opt = loom.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = loom.amp.GradScaler(init_scale=2.0 ** 24, growth_interval=1000)  # too high: must back off
    xs, ys = loom.tensor(x), loom.tensor(y)
    skipped = 0
    for _ in range(60):
        loss = loom.cross_entropy(model(xs), ys)
        opt.zero_grad()
        scaler.scale(loss).backward()
        skipped += scaler.step(opt)
    assert skipped >= 1 and scaler.steps_skipped == skipped
    assert scaler.get_scale() < 2.0 ** 24
    assert loss.item() < 0.5
    st = scaler.state_dict()
    other = loom.amp.GradScaler()
    other.load_state_dict(st)
    assert other.get_scale() == scaler.get_scale()


def test_attached_schedule_sets_each_steps_lr():
    p = loom.tensor(np.ones(3, dtype=np.float32), requires_grad=True)
    opt = loom.optim.SGD([p], lr=1.0)
    sched = loom.optim.cosine(0.5, 2, 6)
    opt.set_schedule(sched, step=1)
    for step in range(1, 6):
        (p * p).sum().backward()
        opt.step()
        assert opt.lr == sched(step)
        opt.zero_grad()
    with pytest.raises(loom.Error, match="step is -1"):
        opt.set_schedule(sched, step=-1)
    opt.set_schedule(None)


def test_one_cycle_matches_torch():
    torch = pytest.importorskip("torch")
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.4)
    ref = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.4, total_steps=50, pct_start=0.3,
                                              anneal_strategy="cos", cycle_momentum=False,
                                              div_factor=25.0, final_div_factor=1e4)
    sched = loom.optim.one_cycle(0.4, 15, 50)
    for step in range(50):
        assert sched(step) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-9, abs=1e-12), step
        opt.step()
        ref.step()
