"""The CNN layer set and the ResNets from Python: every layer against its
torch.nn twin loaded with the same state_dict (same names), the ResNet
builders' state_dict names and shapes against torchvision's, parameter
groups and for_module against PyTorch's SGD with param_groups."""
import numpy as np
import pytest

import loom
from conftest import needs


def _load(torch_module, loom_module, rename=None):
    torch = needs("torch")
    rename = rename or (lambda k: k)
    sd = {rename(k): torch.from_dlpack(v).clone() for k, v in loom_module.state_dict().items()}
    torch_module.load_state_dict(sd)  # strict: the names are PyTorch's


LAYERS = {
    "Conv2d": (lambda L: L.Conv2d(3, 4, 3, stride=2, padding=1), lambda T: T.Conv2d(3, 4, 3, stride=2, padding=1)),
    "Conv2d grouped, no bias": (lambda L: L.Conv2d(3, 6, (3, 1), groups=3, bias=False),
                                lambda T: T.Conv2d(3, 6, (3, 1), groups=3, bias=False)),
    "BatchNorm2d": (lambda L: L.BatchNorm2d(3, momentum=0.3), lambda T: T.BatchNorm2d(3, momentum=0.3)),
    "MaxPool2d": (lambda L: L.MaxPool2d(3, 2, 1), lambda T: T.MaxPool2d(3, 2, 1)),
    "AvgPool2d": (lambda L: L.AvgPool2d(2, ceil_mode=True, count_include_pad=False),
                  lambda T: T.AvgPool2d(2, ceil_mode=True, count_include_pad=False)),
    "AdaptiveAvgPool2d": (lambda L: L.AdaptiveAvgPool2d(1), lambda T: T.AdaptiveAvgPool2d(1)),
    "Flatten": (lambda L: L.Flatten(), lambda T: T.Flatten()),
    "Linear": (lambda L: L.Sequential(L.Flatten(), L.Linear(3 * 7 * 7, 5)),
               lambda T: T.Sequential(T.Flatten(), T.Linear(3 * 7 * 7, 5))),
}


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_layers_match_torch(name, mode, no_leak):
    torch = needs("torch")
    loom.manual_seed(11)
    mine, ref = LAYERS[name][0](loom.nn), LAYERS[name][1](torch.nn)
    _load(ref, mine)
    getattr(mine, mode)(), getattr(ref, mode)()
    x = np.random.default_rng(0).standard_normal((2, 3, 7, 7)).astype(np.float32)
    xl, xt = loom.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, rout = mine(xl), ref(xt)
    np.testing.assert_allclose(out.numpy(), rout.detach().numpy(), rtol=1e-4, atol=1e-5)
    out.sum().backward()
    rout.sum().backward()
    np.testing.assert_allclose(xl.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    for (n, p), (rn, rp) in zip(mine.named_parameters(), ref.named_parameters()):
        assert n == rn
        np.testing.assert_allclose(p.grad.numpy(), rp.grad.numpy(), rtol=1e-3, atol=1e-4, err_msg=n)
    for (n, b), (rn, rb) in zip(mine.named_buffers(), ref.named_buffers()):
        assert n == rn
        np.testing.assert_allclose(b.numpy(), rb.numpy(), rtol=1e-5, atol=1e-6, err_msg=n)


def test_dropout_follows_the_mode_and_the_seed(no_leak):
    d = loom.nn.Dropout(0.5)
    x = loom.ones(4000)
    loom.manual_seed(3)
    a = d(x).numpy().copy()
    loom.manual_seed(3)
    np.testing.assert_array_equal(d(x).numpy(), a)
    assert 0.4 < (a > 0).mean() < 0.6 and set(np.unique(a)) == {0.0, 2.0}
    d.eval()
    np.testing.assert_array_equal(d(x).numpy(), x.numpy())


@pytest.mark.parametrize("arch", ["resnet18", "resnet50"])
def test_resnet_names_and_shapes_are_torchvision_s(arch):
    tv = needs("torch") and pytest.importorskip("torchvision")
    mine = getattr(loom.nn, arch)()
    ref = getattr(tv.models, arch)()
    assert [n for n, _ in mine.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert [n for n, _ in mine.named_buffers()] == [n for n, _ in ref.named_buffers()]
    got = {k: tuple(v.shape) for k, v in mine.state_dict().items()}
    want = {k: tuple(v.shape) for k, v in ref.state_dict().items()}
    assert got == want
    assert mine.num_parameters() == sum(p.numel() for p in ref.parameters())


def test_cifar_resnets_build_and_run(no_leak):
    loom.manual_seed(0)
    for arch, n_params in (("resnet20", 272474), ("resnet32", 466906)):
        m = loom.nn.ResNet(arch, num_classes=10, in_channels=3, shortcut="projection")
        assert m.num_parameters() == n_params, (arch, m.num_parameters())
    a = loom.nn.resnet20(num_classes=7, in_channels=1, shortcut="zero_pad", memory_format="nhwc")
    assert a(loom.randn(2, 1, 12, 12)).shape == (2, 7)
    assert not any("downsample" in k for k in a.state_dict())  # option A: no projection parameters
    with pytest.raises(loom.Error, match="unknown model 'resnet7'"):
        loom.nn.ResNet("resnet7")
    with pytest.raises(ValueError, match="shortcut"):
        loom.nn.resnet20(shortcut="C")


def test_param_groups_match_torch(no_leak):
    torch = needs("torch")
    loom.manual_seed(4)
    model = loom.nn.Sequential(loom.nn.Conv2d(2, 3, 3), loom.nn.BatchNorm2d(3), loom.nn.ReLU(), loom.nn.Flatten(),
                               loom.nn.Linear(3 * 4 * 4, 2))
    ref = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(3 * 4 * 4, 2))
    # The ReLU is fused into the BatchNorm in loom's Sequential: its child 3 is torch's 4.
    _load(ref, model, lambda k: "4." + k[2:] if k.startswith("3.") else k)
    opt = loom.optim.SGD.for_module(model, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.05)
    decay, no_decay = loom.optim.split_decay(model)
    names = {p.handle: n for n, p in model.named_parameters()}
    assert [names[p.handle] for p in decay] == ["0.weight", "3.weight"]
    assert [names[p.handle] for p in no_decay] == ["0.bias", "1.weight", "1.bias", "3.bias"]
    rp = dict(ref.named_parameters())
    ropt = torch.optim.SGD([{"params": [rp["0.weight"], rp["4.weight"]], "weight_decay": 0.05},
                            {"params": [rp["0.bias"], rp["1.weight"], rp["1.bias"], rp["4.bias"]],
                             "weight_decay": 0.0}], lr=0.1, momentum=0.9, nesterov=True)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.05, 0.0]
    x = np.random.default_rng(1).standard_normal((4, 2, 6, 6)).astype(np.float32)
    y = np.array([0, 1, 1, 0])
    for step in range(3):
        if step == 2:
            opt.param_groups[1]["lr"] = 0.01
            ropt.param_groups[1]["lr"] = 0.01
        loss = loom.cross_entropy(model(loom.tensor(x)), loom.tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        rloss = torch.nn.functional.cross_entropy(ref(torch.from_numpy(x)), torch.from_numpy(y))
        ropt.zero_grad()
        rloss.backward()
        ropt.step()
        assert loss.item() == pytest.approx(rloss.item(), rel=1e-4)
    mine = {n.replace("3.", "4.") if n.startswith("3.") else n: p for n, p in model.named_parameters()}
    for n, p in mine.items():
        np.testing.assert_allclose(p.numpy(), rp[n].detach().numpy(), rtol=1e-4, atol=1e-6, err_msg=n)
    del opt


def test_dict_groups_and_group_settings(no_leak):
    a = loom.tensor(np.ones(3, np.float32), requires_grad=True)
    b = loom.tensor(np.ones(2, np.float32), requires_grad=True)
    opt = loom.optim.AdamW([{"params": [a]}, {"params": [b], "lr": 0.5, "weight_decay": 0.0}], lr=0.1)
    g0, g1 = opt.param_groups
    assert (g0.lr, g1.lr, g1.weight_decay) == (0.1, 0.5, 0.0)
    assert g0.weight_decay == pytest.approx(0.01)
    opt.lr = 0.2  # every group, as a schedule does
    assert (g0["lr"], g1["lr"]) == (0.2, 0.2)
    g1["weight_decay"] = 0.3
    assert g1.weight_decay == pytest.approx(0.3)
    with pytest.raises(loom.Error, match="already"):
        opt.add_param_group({"params": [a]})
    with pytest.raises(KeyError):
        g0["momentum"] = 0.1
    del opt
