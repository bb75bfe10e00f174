#!/usr/bin/env python3
"""pytorch_mlp_step.py — the anchor for bench_mlp_step: PyTorch eager running
the same MNIST MLP training step as loom-mnist / bench_mlp_step.c.

Model 784->1024->1024->10 (ReLU after the first two Linear layers), mean
cross-entropy, AdamW(lr=1e-3, PyTorch defaults otherwise: betas 0.9/0.999,
eps 1e-8, weight_decay 0.01), batch 128, f32 (TF32 off, as in loom by
default), a fixed random batch already on the device, zero_grad(set_to_none).

Usage: python3 bench/mlp/pytorch_mlp_step.py [--device cuda] [--batch 128]
                                         [--steps 200] [--warmup 20] [--precision fp32|bf16]
--precision bf16 runs forward and loss under torch.autocast(device, bfloat16)
(PyTorch's mixed precision: bf16 GEMMs through oneDNN on the CPU; master
weights and the optimizer stay f32), the anchor for loom's --precision bf16.
Prints one line:
  bench=pytorch_mlp_step device=... batch=... steps=... steps_per_s=... ms_per_step=... cpu_ms_per_step=... loss_first=... loss_last=...
or "bench=pytorch_mlp_step skipped reason=..." (exit 0) when torch or the
device is missing. Compare steps_per_s with bench_mlp_step's on the same GPU
(target: loom >= 3x)."""
import argparse
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    args = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f'bench=pytorch_mlp_step skipped reason="torch not importable: {e}"')
        return 0
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print('bench=pytorch_mlp_step skipped reason="no CUDA device"')
        return 0
    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(1234)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 10),
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.rand(args.batch, 784, device=dev)
    y = (torch.arange(args.batch, device=dev) * 7 + 3) % 10
    lossf = torch.nn.CrossEntropyLoss()

    def step():
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    loss_first = step().item()
    for _ in range(args.warmup):
        step()
    sync()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(args.steps):
        step()
    sync()
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    loss_last = step().item()
    print(f"bench=pytorch_mlp_step device={dev} batch={args.batch} steps={args.steps} precision={args.precision} "
          f"steps_per_s={args.steps / dt:.2f} ms_per_step={1e3 * dt / args.steps:.4f} "
          f"cpu_ms_per_step={1e3 * dc / args.steps:.4f} "
          f"loss_first={loss_first:.6f} loss_last={loss_last:.6f} torch={torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
