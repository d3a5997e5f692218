#!/usr/bin/env bash
# The OpenAI-compatible HTTP API driven by the real `openai` client from
# PyPI (openai_client_test.py beside this says what is checked): makes, or
# reuses while it has the pinned version, a virtualenv with it, fetches
# SmolLM2-135M-Instruct (scripts/fetch-smollm2.sh) and serves it in FP8.
#
#   tests/coordinator/openai_client_test.sh BIN_DIR VENV_DIR
#
# Skips (exit 77) only when PyPI cannot be reached; any other failure fails.
set -euo pipefail
bin="$1"; venv="$2"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

. "$here/../pypi_venv.sh"

pypi_venv openai_client_test "$venv" "$work/pip.log" "${OPENAI_CLIENT_PINS[@]}"
status=0
model="$("$root/scripts/fetch-smollm2.sh")" || status=$?
if [ "$status" -ne 0 ]; then exit "$status"; fi  # 77: no PyPI
"$venv/bin/python" "$here/openai_client_test.py" --bin "$bin" \
  --model "$model" --work "$work" --serving_md "$root/docs/serving.md" \
  --text "$root/tests/data/declaration.txt"
