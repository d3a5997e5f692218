# Sourced by the tests that take a PyPI package as their oracle
# (tests/model/hf_tokenizers_oracle.sh, tests/model/gguf_oracle.sh,
# tests/tools/compressed_tensors_oracle.sh):
# installs pinned packages into a fresh virtualenv, and tells a network that
# failed pip (ctest's skip, exit 77) from any other failure (exit 1).
# The virtualenvs live outside the build folders (CMake's OCTET_PYPI_VENVS,
# .venvs/ by default), so `make test` and `make test-asan` share them; a
# lock beside each keeps two runs from making one at once.

# Signs in pip's log that the network failed it, the likeliest first, or
# nothing.
pypi_network_failure() {
  local pattern
  for pattern in "Failed to establish a new connection: [^')]*" \
                 "(ConnectTimeout|ReadTimeout|Proxy|SSL)Error" \
                 "Connection broken: [^')]*"; do
    grep -m 1 -oE "$pattern" "$1" && return
  done
  return 0
}

# pypi_install NAME VENV LOG PACKAGE...: makes VENV and installs the
# packages, pip's messages in LOG (pypi_venv below calls it when needed).
# Exits 77 saying why when PyPI cannot be reached, 1 with pip's log on any
# other failure. NAME prefixes messages.
pypi_install() {
  local name="$1" venv="$2" log="$3" reason
  shift 3
  python3 -m venv "$venv"
  if ! "$venv/bin/pip" install --quiet --disable-pip-version-check "$@" \
       2> "$log"; then
    reason="$(pypi_network_failure "$log")"
    reason="${reason%%$'\n'*}"
    if [ -n "$reason" ]; then
      echo "$name: skipped: PyPI cannot be reached ($reason)"
      exit 77
    fi
    cat "$log" >&2
    exit 1
  fi
}

# Whether VENV's python has every PACKAGE==VERSION given.
pypi_has_pins() {
  local venv="$1"
  shift
  "$venv/bin/python" - "$@" 2> /dev/null <<'PY'
import sys
from importlib.metadata import version
sys.exit(any(version(p.split("==")[0]) != p.split("==")[1] for p in sys.argv[1:]))
PY
}

# pypi_venv NAME VENV LOG PACKAGE==VERSION...: makes VENV with the pinned
# packages unless it has them all. One run at a time per VENV: VENV.lock
# (file descriptor 9) is held while checking and making it, so that a
# second run waits, then finds it made. Exits as pypi_install does.
pypi_venv() {
  local name="$1" venv="$2" log="$3" start
  shift 3
  mkdir -p "$(dirname "$venv")"
  exec 9> "$venv.lock"
  flock 9
  if ! pypi_has_pins "$venv" "$@"; then
    echo "$name: installing $* from PyPI into $venv" >&2
    start=$SECONDS
    pypi_install "$name" "$venv" "$log" "$@"
    echo "$name: installed in $((SECONDS - start)) s" >&2
  fi
  exec 9>&-  # (closing it releases the lock)
}

# The packages of the torch virtualenv that the torch-based oracles share
# (compressed_tensors_oracle.sh, gguf_oracle.sh): one 5.6 GB install, not
# one each. PyPI's torch wheel brings NVIDIA's CUDA libraries; no GPU is used.
TORCH_ORACLE_PINS=(torch==2.15.0 transformers==5.25.0 safetensors==0.8.0
                   compressed-tensors==0.20.1 gguf==0.19.0 accelerate==1.16.0
                   sentencepiece==0.2.3)

# The `openai` client of the HTTP API's tests (openai_client_test.sh,
# http_load_test.sh), which share one virtualenv.
OPENAI_CLIENT_PINS=(openai==3.63.0)
