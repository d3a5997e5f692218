#!/usr/bin/env bash
# octet's compressed-tensors FP8 checkpoints against the `compressed-tensors`
# package from PyPI, llm-compressor's format library
# (compressed_tensors_oracle.py beside this says what is compared). Makes, or
# reuses while it has the pinned versions, the torch oracles' virtualenv
# (TORCH_ORACLE_PINS in tests/pypi_venv.sh: the package, torch, transformers;
# 5.6 GB installed, 2 minutes here), then runs the script in a fresh work
# directory.
#
#   tests/tools/compressed_tensors_oracle.sh OCTET_BIN VENV_DIR [ARGS...]
#
# e.g. tests/tools/compressed_tensors_oracle.sh build/bin/octet \
#          .venvs/torch
# Further arguments go to the script. Skips (exit 77) only when pip cannot
# reach PyPI; any other failure fails.
set -euo pipefail
octet="$1"; venv="$2"; shift 2
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

. "$here/../pypi_venv.sh"

pypi_venv compressed_tensors_oracle "$venv" "$work/pip.log" \
  "${TORCH_ORACLE_PINS[@]}"
"$venv/bin/python" "$here/compressed_tensors_oracle.py" --octet "$octet" \
  --work "$work" "$@"
