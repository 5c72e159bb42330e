#!/usr/bin/env python3
"""PyTorch peer of fulgur's benchmark workloads (BENCHMARKS.md).

Trains the same models on the same data with the same settings as
`go run ./cmd/bench` and prints one JSON line with the same field names:

    /usr/bin/python3 bench/torch_peer.py --workload mlp --threads 1 --json
    /usr/bin/python3 bench/torch_peer.py --workload resnet8 --epochs 3
    /usr/bin/python3 bench/torch_peer.py --workload mlp --ranks 2 --batch 32 --steps 200

Timing matches fulgur's harness: the first batch of every epoch is left out
(warm-up), so samples/s covers batches 2..n. Images stay bytes in memory and
are scaled to [0, 1] float32 per batch, as fulgur's loader does; this is the
fastest way to feed PyTorch from memory (torchvision's per-item PIL path is
several times slower) and keeps the comparison about the training step.

With --ranks N > 1 the model trains under DistributedDataParallel with the
gloo backend, one process per rank (torch.multiprocessing), each with
--threads threads and its own shard of every epoch's permutation; rank 0
prints the figures.
"""

import argparse
import gzip
import json
import os
import resource
import socket
import struct
import sys
import time

# The Debian package dataset-fashion-mnist installs the IDX files here.
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", choices=["mlp", "resnet8"], default="mlp")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (per rank)")
    p.add_argument("--batch", type=int, default=64, help="batch size (per rank)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="training batches per epoch (0: all)")
    p.add_argument("--ranks", type=int, default=1, help="DDP ranks (processes), gloo backend")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--data", default="", help="Fashion-MNIST IDX directory (default: the Debian package's)")
    p.add_argument("--json", action="store_true", help="print only the JSON line on stdout")
    p.add_argument("--pin", action="store_true", help="pin rank r to core r (affinity mask), as cmd/bench pins fulgur's ranks")
    a = p.parse_args(argv)
    for name in ("threads", "batch", "epochs", "ranks"):
        if getattr(a, name) < 1:
            p.error(f"--{name} is {getattr(a, name)}: use 1 or more")
    if a.steps < 0:
        p.error(f"--steps is {a.steps}: use 0 (all) or more")
    return a


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        raw = f.read()
    magic, = struct.unpack(">I", raw[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return raw[4 + 4 * dims:], shape


def load(data_dir, split):
    import torch
    prefix = "train" if split == "train" else "t10k"
    candidates = [os.path.join(data_dir, f"{prefix}-{kind}-idx{n}-ubyte{ext}")
                  for kind, n in (("images", 3), ("labels", 1)) for ext in (".gz", "")]
    img = next((c for c in candidates[:2] if os.path.exists(c)), None)
    lbl = next((c for c in candidates[2:] if os.path.exists(c)), None)
    if img is None or lbl is None:
        sys.exit(f"torch_peer: Fashion-MNIST {split} files not found in {data_dir}: "
                 "install dataset-fashion-mnist or pass --data DIR")
    xb, xs = read_idx(img)
    yb, _ = read_idx(lbl)
    x = torch.frombuffer(bytearray(xb), dtype=torch.uint8).reshape(xs[0], 1, xs[1], xs[2])
    y = torch.frombuffer(bytearray(yb), dtype=torch.uint8).long()
    return x, y


def mlp():
    from torch import nn
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


def resnet8():
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.short = None
            if stride != 1 or cin != cout:
                self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = self.bn1(self.conv1(x)).relu()
            out = self.bn2(self.conv2(out))
            return (out + (x if self.short is None else self.short(x))).relu()

    return nn.Sequential(
        nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        BasicBlock(16, 16, 1), BasicBlock(16, 32, 2), BasicBlock(32, 64, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def evaluate(model, x, y):
    import torch
    # Evaluate the bare module: DDP's forward would broadcast BatchNorm
    # buffers, a collective the other ranks (waiting at a barrier) never join.
    model = getattr(model, "module", model)
    model.eval()
    correct = 0
    with torch.no_grad():
        for lo in range(0, len(x), 256):
            xb = x[lo:lo + 256].float().div_(255)
            correct += (model(xb).argmax(1) == y[lo:lo + 256]).sum().item()
    model.train()
    return correct / len(x)


def train(rank, a, port):
    if a.pin:
        # Before torch starts its thread pools, so that every thread
        # inherits the mask.
        os.sched_setaffinity(0, {rank})
    # torch.set_num_threads does not reach a generic BLAS such as Debian's
    # OpenBLAS, which would otherwise start one thread per core (and spin
    # them) even at 1 torch thread: give it the same count. Read when the
    # library loads, so before the import.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    import torch
    from torch import nn
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(a.seed)
    if a.ranks > 1:
        import torch.distributed as dist
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    data_dir = a.data or DEFAULT_DATA
    xtr, ytr = load(data_dir, "train")
    xte, yte = load(data_dir, "test")
    model = mlp() if a.workload == "mlp" else resnet8()
    if a.ranks > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
    loss_fn = nn.CrossEntropyLoss()
    n = len(xtr)
    nb = n // a.ranks // a.batch
    if a.steps:
        nb = min(nb, a.steps)
    total, cpu, timed, accs = 0.0, 0.0, 0, []
    t_fit = time.perf_counter()
    for epoch in range(a.epochs):
        g = torch.Generator().manual_seed(a.seed * 1000003 + epoch)
        perm = torch.randperm(n, generator=g)[rank::a.ranks]
        t0 = None
        for b in range(nb):
            idx = perm[b * a.batch:(b + 1) * a.batch]
            xb = xtr[idx].float().div_(255)
            yb = ytr[idx]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            if b == 0:
                t0, c0 = time.perf_counter(), time.process_time()
        if nb > 1:
            total += time.perf_counter() - t0
            cpu += time.process_time() - c0
            timed += nb - 1
        if a.epochs > 1 and rank == 0:
            accs.append(evaluate(model, xte, yte))
    seconds = time.perf_counter() - t_fit
    acc = accs[-1] if accs else (evaluate(model, xte, yte) if rank == 0 else 0)
    if a.ranks > 1:
        import torch.distributed as dist
        dist.barrier()
        dist.destroy_process_group()
    if rank != 0:
        return
    if timed == 0:
        sys.exit(f"torch_peer: no timed batches ({nb} per epoch): raise --steps")
    out = {"samples_per_s": timed * a.batch * a.ranks / total, "samples_per_cpu_s": timed * a.batch / cpu, "test_acc": acc, "peak_rss_mb": peak_rss_mb(),
           "steps": nb * a.epochs, "seconds": seconds, "torch_threads": torch.get_num_threads()}
    for i, v in enumerate(accs):
        out[f"test_acc_{i + 1}"] = v
    if not a.json:
        print(f"torch {torch.__version__} {a.workload} threads={a.threads} ranks={a.ranks} batch={a.batch}", file=sys.stderr)
    print(json.dumps(out), flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    a = parse_args(argv)
    if a.ranks == 1:
        train(0, a, 0)
        return
    import torch.multiprocessing as mp
    mp.spawn(train, args=(a, free_port()), nprocs=a.ranks, join=True)


if __name__ == "__main__":
    main()
