#!/usr/bin/env bash
# The HTTP API under load (http_load_test.py beside this says what is
# checked), with the real `openai` client in the virtualenv that
# openai_client_test.sh makes (OPENAI_CLIENT_PINS in tests/pypi_venv.sh).
#
#   tests/coordinator/http_load_test.sh BIN_DIR VENV_DIR [--clients N] [--seconds S]
#
# Skips (exit 77) only when PyPI cannot be reached; any other failure fails.
set -euo pipefail
bin="$1"; venv="$2"; shift 2
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

. "$here/../pypi_venv.sh"

pypi_venv http_load_test "$venv" "$work/pip.log" "${OPENAI_CLIENT_PINS[@]}"
"$venv/bin/python" "$here/http_load_test.py" --bin "$bin" --work "$work" "$@"
