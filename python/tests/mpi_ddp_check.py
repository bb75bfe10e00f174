"""mpi_ddp_check.py — data parallelism from Python under the MPI launcher
(ctest python_mpi_ddp: `mpiexec -n 2 python mpi_ddp_check.py`).

Each rank builds a user-defined CNN from a different seed; DistributedDataParallel
must start every rank from rank 0's weights, and after each step (every rank
on its shard of the batch, gradients averaged during backward) every rank
must hold the same weights as a reference model trained here without data
parallelism on the whole global batch (gathered from the ranks). Prints
"mpi ddp: ok (rank R of N)", or "FAIL: ..." and exits 1.
"""
import sys

import numpy as np

import loom


class Net(loom.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = loom.nn.Conv2d(1, 4, 3, padding=1)
        self.scale = loom.nn.Parameter(loom.ones(4))
        self.fc = loom.nn.Linear(4 * 8 * 8, 2)

    def forward(self, x):
        h = loom.relu(self.conv(x)) * self.scale.reshape(1, 4, 1, 1)
        return self.fc(h.flatten(1))


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def main():
    comm = loom.dist.init("cpu")
    rank, world = comm.rank, comm.size
    if world < 2:
        fail(f"expected to run under mpiexec with 2+ ranks, got a world of {world}")
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 64)
    x = rng.normal(0, 0.5, (64, 1, 8, 8)).astype(np.float32)
    x[y == 1, :, :, :4] += 1.0

    loom.manual_seed(100 + rank)  # different weights per rank: the DDP must replace them with rank 0's
    model = Net()
    ddp = loom.dist.DistributedDataParallel(model, comm)
    ref = Net()
    ref.load_state_dict({k: v.clone() for k, v in model.state_dict().items()})
    bias, got = model.conv.parameters()[1].detach().clone(), loom.zeros(world * 4)
    comm.all_gather(bias, got)
    comm.synchronize()
    if not np.all(got.numpy().reshape(world, 4) == got.numpy()[:4]):
        fail(f"the ranks do not start from the same weights: {got.numpy().reshape(world, 4)}")

    opt = loom.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ropt = loom.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    loader = loom.Loader(loom.Dataset.from_arrays(x, y), batch_size=8, shuffle=True, seed=3, rank=rank,
                         world_size=world, drop_last=True)
    steps = 0
    for xb, yb in loader:
        loss = loom.cross_entropy(ddp(xb), yb)
        opt.zero_grad()
        loss.backward()
        ddp.sync()
        opt.step()
        # The reference sees the global batch: every rank's shard, in rank order.
        gx, gy = loom.zeros(world * 8, 1, 8, 8), loom.zeros(world * 8, dtype=loom.int64)
        comm.all_gather(xb, gx)
        comm.all_gather(yb, gy)
        comm.synchronize()
        rloss = loom.cross_entropy(ref(gx), gy)
        ropt.zero_grad()
        rloss.backward()
        ropt.step()
        steps += 1
        for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
            if not np.allclose(p.numpy(), q.numpy(), rtol=1e-4, atol=1e-6):
                fail(f"rank {rank} step {steps}: {n} differs from the global-batch reference by "
                     f"{np.abs(p.numpy() - q.numpy()).max():.3g}")
    if steps != 64 // (8 * world):
        fail(f"rank {rank}: {steps} steps, expected {64 // (8 * world)}")
    ddp.close()
    comm.close()
    print(f"mpi ddp: ok (rank {rank} of {world})", flush=True)


if __name__ == "__main__":
    main()
