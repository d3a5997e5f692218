#!/usr/bin/env bash
# The packages whose shared libraries the given programs load, one per
# line: what the container image's runtime stage installs
# (deploy/docker/Dockerfile). Libraries under /usr/local/cuda that no
# package owns come with NVIDIA's CUDA runtime image and are left out; any
# other library that no package owns, or one that is not found, is an
# error (exit code 1), so that the image never misses one. octet's own
# libraries beside the programs are not packages: name them as arguments
# to check what they load.
#
#   scripts/runtime-packages.sh PROGRAM...
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: runtime-packages.sh PROGRAM..." >&2; exit 2; }

status=0
declare -A packages=()
for program in "$@"; do
  if ! libs="$(ldd "$program" 2>&1)"; then
    echo "runtime-packages: ldd $program failed: $libs" >&2
    exit 1
  fi
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [ "$path" = "not" ]; then
      echo "runtime-packages: $program needs $name, which is not found" >&2
      status=1
      continue
    fi
    # dpkg knows a file by the path its package installed (/lib and
    # /usr/lib are one folder on merged-/usr systems): try both.
    real="$(readlink -f "$path")"
    # octet's own libraries (the CUDA kernels) sit beside the programs and
    # travel with them; their own libraries are checked when they are
    # among the arguments.
    if [ "$(dirname "$real")" = "$(dirname "$(readlink -f "$program")")" ]; then
      continue
    fi
    owner=""
    for candidate in "$path" "$real" "/usr$path" "/usr$real" "${real#/usr}"; do
      if owner="$(dpkg-query -S "$candidate" 2>/dev/null)"; then
        break
      fi
      owner=""
    done
    if [ -n "$owner" ]; then
      packages["${owner%%:*}"]=1
    elif [[ "$real" == /usr/local/cuda* ]]; then
      : # the CUDA runtime image has it
    else
      echo "runtime-packages: no package owns $path ($name, for $program)" >&2
      status=1
    fi
  done <<<"$libs"
done
[ "$status" -eq 0 ] || exit "$status"
printf '%s\n' "${!packages[@]}" | sort
