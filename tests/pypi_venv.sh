# Sourced by the tests that take a PyPI package as their oracle
# (tests/model/hf_tokenizers_oracle.sh, tests/tools/compressed_tensors_oracle.sh):
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
# packages, pip's messages in LOG. Exits 77 saying why when PyPI cannot be
# reached, 1 with pip's log on any other failure. NAME prefixes messages.
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

# pypi_lock VENV / pypi_unlock: hold VENV.lock (file descriptor 9) while
# checking and making VENV, so that a second run waits, then finds it made.
pypi_lock() {
  mkdir -p "$(dirname "$1")"
  exec 9> "$1.lock"
  flock 9
}
pypi_unlock() {
  flock -u 9
  exec 9>&-
}
