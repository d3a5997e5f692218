#!/usr/bin/env bash
# Builds abseil's libraries with ThreadSanitizer, for
# `make test-tsan`, which puts them first on LD_LIBRARY_PATH.
#
#   scripts/tsan-abseil.sh OUT    the libraries land in OUT/lib
#
# Why: Debian's libabsl is not instrumented, and absl::Mutex (which octet
# uses, and gRPC uses under its own locks) synchronizes with atomics and
# futexes that TSan cannot see. Against Debian's build every access guarded
# by an absl::Mutex, absl::CondVar or absl::Notification reads as a data
# race. So this builds the very source Debian built (`apt-get source` of the
# installed version, Debian's patches applied), shared, with the same
# SONAMEs and inline namespace, with -fsanitize=thread; abseil then tells
# TSan about every lock and unlock itself (its ABSL_TSAN_MUTEX_* hooks),
# for octet's code and gRPC's alike.
#
# The source comes through apt with a private state under OUT: deb-src
# entries made from the system's own Debian entries, the system's apt
# configuration left as it is. Every library is built, not only
# synchronization: inline templates such as absl::call_once's are compiled
# into many of them, and the dynamic linker binds each to one copy, which
# must be instrumented too. Once per installed version (about a minute on 2 cores).
set -euo pipefail
[ $# -eq 1 ] || {
  echo "usage: scripts/tsan-abseil.sh OUT" >&2
  exit 2
}
out="$(mkdir -p "$1" && cd "$1" && pwd)"

read -r source version < <(dpkg-query -W \
  -f='${source:Package} ${source:Version}\n' libabsl-dev)
stamp="$out/lib/.built-from"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$source $version" ]; then
  exit 0
fi

# deb-src twins of the system's Debian entries (one-line and deb822 forms),
# for the suites of this release.
codename="$(. /etc/os-release && echo "$VERSION_CODENAME")"
apt_dir="$out/apt"
rm -rf "$apt_dir" "$out/src" "$out/build" "$out/lib"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/parts" "$out/src"
grep -hE "^deb [^ ]+ ${codename}(-[a-z]+)? " /etc/apt/sources.list \
  /etc/apt/sources.list.d/*.list 2>/dev/null |
  sed 's/^deb /deb-src /' >"$apt_dir/sources.list" || true
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && grep -qE "^Suites:.*\b${codename}\b" "$f" || continue
  sed 's/^Types:.*/Types: deb-src/' "$f" >"$apt_dir/parts/$(basename "$f")"
done
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list"
  -o "Dir::Etc::SourceParts=$apt_dir/parts"
  -o "Dir::State::Lists=$apt_dir/lists")
echo "tsan-abseil: fetching the source of $source $version"
apt-get -qq "${apt_opts[@]}" update
(cd "$out/src" && apt-get -qq "${apt_opts[@]}" source "$source=$version")
src="$(find "$out/src" -mindepth 1 -maxdepth 1 -type d | head -1)"

# As Debian's shared build (debian/rules: build type None, C++17, shared),
# with TSan and -O1 -g1 as octet's own sanitizer builds (CMakeLists.txt).
echo "tsan-abseil: building abseil with -fsanitize=thread"
cmake -S "$src" -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_CXX_STANDARD=17 -DABSL_PROPAGATE_CXX_STD=ON -DBUILD_SHARED_LIBS=ON \
  -DBUILD_TESTING=OFF \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread -O1 -g1" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" >/dev/null
ninja -C "$out/build" >/dev/null
# All but absl::Status and absl::Cord: gRPC's core (not instrumented either)
# makes, shares and frees its errors, which are absl::Status with Cord
# payloads, across its own threads with synchronization TSan cannot see, so
# instrumented Status and Cord code would report each of those hand-offs
# inside gRPC as a race. Debian's copies of these stay in use; octet's
# inline use of them is still instrumented in octet's own code.
mkdir -p "$out/lib"
find "$out/build" -name 'libabsl_*.so.*' \
  -not -name 'libabsl_status.so.*' -not -name 'libabsl_statusor.so.*' \
  -not -name 'libabsl_cord*.so.*' -exec cp -P {} "$out/lib/" \;
echo "$source $version" >"$stamp"
echo "tsan-abseil: $(find "$out/lib" -name '*.so.*' -type f | wc -l) libraries in $out/lib"
