#!/usr/bin/env python3
"""octet's CPU GEMM against PyTorch's F.linear, side by side in one run.

PyTorch is the peer: its CPU F.linear in bfloat16 (oneDNN) on the same
weight shapes (N out x K in), batch sizes M and thread count as bench_gemm,
with weights rotated the same way (every call reads the next of enough
copies to cover --rotate_mib, so that weights stream from memory) and timed
the same way (a warm-up call, then at least 5 calls and --min_time_ms; the
median). PyTorch's output is bfloat16, bench_gemm's binary32: the output is
a small part of the bytes and none of the arithmetic.

With --panels, octet's times are bench_gemm --panels' GEMMs over weights
packed into panels (bf16p, fp8qp): what octet's CPU backend runs on an
AVX-512 machine. Without it, the GEMMs over weights as rows.

In rounds (--rounds, default 3), this runs bench_gemm --format=csv on the
shapes, then PyTorch on the same cells, and prints one table: per cell the
median over the rounds of octet's bf16 and fp8q times and PyTorch's, the
ratios (above 1: octet faster), and the rounds' spread of each ratio.

  python3 tests/bench/torch_linear.py --bench_gemm build/bin/bench_gemm \\
      --shapes 28672x4096,4096x4096 --m 1,16,128

PyTorch comes from a virtualenv: run this with that virtualenv's python
(tests/bench/torch_venv.sh makes one from PyPI). Without torch this says so
and exits 0 (skipped): the comparison is a measurement, not a test.
"""

import argparse
import csv
import io
import statistics
import subprocess
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bench_gemm", required=True, help="path of bench_gemm")
    p.add_argument("--shapes", default="6144x4096,4096x4096,28672x4096,4096x14336",
                   help="weight shapes NxK, comma-separated (bench_gemm's)")
    p.add_argument("--m", default="1,16,128", help="batch sizes M")
    p.add_argument("--threads", type=int, default=0,
                   help="threads for both; 0: one per core, as bench_gemm")
    p.add_argument("--rotate_mib", type=int, default=1024)
    p.add_argument("--min_time_ms", type=float, default=300.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--panels", action="store_true",
                   help="octet's GEMMs over panels (AVX-512's layout)")
    args = p.parse_args()
    try:
        args.shape_list = []
        for s in args.shapes.split(","):
            n, k = s.lower().split("x")
            args.shape_list.append((int(n), int(k)))
        args.m_list = [int(m) for m in args.m.split(",")]
    except ValueError:
        p.error(f"--shapes must be NxK,... and --m M,..., got {args.shapes!r} "
                f"and {args.m!r}")
    if any(v < 1 for s in args.shape_list for v in s) or \
            any(m < 1 for m in args.m_list):
        p.error("shapes and batch sizes must be positive")
    if args.rounds < 1 or args.threads < 0 or args.rotate_mib < 0:
        p.error("--rounds >= 1, --threads >= 0, --rotate_mib >= 0")
    return args


def octet_round(args, threads):
    """One bench_gemm run: {(n, k, m): (bf16 ms, fp8q ms)}."""
    cmd = [args.bench_gemm, "--backend=cpu", "--format=csv",
           f"--shapes={args.shapes}", f"--m={args.m}",
           f"--threads={threads}", f"--rotate_mib={args.rotate_mib}",
           f"--min_time_ms={args.min_time_ms}",
           f"--cpu_max_m={max(args.m_list)}"] + \
        (["--panels"] if args.panels else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    cells = {}
    bf16, fp8q = (("bf16_panels_ms", "fp8_quant_panels_ms") if args.panels
                  else ("bf16_ms", "fp8_quant_ms"))
    for row in csv.DictReader(io.StringIO(out.stdout)):
        key = (int(row["N"]), int(row["K"]), int(row["M"]))
        cells[key] = (float(row[bf16]), float(row[fp8q]))
    return cells


def torch_round(torch, args, weights):
    """PyTorch's F.linear on every cell: {(n, k, m): ms}."""
    cells = {}
    for (n, k), copies in weights.items():
        for m in args.m_list:
            x = torch.randn(m, k, dtype=torch.bfloat16)
            nxt = [0]

            def call():
                w = copies[nxt[0] % len(copies)]
                nxt[0] += 1
                torch.nn.functional.linear(x, w)

            call()  # warm-up: oneDNN picks and caches its kernel
            times = []
            start = time.perf_counter()
            while len(times) < 5 or \
                    (time.perf_counter() - start) * 1e3 < args.min_time_ms:
                t0 = time.perf_counter()
                call()
                times.append((time.perf_counter() - t0) * 1e3)
            cells[(n, k, m)] = statistics.median(times)
    return cells


def spread(values):
    return f"{min(values):.2f}-{max(values):.2f}"


def main():
    args = parse_args()
    try:
        import torch
    except ImportError:
        print("torch_linear: skipped: PyTorch is not installed for "
              f"{sys.executable} (tests/bench/torch_venv.sh makes a "
              "virtualenv with it)")
        return 0
    import os
    threads = args.threads or os.cpu_count()
    torch.set_num_threads(threads)
    weights = {}
    for n, k in args.shape_list:
        copies = max(1, -(-(args.rotate_mib << 20) // (2 * n * k)))
        weights[(n, k)] = [torch.randn(n, k, dtype=torch.bfloat16) * 0.02
                           for _ in range(copies)]
    print(f"torch_linear: PyTorch {torch.__version__} (oneDNN "
          f"{'on' if torch.backends.mkldnn.is_available() else 'off'}) "
          f"against {args.bench_gemm}, {threads} threads, weights rotated "
          f"over >= {args.rotate_mib} MiB, {args.rounds} rounds "
          "(octet, then PyTorch, each round); octet's weights "
          f"{'in panels' if args.panels else 'as rows'}", flush=True)
    octet, peer = [], []
    for r in range(args.rounds):
        octet.append(octet_round(args, threads))
        peer.append(torch_round(torch, args, weights))
        print(f"torch_linear: round {r + 1} of {args.rounds} done", flush=True)
    print()
    print(f"{'M':>6} {'N':>6} {'K':>6} {'octet_bf16':>11} {'octet_fp8q':>11} "
          f"{'torch_bf16':>11} {'bf16/torch':>11} {'(spread)':>11} "
          f"{'fp8q/torch':>11} {'(spread)':>11}")
    for n, k in args.shape_list:
        for m in args.m_list:
            key = (n, k, m)
            ob = [o[key][0] for o in octet]
            of = [o[key][1] for o in octet]
            tb = [p[key] for p in peer]
            # Ratios per round (each round's cells ran back to back).
            x_bf16 = [t / o for t, o in zip(tb, ob)]
            x_fp8q = [t / o for t, o in zip(tb, of)]
            print(f"{m:>6} {n:>6} {k:>6} {statistics.median(ob):>11.3f} "
                  f"{statistics.median(of):>11.3f} "
                  f"{statistics.median(tb):>11.3f} "
                  f"{statistics.median(x_bf16):>10.2f}x {spread(x_bf16):>11} "
                  f"{statistics.median(x_fp8q):>10.2f}x {spread(x_fp8q):>11}")
    print("\ntimes in ms (median over rounds); x = PyTorch's time / octet's "
          "(above 1: octet faster); spread = the rounds' lowest-highest ratio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
