"""Modules of your own: subclasses of loom.nn.Module register their
sub-modules, Parameters and buffers in assignment order under PyTorch's
names; a user-defined CNN trains; autograd, optimizers, mixed precision,
checkpoints, activation checkpointing and DLPack work on them as on loom's
own; their forward runs from C inside loom's containers; misuse raises."""
import numpy as np
import pytest

import loom
from conftest import needs


class Tiny(loom.nn.Module):
    """The issue's example."""

    def __init__(self):
        super().__init__()
        self.conv = loom.nn.Conv2d(1, 8, 3, padding=1)
        self.fc = loom.nn.Linear(8 * 28 * 28, 10)

    def forward(self, x):
        return self.fc(loom.relu(self.conv(x)).reshape(x.shape[0], -1))


class SmallCNN(loom.nn.Module):
    """conv-bn-relu, pool, a parameter and a buffer of its own, dropout, linear."""

    def __init__(self, classes=2, p=0.0):
        super().__init__()
        self.conv = loom.nn.Conv2d(1, 6, 3, padding=1, bias=False)
        self.bn = loom.nn.BatchNorm2d(6)
        self.gain = loom.nn.Parameter(loom.ones(6))
        self.register_buffer("calls", loom.zeros(1))
        self.fc = loom.nn.Linear(6 * 4 * 4, classes)
        self.p = p

    def forward(self, x):
        h = loom.relu(self.bn(self.conv(x))) * self.gain.reshape(1, 6, 1, 1)
        h = loom.nn.functional.max_pool2d(h, 2)
        h = loom.nn.functional.dropout(h, self.p, self.training)
        return self.fc(h.flatten(1))


def _halves(n=256, seed=0):
    """8x8 images, class 1 when the left half is the brighter one."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    x = rng.normal(0, 0.5, (n, 1, 8, 8)).astype(np.float32)
    x[y == 1, :, :, :4] += 1.0
    x[y == 0, :, :, 4:] += 1.0
    return x, y.astype(np.int64)


def test_the_issues_example_registers_in_order_and_trains(no_leak):
    loom.manual_seed(0)
    m = loom.nn.resnet20(num_classes=10, in_channels=1)
    assert list(m.state_dict())[:3] == ["conv1.weight", "bn1.weight", "bn1.bias"]
    del m
    t = Tiny()
    assert [n for n, _ in t.named_parameters()] == ["conv.weight", "conv.bias", "fc.weight", "fc.bias"]
    assert [p.shape for p in t.parameters()] == [(8, 1, 3, 3), (8,), (10, 6272), (10,)]
    opt = loom.optim.SGD(t.parameters(), lr=0.1)
    x, y = loom.randn(4, 1, 28, 28), loom.tensor([1, 2, 3, 4])
    first = None
    for _ in range(5):
        loss = loom.cross_entropy(t(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < first
    assert "(conv): Conv2d(1, 8, 3x3, pad 1)" in repr(t)
    del t, opt, loss


def test_a_user_defined_cnn_learns(no_leak):
    loom.manual_seed(1)
    x, y = _halves()
    model = SmallCNN(p=0.1)
    names = [n for n, _ in model.named_parameters()]
    assert names == ["gain", "conv.weight", "bn.weight", "bn.bias", "fc.weight", "fc.bias"]
    assert [n for n, _ in model.named_buffers()] == ["calls", "bn.running_mean", "bn.running_var",
                                                     "bn.num_batches_tracked"]
    opt = loom.optim.AdamW.for_module(model, lr=1e-2, weight_decay=0.01)
    # decay: gain and the conv / fc weights; none: batch norm's parameters and the bias
    assert [len(g["params"]) for g in opt.param_groups] == [3, 3]
    loader = loom.Loader(loom.Dataset.from_arrays(x, y), batch_size=32, shuffle=True, seed=4)
    for _ in range(6):
        for xb, yb in loader:
            loss = loom.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with loom.no_grad():
        acc = loom.accuracy(model(loom.tensor(x)), loom.tensor(y))
    assert acc > 0.95, acc
    assert model.bn.state_dict()["num_batches_tracked"].item() == 6 * 8
    del loader, opt


def test_forward_and_gradients_match_torch(no_leak):
    torch = needs("torch")
    loom.manual_seed(2)
    model = SmallCNN()
    model.gain.copy_(loom.tensor([0.5, 1.0, 1.5, 2.0, 2.5, 3.0]))

    class Ref(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gain = torch.nn.Parameter(torch.ones(6))
            self.conv = torch.nn.Conv2d(1, 6, 3, padding=1, bias=False)
            self.bn = torch.nn.BatchNorm2d(6)
            self.fc = torch.nn.Linear(96, 2)

        def forward(self, x):
            h = torch.relu(self.bn(self.conv(x))) * self.gain.reshape(1, 6, 1, 1)
            return self.fc(torch.nn.functional.max_pool2d(h, 2).flatten(1))

    ref = Ref()
    sd = {k: torch.from_dlpack(v).clone() for k, v in model.state_dict().items() if k != "calls"}
    ref.load_state_dict(sd)  # same names as torch's, same shapes
    x, y = _halves(16, seed=3)
    out = model(loom.tensor(x))
    rout = ref(torch.from_numpy(x))
    np.testing.assert_allclose(out.numpy(), rout.detach().numpy(), rtol=1e-4, atol=1e-5)
    loom.cross_entropy(out, loom.tensor(y)).backward()
    torch.nn.functional.cross_entropy(rout, torch.from_numpy(y)).backward()
    for (name, p), (rname, rp) in zip(model.named_parameters(), ref.named_parameters()):
        assert name == rname
        np.testing.assert_allclose(p.grad.numpy(), rp.grad.numpy(), rtol=1e-3, atol=1e-5, err_msg=name)
    np.testing.assert_allclose(model.bn.state_dict()["running_var"].numpy(), ref.bn.running_var.numpy(), rtol=1e-5)


def test_called_from_loom_inside_a_sequential(no_leak):
    """In a Sequential loom calls forward back through C, inside its own
    scope: results, gradients and memory are as when Python calls it."""
    loom.manual_seed(5)
    inner = SmallCNN()
    seq = loom.nn.Sequential(inner, loom.nn.ReLU())
    x = loom.tensor(_halves(8)[0])
    direct = inner(x).relu()
    through_c = seq(x)
    np.testing.assert_array_equal(direct.numpy(), through_c.numpy())
    through_c.sum().backward()
    assert inner.conv.parameters()[0].grad is not None
    assert [n for n, _ in seq.named_parameters()][:2] == ["0.gain", "0.conv.weight"]
    del direct, through_c, seq, inner


def test_exceptions_from_forward_come_back_as_themselves():
    class Broken(loom.nn.Module):
        def forward(self, x):
            raise KeyError("no such thing")

    seq = loom.nn.Sequential(Broken())
    with pytest.raises(KeyError, match="no such thing"):
        seq(loom.zeros(2, 2))
    seq2 = loom.nn.Sequential(loom.nn.Linear(3, 2))
    with pytest.raises(loom.Error, match="linear: x"):  # an unrelated later failure is loom's own
        seq2(loom.zeros(2, 5))

    class NotATensor(loom.nn.Module):
        def forward(self, x):
            return 3

    with pytest.raises(TypeError, match="not a loom.Tensor"):
        loom.nn.Sequential(NotATensor())(loom.zeros(1))


def test_misuse_is_refused():
    class Early(loom.nn.Module):
        def __init__(self):
            self.fc = loom.nn.Linear(2, 2)  # before super().__init__()

    with pytest.raises(AttributeError, match="super"):
        Early()
    m = SmallCNN()
    with pytest.raises(AttributeError, match="cannot be reassigned"):
        m.conv = loom.nn.Conv2d(1, 6, 3)
    with pytest.raises(AttributeError, match="cannot be reassigned"):
        m.gain = None
    with pytest.raises(ValueError, match="already belongs"):
        m.other = m.fc
    with pytest.raises(ValueError, match="contain itself"):
        m.me = m
    with pytest.raises(ValueError, match="without '.'"):
        m.__setattr__("a.b", loom.nn.Parameter(loom.ones(1)))
    with pytest.raises(AttributeError, match="subclass"):
        loom.nn.Linear(2, 2).extra = loom.nn.Parameter(loom.ones(1))
    with pytest.raises(NotImplementedError):
        loom.nn.Module()(loom.zeros(1))


def test_checkpoint_round_trip_with_pytorch_names(tmp_path, no_leak):
    needs("safetensors")
    loom.manual_seed(6)
    x, y = _halves(64)
    xs, ys = loom.tensor(x), loom.tensor(y)
    model = SmallCNN()
    opt = loom.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step():
        loss = loom.cross_entropy(model(xs), ys)
        opt.zero_grad()
        loss.backward()
        opt.step()

    step()
    loom.save_checkpoint(tmp_path / "ck.safetensors", model, opt, step=1)
    with loom.safe_open(tmp_path / "ck.safetensors") as f:
        keys = set(f.keys())
    assert {"model.gain", "model.conv.weight", "model.bn.running_mean", "model.calls",
            "optim.fc.weight.momentum_buffer"} <= keys
    saved = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    step()
    after = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    assert loom.load_checkpoint(tmp_path / "ck.safetensors", model, opt) == 1
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), saved[k], err_msg=k)
    step()  # the same step again, from the same state: bit-identical
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), after[k], err_msg=k)
    del opt


def test_mixed_precision_on_a_user_module(no_leak):
    loom.manual_seed(7)
    x, y = _halves(64)
    xs, ys = loom.tensor(x), loom.tensor(y)

    class Mixed(loom.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = loom.nn.Conv2d(1, 4, 3, padding=1)
            self.fc = loom.nn.Linear(4 * 8 * 8, 2)

        def forward(self, x):
            return self.fc(self.conv(x).relu().flatten(1))

    model = Mixed().set_precision("fp16", keep_last_fp32=True)
    assert model.precision == "mixed-fp16"
    assert model.conv(xs).dtype == loom.float16  # the policy reaches the layers inside
    opt = loom.optim.SGD(model.parameters(), lr=0.1)
    scaler = loom.amp.GradScaler(init_scale=2.0 ** 20)
    losses = []
    for _ in range(20):
        loss = loom.cross_entropy(model(xs), ys)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        losses.append(loss.item())
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert all(p.dtype == loom.float32 for p in model.parameters())  # f32 masters
    del opt, scaler


def test_activation_checkpointing_gives_the_same_gradients(no_leak):
    loom.manual_seed(8)
    x = loom.tensor(_halves(16)[0])
    plain = SmallCNN()
    ck = SmallCNN()
    ck.load_state_dict({k: v.clone() for k, v in plain.state_dict().items()})
    ck.set_checkpoint(True)
    plain(x).sum().backward()
    ck(x).sum().backward()
    for (n, p), (_, q) in zip(plain.named_parameters(), ck.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6, atol=1e-7, err_msg=n)


def test_parameters_share_memory_through_dlpack(no_leak):
    torch = needs("torch")
    model = SmallCNN()
    gain = torch.from_dlpack(model.gain)
    before = gain.clone()
    (model(loom.tensor(_halves(4)[0])).sum()).backward()
    opt = loom.optim.SGD([model.gain], lr=1.0)
    opt.step()
    assert not torch.equal(gain, before)  # the optimizer's update is visible through the shared memory
    np.testing.assert_array_equal(gain.numpy(), model.gain.numpy())
    del gain, opt
