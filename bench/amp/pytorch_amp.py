#!/usr/bin/env python3
"""pytorch_amp.py — the anchor for bench_amp: the same training step in
PyTorch (AdamW, cross-entropy, MLPs 784-1024-1024-10 batch 128 and
4096-4096-4096-4096-10 batch 1024) in fp32 and with torch.autocast (fp16 +
GradScaler, bf16 without) on the same GPU.

Usage: python3 bench/amp/pytorch_amp.py [iters=50] [wide_batch=1024]
Prints one line per (model, precision), in bench_amp's format:
  bench=amp_pytorch model=wide_mlp device=cuda precision=mixed-fp16 batch=1024 step_ms=... speedup_vs_fp32=...
Without PyTorch or without a GPU it prints `bench=amp_pytorch skipped=<reason>`
and exits 0 (the comparison is only meaningful on a GPU).
"""
import sys
import time


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    wide_batch = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    try:
        import torch
    except ImportError:
        print("bench=amp_pytorch skipped=no-pytorch")
        return 0
    if not torch.cuda.is_available():
        print("bench=amp_pytorch skipped=no-gpu")
        return 0
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False  # loom's fp32 path is true fp32
    models = [("mnist_mlp", 784, [1024, 1024], 10, 128), ("wide_mlp", 4096, [4096, 4096, 4096], 10, wide_batch)]
    for name, fin, hidden, fout, batch in models:
        results = {}
        for prec in ("fp32", "mixed-fp16", "mixed-bf16"):
            torch.manual_seed(1)
            layers, prev = [], fin
            for h in hidden:
                layers += [torch.nn.Linear(prev, h), torch.nn.ReLU()]
                prev = h
            layers.append(torch.nn.Linear(prev, fout))
            model = torch.nn.Sequential(*layers).to(dev)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
            scaler = torch.amp.GradScaler("cuda", enabled=prec == "mixed-fp16")
            x = torch.randn(batch, fin, device=dev)
            y = torch.arange(batch, device=dev) * 7 % fout
            dtype = {"mixed-fp16": torch.float16, "mixed-bf16": torch.bfloat16}.get(prec)

            def step():
                opt.zero_grad(set_to_none=True)
                with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()

            for _ in range(5):
                step()
            best = 1e30
            for _ in range(3):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(iters):
                    step()
                torch.cuda.synchronize()
                best = min(best, (time.perf_counter() - t0) * 1e3 / iters)
            results[prec] = (best, scaler.get_scale() if scaler.is_enabled() else 1.0)
        for prec, (ms, scale) in results.items():
            print(f"bench=amp_pytorch model={name} device=cuda precision={prec} batch={batch} step_ms={ms:.3f} "
                  f"speedup_vs_fp32={results['fp32'][0] / ms:.2f} loss_scale={scale:g} torch={torch.__version__}")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
