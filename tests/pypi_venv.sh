# Sourced by the tests that take a PyPI package as their oracle or client
# (tests/model/hf_tokenizers_oracle.sh, tests/model/gguf_oracle.sh,
# tests/tools/compressed_tensors_oracle.sh, tests/coordinator/
# vllm_bench_test.sh, tests/bench/serving_peers.sh):
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

# vLLM's serving benchmark client (`vllm bench serve`: vllm.benchmarks.serve)
# for vllm_bench_test.sh and tests/bench/serving_peers.sh. vllm's own
# requirements (torch 2.14, CUDA kernels, ~9 GB) are not installed: the
# virtualenv sees the torch one's packages (pypi_venv_over) and adds vllm
# without its requirements, then what the benchmark's imports need.
VLLM_BENCH_NODEPS=(vllm==0.33.0)
VLLM_BENCH_PINS=(aiohttp==3.14.5 pybase64==1.5.1 pillow==13.0.0
                 msgspec==0.23.0 cbor2==6.3.0 pyzmq==27.3.0
                 openai-harmony==0.0.8 openai==3.63.0 cachetools==8.0.3
                 cloudpickle==3.1.3 uvloop==0.23.0 py-cpuinfo==9.0.0
                 prometheus_client==0.26.0 xgrammar==0.2.8
                 apache-tvm-ffi==0.1.11 fastapi==0.136.3 starlette==1.10.0
                 opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2
                 llguidance==1.9.1 psutil==7.2.2 blake3==1.0.11
                 pyyaml==6.0.4 partial-json-parser==0.2.1.1.post7
                 einops==0.8.2 orjson==3.13.0 tiktoken==0.14.0 ijson==3.6.0
                 setproctitle==1.3.8 prometheus-fastapi-instrumentator==8.1.0)

# pypi_venv_over NAME VENV BASE LOG NODEPS PACKAGE==VERSION...: makes VENV
# seeing BASE's packages (a .pth line naming BASE's site-packages, which
# must exist with its own pins), with NODEPS (one PACKAGE==VERSION)
# installed without its requirements and the other packages with theirs
# (those BASE has are taken from it). Locked and skipped as pypi_venv.
pypi_venv_over() {
  local name="$1" venv="$2" base="$3" log="$4" nodeps="$5" start site
  shift 5
  mkdir -p "$(dirname "$venv")"
  exec 9> "$venv.lock"
  flock 9
  if ! pypi_has_pins "$venv" "$nodeps" "$@"; then
    echo "$name: installing $nodeps (alone) and $* over $base" >&2
    start=$SECONDS
    rm -rf "$venv"
    python3 -m venv "$venv"
    site="$("$venv/bin/python" -c \
      'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    "$base/bin/python" -c \
      'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
      > "$site/octet_base_venv.pth"
    pypi_install "$name" "$venv" "$log" --no-deps "$nodeps"
    pypi_install "$name" "$venv" "$log" "$@"
    echo "$name: installed in $((SECONDS - start)) s" >&2
  fi
  exec 9>&-
}

# gguf_tokenizer_dir NAME TORCH_VENV GGUF OUT: the tokenizer transformers
# reads from a GGUF file, saved as a Hugging Face tokenizer directory OUT
# (what vLLM's client loads to count tokens). Exits 1 with transformers'
# message when it cannot. NAME prefixes messages.
gguf_tokenizer_dir() {
  local name="$1" venv="$2" gguf="$3" out="$4" log
  log="$(mktemp)"
  if ! "$venv/bin/python" - "$gguf" "$out" 2> "$log" <<'PY'
import os, sys
from transformers import AutoTokenizer
path, out = sys.argv[1], sys.argv[2]
AutoTokenizer.from_pretrained(os.path.dirname(path),
                              gguf_file=os.path.basename(path)).save_pretrained(out)
PY
  then
    cat "$log" >&2
    rm -f "$log"
    echo "$name: transformers made no tokenizer of $gguf" >&2
    exit 1
  fi
  rm -f "$log"
}
