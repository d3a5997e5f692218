#!/usr/bin/env bash
# Renders every kustomize overlay under deploy/k8s with `kubectl kustomize`
# and validates every rendered object against the Kubernetes schemas of
# KUBERNETES_VERSION with kubernetes-validate (--strict: unknown fields are
# errors). First it checks that the validator does reject a broken
# manifest (tests/deploy/broken.yaml), so that a pass means something.
# Exit code 0 only when every overlay renders and validates.
#
#   scripts/check-deploy.sh [BUILD_DIR]
#
# kubectl and the validator come from scripts/install-deps.sh (the test
# set-up): kubectl from apt, kubernetes-validate from PyPI into
# BUILD_DIR/tools-venv.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
version="${KUBERNETES_VERSION:-1.37.0}"
validate="$build/tools-venv/bin/kubernetes-validate"

command -v kubectl >/dev/null || {
  echo "check-deploy: kubectl is missing (scripts/install-deps.sh installs it)" >&2
  exit 1
}
[ -x "$validate" ] || {
  echo "check-deploy: $validate is missing (scripts/install-deps.sh installs it)" >&2
  exit 1
}
# kustomize v4+ (kubectl 1.21+) understands these overlays.
kustomize_version="$(kubectl version --client 2>/dev/null | sed -n 's/^Kustomize Version: v\([0-9]*\).*/\1/p')"
if [ -z "$kustomize_version" ] || [ "$kustomize_version" -lt 4 ]; then
  echo "check-deploy: this kubectl's kustomize is too old (need v4 or later): $(kubectl version --client 2>&1 | head -1)" >&2
  exit 1
fi

out="$build/deploy-rendered"
rm -rf "$out" && mkdir -p "$out"

if "$validate" --strict --quiet -k "$version" "$root/tests/deploy/broken.yaml" >"$out/broken.log" 2>&1; then
  echo "check-deploy: the validator accepted tests/deploy/broken.yaml; it checks nothing" >&2
  exit 1
fi
echo "check-deploy: the validator rejects the broken manifest, as it must"

status=0
overlays=0
for dir in "$root"/deploy/k8s/*/; do
  [ -f "$dir/kustomization.yaml" ] || continue
  name="$(basename "$dir")"
  overlays=$((overlays + 1))
  if ! kubectl kustomize "$dir" >"$out/$name.yaml" 2>"$out/$name.err"; then
    echo "check-deploy: $name does not render:" >&2
    cat "$out/$name.err" >&2
    status=1
    continue
  fi
  objects="$(grep -c '^kind:' "$out/$name.yaml" || true)"
  if "$validate" --strict --quiet -k "$version" "$out/$name.yaml"; then
    echo "check-deploy: $name: $objects objects valid for Kubernetes $version"
  else
    echo "check-deploy: $name: invalid for Kubernetes $version (rendered: $out/$name.yaml)" >&2
    status=1
  fi
done
if [ "$overlays" -eq 0 ]; then
  echo "check-deploy: no kustomization under deploy/k8s" >&2
  exit 1
fi
exit "$status"
