#!/usr/bin/env bash
# octet's tokenizer.json tokenizer against Hugging Face's `tokenizers` from
# PyPI (hf_tokenizers_oracle.py beside this says what is compared). Makes, or
# reuses while it imports the pinned version, a virtualenv with tokenizers,
# then runs the script in a fresh work directory.
#
#   tests/model/hf_tokenizers_oracle.sh OCTET_BIN WORK_VENV_DIR [--no-octet]
#
# e.g. tests/model/hf_tokenizers_oracle.sh build/bin/octet .venvs/tokenizers
# Further arguments go to the script. Skips (exit 77) only when pip cannot
# reach PyPI; any other failure fails.
set -euo pipefail
octet="$1"; venv="$2"; shift 2
pin=0.23.3
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

. "$here/../pypi_venv.sh"

pypi_venv hf_tokenizers_oracle "$venv" "$work/pip.log" "tokenizers==$pin"
"$venv/bin/python" "$here/hf_tokenizers_oracle.py" --octet "$octet" --work "$work" "$@"
