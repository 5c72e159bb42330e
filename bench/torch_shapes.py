#!/usr/bin/env python3
"""PyTorch 1.13 peer of fulgur's BenchmarkShapes (strategy/device/engine).

One training step (forward, backward; no optimizer) of single layers at
shapes beyond resnet8's: each layer alone, or a BatchNorm2d and the layer
after it for layers without parameters, on random input, MSE loss against
a random target. The cases, by the same names, are shapeCases in
strategy/device/engine/shapes_bench_test.go: change both.

Alone it times PyTorch and prints `go test -bench` lines:

    /usr/bin/python3 bench/torch_shapes.py --threads 1 --cases dw

With --fulgur (a test binary of strategy/device/engine; bench/shapes.sh
builds one) it alternates, round by round, fulgur at its default workers,
PyTorch at 1 thread, fulgur at one thread (FULGUR_WORKERS=1
FULGUR_BLAS_THREADS=1 GOMAXPROCS=1) and PyTorch at 2 threads, and prints
per case the medians over rounds of ms a step and CPU ms a step, and the
ratios PyTorch / fulgur (above 1: fulgur is faster): of each one's best
wall time in a round, and of one thread's CPU time (which moves far less
with other load on a shared machine).
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time


def conv(i, o, k, s, p, d=1, g=1):
    def make():
        import torch.nn as nn
        return nn.Conv2d(i, o, k, stride=s, padding=p, dilation=d, groups=g)
    return make


def linear(i, o):
    def make():
        import torch.nn as nn
        return nn.Linear(i, o)
    return make


def bn_then(c, then=None):
    def make():
        import torch.nn as nn
        layers = [nn.BatchNorm2d(c)]
        if then == "relu":
            layers.append(nn.ReLU())
        elif then == "maxpool":
            layers.append(nn.MaxPool2d(2))
        return nn.Sequential(*layers)
    return make


# (name, batch, input shape per example, float64, layer)
CASES = [
    ("conv1x1_64_256_14", 32, (64, 14, 14), False, conv(64, 256, 1, 1, 0)),
    ("conv3x3_16_16_28", 32, (16, 28, 28), False, conv(16, 16, 3, 1, 1)),
    ("conv3x3_3_32_32", 32, (3, 32, 32), False, conv(3, 32, 3, 1, 1)),
    ("conv3x3s2_64_128_28", 32, (64, 28, 28), False, conv(64, 128, 3, 2, 1)),
    ("conv3x3_128_128_14", 32, (128, 14, 14), False, conv(128, 128, 3, 1, 1)),
    ("conv3x3_256_256_7", 32, (256, 7, 7), False, conv(256, 256, 3, 1, 1)),
    ("conv5x5_32_32_28", 32, (32, 28, 28), False, conv(32, 32, 5, 1, 2)),
    ("conv5x5s2_32_64_28", 32, (32, 28, 28), False, conv(32, 64, 5, 2, 2)),
    ("conv7x7_32_32_28", 32, (32, 28, 28), False, conv(32, 32, 7, 1, 3)),
    ("stem7x7s2_3_64_64", 32, (3, 64, 64), False, conv(3, 64, 7, 2, 3)),
    ("conv3x3d2_32_32_28", 32, (32, 28, 28), False, conv(32, 32, 3, 1, 2, d=2)),
    ("dw3x3_64_28", 32, (64, 28, 28), False, conv(64, 64, 3, 1, 1, g=64)),
    ("dw3x3s2_64_28", 32, (64, 28, 28), False, conv(64, 64, 3, 2, 1, g=64)),
    ("dw5x5_128_14", 32, (128, 14, 14), False, conv(128, 128, 5, 1, 2, g=128)),
    ("group3x3g32_64_28", 32, (64, 28, 28), False, conv(64, 64, 3, 1, 1, g=32)),
    ("group3x3g4_64_28", 32, (64, 28, 28), False, conv(64, 64, 3, 1, 1, g=4)),
    ("conv3x3_17_33_31", 32, (17, 31, 31), False, conv(17, 33, 3, 1, 1)),
    ("conv3x3s2_17_33_31", 32, (17, 31, 31), False, conv(17, 33, 3, 2, 1)),
    ("conv1x1_17_33_31", 32, (17, 31, 31), False, conv(17, 33, 1, 1, 0)),
    ("stem3x3s2_3_32_64", 32, (3, 64, 64), False, conv(3, 32, 3, 2, 1)),
    ("lenet5x5_1_6_28", 64, (1, 28, 28), False, conv(1, 6, 5, 1, 0)),
    ("lenet5x5_3_6_32", 64, (3, 32, 32), False, conv(3, 6, 5, 1, 0)),
    ("lenet5x5_6_16_14", 64, (6, 14, 14), False, conv(6, 16, 5, 1, 0)),
    ("conv3x3_32_32_28_b1", 1, (32, 28, 28), False, conv(32, 32, 3, 1, 1)),
    ("conv3x3_32_32_28_b8", 8, (32, 28, 28), False, conv(32, 32, 3, 1, 1)),
    ("conv3x3_32_32_28_b128", 128, (32, 28, 28), False, conv(32, 32, 3, 1, 1)),
    ("conv3x3_32_32_28_f64", 32, (32, 28, 28), True, conv(32, 32, 3, 1, 1)),
    ("linear_1024_4096_b8", 8, (1024,), False, linear(1024, 4096)),
    ("linear_4096_1024_b64", 64, (4096,), False, linear(4096, 1024)),
    ("bn_64_28", 32, (64, 28, 28), False, bn_then(64)),
    ("bn_relu_64_28", 32, (64, 28, 28), False, bn_then(64, "relu")),
    ("bn_maxpool_64_28", 32, (64, 28, 28), False, bn_then(64, "maxpool")),
    ("bn_64_28_f64", 32, (64, 28, 28), True, bn_then(64)),
]


def time_case(case, min_time):
    """Mean wall and CPU ms of one training step, after 3 warm-up steps."""
    import torch
    import torch.nn.functional as F
    _, batch, shape, f64, make = case
    torch.manual_seed(1)
    dt = torch.float64 if f64 else torch.float32
    m = make().to(dt)
    x = torch.rand((batch,) + shape, dtype=dt)
    # A layer inside a model gets its input's gradient; a stem (3
    # channels, fed by the batch) does not: as the Go cases.
    x.requires_grad_(len(shape) == 1 or shape[0] > 3)
    with torch.no_grad():
        y = torch.rand_like(m(x))

    def step():
        m.zero_grad(set_to_none=False)
        x.grad = None
        F.mse_loss(m(x), y).backward()

    for _ in range(3):
        step()
    n, w0, c0 = 0, time.perf_counter(), time.process_time()
    while True:
        step()
        n += 1
        if time.perf_counter() - w0 >= min_time:
            break
    return (time.perf_counter() - w0) * 1e3 / n, (time.process_time() - c0) * 1e3 / n, n


def torch_run(cases, threads, min_time):
    """{name: (wall ms, cpu ms)} for PyTorch at threads."""
    import torch
    torch.set_num_threads(threads)
    out = {}
    for c in cases:
        wall, cpu, _ = time_case(c, min_time)
        out[c[0]] = (wall, cpu)
    return out


BENCH_LINE = re.compile(r"^BenchmarkShapes/(\S+?)(-\d+)?\s+\d+\s+([\d.]+) ns/op\s+([\d.]+) cpu-ms/op")


def fulgur_run(binary, pattern, one_thread, benchtime):
    """{name: (wall ms, cpu ms)} from one run of the test binary."""
    env = dict(os.environ)
    if one_thread:
        env.update(FULGUR_WORKERS="1", FULGUR_BLAS_THREADS="1", GOMAXPROCS="1")
    cmd = [binary, "-test.run", "^$", "-test.bench", "BenchmarkShapes$/" + pattern, "-test.benchtime", benchtime]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("torch_shapes: %s failed:\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))
    out = {}
    for line in p.stdout.splitlines():
        m = BENCH_LINE.match(line)
        if m:
            out[m.group(1)] = (float(m.group(3)) / 1e6, float(m.group(4)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=".", help="regular expression of case names")
    ap.add_argument("--threads", type=int, default=1, help="PyTorch threads, without --fulgur")
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds a case (PyTorch)")
    ap.add_argument("--fulgur", default="", help="test binary of strategy/device/engine: alternate with it")
    ap.add_argument("--benchtime", default="1s", help="fulgur's -test.benchtime")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    if a.threads < 1 or a.rounds < 1 or a.min_time <= 0:
        ap.error("--threads and --rounds must be 1 or more, --min-time above 0")
    pat = re.compile(a.cases)
    cases = [c for c in CASES if pat.search(c[0])]
    if not cases:
        ap.error("--cases %r matches no case: the names are %s" % (a.cases, ", ".join(c[0] for c in CASES)))
    if not a.fulgur:
        for c in cases:
            import torch
            torch.set_num_threads(a.threads)
            wall, cpu, n = time_case(c, a.min_time)
            print("BenchmarkShapes/%s-torch%d\t%d\t%.0f ns/op\t%.3f cpu-ms/op" % (c[0], a.threads, n, wall * 1e6, cpu), flush=True)
        return
    names = [c[0] for c in cases]
    pattern = "^(" + "|".join(re.escape(n) for n in names) + ")$"
    series = ("fulgur", "torch1", "fulgur1", "torch2")
    runs = {s: [] for s in series}
    for r in range(a.rounds):
        print("round %d/%d, load %s" % (r + 1, a.rounds, " ".join(open("/proc/loadavg").read().split()[:3])
                                          if os.path.exists("/proc/loadavg") else "?"), file=sys.stderr, flush=True)
        runs["fulgur"].append(fulgur_run(a.fulgur, pattern, False, a.benchtime))
        runs["torch1"].append(torch_run(cases, 1, a.min_time))
        runs["fulgur1"].append(fulgur_run(a.fulgur, pattern, True, a.benchtime))
        runs["torch2"].append(torch_run(cases, 2, a.min_time))
    print("ms a step (CPU ms), median of %d rounds; ratio = PyTorch / fulgur, median over rounds" % a.rounds)
    print("%-24s %15s %15s %15s %15s %10s %10s" % ("case", "fulgur", "fulgur 1t", "torch 1t", "torch 2t", "best each", "cpu 1t"))
    for n in names:
        if any(n not in run for s in series for run in runs[s]):
            print("%-24s missing from a run" % n)
            continue
        med = {s: [statistics.median(run[n][i] for run in runs[s]) for i in (0, 1)] for s in series}
        best = statistics.median(min(runs["torch1"][r][n][0], runs["torch2"][r][n][0]) /
                                 min(runs["fulgur"][r][n][0], runs["fulgur1"][r][n][0]) for r in range(a.rounds))
        cpu = statistics.median(runs["torch1"][r][n][1] / runs["fulgur1"][r][n][1] for r in range(a.rounds))
        cells = ["%7.2f (%5.2f)" % tuple(med[s]) for s in ("fulgur", "fulgur1", "torch1", "torch2")]
        print("%-24s %s %10.2f %10.2f" % (n, " ".join(cells), best, cpu))


if __name__ == "__main__":
    main()
