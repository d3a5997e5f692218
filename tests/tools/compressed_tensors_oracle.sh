#!/usr/bin/env bash
# octet's compressed-tensors FP8 checkpoints against the `compressed-tensors`
# package from PyPI, llm-compressor's format library
# (compressed_tensors_oracle.py beside this says what is compared). Makes, or
# reuses while it has the pinned versions, a virtualenv with the package,
# torch (PyPI's wheel brings NVIDIA's CUDA libraries: 5.6 GB installed, 2
# minutes here; no GPU is used) and transformers, then runs the script in a
# fresh work directory.
#
#   tests/tools/compressed_tensors_oracle.sh OCTET_BIN VENV_DIR [ARGS...]
#
# e.g. tests/tools/compressed_tensors_oracle.sh build/bin/octet \
#          .venvs/compressed-tensors
# Further arguments go to the script. Skips (exit 77) only when pip cannot
# reach PyPI; any other failure fails.
set -euo pipefail
octet="$1"; venv="$2"; shift 2
pins=(torch==2.15.0 compressed-tensors==0.20.1 transformers==5.25.0
      safetensors==0.8.0)
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

. "$here/../pypi_venv.sh"

pypi_venv compressed_tensors_oracle "$venv" "$work/pip.log" "${pins[@]}"
"$venv/bin/python" "$here/compressed_tensors_oracle.py" --octet "$octet" \
  --work "$work" "$@"
