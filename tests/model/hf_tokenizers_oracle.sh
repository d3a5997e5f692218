#!/usr/bin/env bash
# octet's tokenizer.json tokenizer against Hugging Face's `tokenizers` from
# PyPI (hf_tokenizers_oracle.py beside this says what is compared). Makes, or
# reuses while it imports the pinned version, a virtualenv with tokenizers,
# then runs the script in a fresh work directory.
#
#   tests/model/hf_tokenizers_oracle.sh OCTET_BIN WORK_VENV_DIR [--no-octet]
#
# e.g. tests/model/hf_tokenizers_oracle.sh build/bin/octet build/tokenizers-venv
# Further arguments go to the script. Skips (exit 77) only when pip cannot
# reach PyPI; any other failure fails.
set -euo pipefail
octet="$1"; venv="$2"; shift 2
pin=0.23.3
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Signs in pip's log that the network failed it, the likeliest first, or
# nothing.
network_failure() {
  local pattern
  for pattern in "Failed to establish a new connection: [^')]*" \
                 "(ConnectTimeout|ReadTimeout|Proxy|SSL)Error" \
                 "Connection broken: [^')]*"; do
    grep -m 1 -oE "$pattern" "$1" && return
  done
  return 0
}

if ! "$venv/bin/python" -c "import sys, tokenizers; sys.exit(tokenizers.__version__ != '$pin')" \
     2> /dev/null; then
  echo "hf_tokenizers_oracle: installing tokenizers==$pin from PyPI into $venv" >&2
  python3 -m venv "$venv"
  if ! "$venv/bin/pip" install --quiet --disable-pip-version-check "tokenizers==$pin" \
       2> "$work/pip.log"; then
    reason="$(network_failure "$work/pip.log")"
    reason="${reason%%$'\n'*}"
    if [ -n "$reason" ]; then
      echo "hf_tokenizers_oracle: skipped: PyPI cannot be reached ($reason)"
      exit 77
    fi
    cat "$work/pip.log" >&2
    exit 1
  fi
fi
"$venv/bin/python" "$here/hf_tokenizers_oracle.py" --octet "$octet" --work "$work" "$@"
