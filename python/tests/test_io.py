"""safetensors interop with the `safetensors` package (NumPy and PyTorch
front ends) both ways, and training checkpoints from Python."""
import numpy as np
import pytest

import loom
from conftest import needs

DTYPES = ["float32", "float16", "bfloat16", "int32", "int64", "uint8"]


def _values(name, shape=(3, 4)):
    base = (np.arange(int(np.prod(shape))).reshape(shape) % 11 - 5).astype(np.float32) / 4
    if name.startswith(("int", "uint")):
        base = (base * 4 + (5 if name == "uint8" else 0)).astype(np.int64)
    return base


def test_loom_files_read_by_safetensors_numpy_and_torch(tmp_path, no_leak):
    needs("safetensors")
    torch = needs("torch")
    from safetensors.numpy import load_file as np_load
    from safetensors.torch import load_file as pt_load
    ts = {f"t.{n}": loom.tensor(_values(n), dtype=n) for n in DTYPES}
    ts["scalar"] = loom.tensor(2.5)
    ts["strided"] = loom.arange(12).reshape(3, 4).transpose(0, 1)
    path = tmp_path / "loom.safetensors"
    loom.save_file(ts, path, metadata={"by": "loom"})
    pt = pt_load(str(path))
    assert set(pt) == set(ts)
    for k, t in ts.items():
        want = torch.from_dlpack(t.contiguous()) if t.dtype != loom.bfloat16 else torch.from_dlpack(t).clone()
        assert pt[k].dtype == want.dtype and pt[k].shape == want.shape
        assert torch.equal(pt[k], want), k
    # NumPy has no bfloat16: the NumPy front end reads a file without it.
    no_bf16 = {k: t for k, t in ts.items() if t.dtype != loom.bfloat16}
    loom.save_file(no_bf16, tmp_path / "np.safetensors")
    nd = np_load(str(tmp_path / "np.safetensors"))
    assert set(nd) == set(no_bf16)
    for k, t in no_bf16.items():
        np.testing.assert_array_equal(nd[k], t.numpy())
    from safetensors import safe_open
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata() == {"by": "loom"}


def test_safetensors_files_read_by_loom(tmp_path, no_leak):
    needs("safetensors")
    torch = needs("torch")
    from safetensors.numpy import save_file as np_save
    from safetensors.torch import save_file as pt_save
    pt = {"f32": torch.randn(3, 5), "f16": torch.randn(7).half(), "bf16": torch.randn(2, 3).bfloat16(),
          "i64": torch.arange(9).reshape(3, 3), "u8": torch.arange(5, dtype=torch.uint8),
          "flag": torch.tensor([True, False])}
    pt_save(pt, str(tmp_path / "pt.safetensors"), metadata={"format": "pt"})
    got = loom.load_file(tmp_path / "pt.safetensors")
    assert set(got) == set(pt)
    for k, v in pt.items():
        mine = torch.from_dlpack(got[k])
        assert torch.equal(mine, v.to(torch.uint8) if v.dtype == torch.bool else v), k
    with loom.safe_open(tmp_path / "pt.safetensors") as f:
        assert f.metadata() == {"format": "pt"}
        assert f.dtype_name("flag") == "BOOL"
    arrays = {"a": np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32),
              "h": np.arange(6, dtype=np.float16), "l": np.arange(3, dtype=np.int64) - 1}
    np_save(arrays, str(tmp_path / "np.safetensors"))
    got = loom.load_file(tmp_path / "np.safetensors")
    for k, v in arrays.items():
        np.testing.assert_array_equal(got[k].numpy(), v)
    del got


def test_malformed_files_raise_loom_errors(tmp_path, no_leak):
    p = tmp_path / "bad.safetensors"
    p.write_bytes((10).to_bytes(8, "little") + b'{"a":1}   ')
    with pytest.raises(loom.Error) as e:
        loom.load_file(p)
    assert e.value.status_name == "LOOM_ERR_FORMAT" and "entry 'a' is not an object" in str(e.value)


def _setup(seed=4):
    loom.manual_seed(seed)
    x = np.random.default_rng(3).standard_normal((100, 6)).astype(np.float32)
    y = (np.arange(100) % 3).astype(np.int64)
    model = loom.nn.MLP(6, [12], 3)
    opt = loom.optim.AdamW(model.parameters(), lr=1e-2)
    loader = loom.Loader(loom.Dataset.from_arrays(x, y), batch_size=16, shuffle=True, seed=9)
    return model, opt, loader


def _train(model, opt, loader, steps, step=0):
    while step < steps:
        b = loader.next()
        if b is None:
            continue
        loss = loom.cross_entropy(model(b[0] + loom.randn(*b[0].shape) * 0.1), b[1])
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
    return step


def test_checkpoint_resume_from_python_is_exact(tmp_path, no_leak):
    torch = needs("torch")
    needs("safetensors")
    from safetensors.torch import load_file as pt_load
    model, opt, loader = _setup()
    _train(model, opt, loader, 17)
    want = [p.numpy().copy() for p in model.parameters()]

    model, opt, loader = _setup()
    step = _train(model, opt, loader, 6)
    loom.save_checkpoint(tmp_path / "c.safetensors", model, opt, loader=loader, step=step)
    model, opt, loader = _setup(seed=123)  # different init: everything comes from the file
    step = loom.load_checkpoint(tmp_path / "c.safetensors", model, opt, loader=loader)
    assert step == 6 and loader.position() == (0, 6)
    _train(model, opt, loader, 17, step)
    for p, w in zip(model.parameters(), want):
        np.testing.assert_array_equal(p.numpy(), w)
    # The checkpoint is a plain safetensors file for other tools.
    ck = pt_load(str(tmp_path / "c.safetensors"))
    assert ck["optim.0.weight.exp_avg"].shape == (12, 6) and ck["optim.0.weight.step"].item() == 6
    assert ck["model.1.bias"].dtype == torch.float32
