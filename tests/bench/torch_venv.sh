#!/usr/bin/env bash
# Makes (or reuses) a virtualenv with PyTorch from PyPI for
# tests/bench/torch_linear.py, and prints its python's path.
#
#   tests/bench/torch_venv.sh [DIR]      (default: build/torch-venv)
#
# PyPI's Linux torch wheel brings NVIDIA's CUDA 12 libraries with it (about
# 7 GB installed, a few minutes); the CPU comparison does not use them, but
# torch does not import without them. Exits non-zero, saying why, when PyPI
# cannot be reached.
set -euo pipefail

venv="${1:-build/torch-venv}"
if [ ! -x "$venv/bin/python3" ] || ! "$venv/bin/python3" -c 'import torch' 2> /dev/null; then
  echo "torch_venv: installing torch from PyPI into $venv (about 7 GB)" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check torch numpy >&2
fi
"$venv/bin/python3" -c 'import torch; print("torch_venv: torch", torch.__version__)' >&2
echo "$venv/bin/python3"
