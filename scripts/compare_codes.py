#!/usr/bin/env python3
"""Compares two `octet logits --activation_codes` runs, a step of
gpu-check.sh: the GPU's FP8 activation codes against the CPU's, per
quantized projection input in call order (per layer: qkv, o, gate_up,
down).

    compare_codes.py CPU.json GPU.json [--first_at_least 0.95]

The GPU quantizes bfloat16 activations, the CPU binary32 ones, so the
first input's codes differ only where bfloat16 rounding moved a value
onto an e4m3 rounding boundary (about 3%; docs/design.md); later inputs
drift apart through the layers and are reported, not judged. Prints one
line per input (equal codes, largest relative scale difference), the
logits' largest difference and whether the greedy token agrees; exits 0
when the first input's share of equal codes is at least the bound, 1
when it is not, 2 when the files cannot be read or do not match.
Standard library only: it runs on the GPU machine's own python3.
"""

import argparse
import json
import sys


def load(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if "activations" not in doc or "logits" not in doc:
        raise ValueError(f"{path}: no 'activations' and 'logits' (was it "
                         "`octet logits --activation_codes`?)")
    return doc


def relative(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-30)


def argmax(row):
    best = 0
    for i, v in enumerate(row):
        if v is not None and (row[best] is None or v > row[best]):
            best = i
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cpu")
    parser.add_argument("gpu")
    parser.add_argument("--first_at_least", type=float, default=0.95)
    args = parser.parse_args()
    try:
        cpu, gpu = load(args.cpu), load(args.gpu)
    except (OSError, ValueError) as e:
        print(f"compare_codes: {e}", file=sys.stderr)
        return 2
    if len(cpu["activations"]) != len(gpu["activations"]):
        print(f"compare_codes: {len(cpu['activations'])} quantized inputs "
              f"on the CPU, {len(gpu['activations'])} on the GPU",
              file=sys.stderr)
        return 2
    shares = []
    for i, (c, g) in enumerate(zip(cpu["activations"], gpu["activations"])):
        if len(c["codes"]) != len(g["codes"]) or not c["codes"]:
            print(f"compare_codes: input {i}: {len(c['codes'])} codes on the "
                  f"CPU, {len(g['codes'])} on the GPU", file=sys.stderr)
            return 2
        equal = sum(a == b for a, b in zip(c["codes"], g["codes"]))
        shares.append(equal / len(c["codes"]))
        scale = max((relative(a, b) for a, b in zip(c["scales"], g["scales"])),
                    default=0.0)
        print(f"input {i:3d}: {equal}/{len(c['codes'])} codes equal "
              f"({shares[-1]:.4f}), largest relative scale difference "
              f"{scale:.3g}")
    worst, largest, same_argmax = 0.0, 0.0, 0
    for c, g in zip(cpu["logits"], gpu["logits"]):
        for a, b in zip(c, g):
            if a is None or b is None:
                continue
            worst = max(worst, abs(a - b))
            largest = max(largest, abs(a))
        same_argmax += argmax(c) == argmax(g)
    print(f"logits: largest |gpu - cpu| {worst:.4g} ({worst / max(largest, 1e-30):.4g} "
          f"of the largest), greedy token equal for {same_argmax} of "
          f"{len(cpu['logits'])} prompts")
    ok = shares[0] >= args.first_at_least
    print(f"codes: first input {shares[0]:.4f} equal "
          f"({'at least' if ok else 'BELOW'} {args.first_at_least}), "
          f"last {shares[-1]:.4f}, {len(shares)} inputs")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
