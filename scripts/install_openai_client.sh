#!/usr/bin/env bash
# Installs the official OpenAI Node SDK (`openai`) and the JSON Schema validator `ajv` from the npm registry
# into a cache directory, pinned by tests/client/openai/package-lock.json. Used by
# tests/client/openai_client_test.mjs (ctest openai_client) and bench/structured_output_bench.mjs.
#
#   scripts/install_openai_client.sh [CACHE_DIR]
#
# CACHE_DIR: default $FROST_OPENAI_CLIENT, else ${XDG_CACHE_HOME:-~/.cache}/frost/openai-client. Idempotent:
# when the cache already holds what the lock file pins (a stamp of package.json, package-lock.json, .npmrc
# and this script) it returns at once, without the network, so it is offline-safe once cached. Concurrent
# runs wait for each other (flock). Prints the node_modules path on success (last line:
# "node_modules: DIR"). Needs node and npm (Debian: apt-get install nodejs npm; it installs them itself
# when run as root).
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PKG_SRC=$SRC/tests/client/openai
DEST=${1:-${FROST_OPENAI_CLIENT:-${XDG_CACHE_HOME:-$HOME/.cache}/frost/openai-client}}

die() { echo "install_openai_client: $*" >&2; exit 1; }

mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
exec 9>"$DEST/.lock"
flock 9

# What the cache must match: the pinned inputs and this script.
want=$(cat "$PKG_SRC/package.json" "$PKG_SRC/package-lock.json" "$PKG_SRC/.npmrc" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)
if [[ -f $DEST/.stamp && $(cat "$DEST/.stamp") == "$want" && -f $DEST/node_modules/openai/package.json &&
      -f $DEST/node_modules/ajv/package.json ]]; then
  echo "node_modules: $DEST/node_modules"
  exit 0
fi
rm -f "$DEST/.stamp"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "install_openai_client: node/npm missing, installing Debian's nodejs and npm" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm) >&2 ||
      die "apt-get install nodejs npm failed"
  else
    die "node and npm are needed (apt-get install nodejs npm)"
  fi
fi

echo "install_openai_client: installing into $DEST (npm ci, pinned by tests/client/openai/package-lock.json)" >&2
cp "$PKG_SRC/package.json" "$PKG_SRC/package-lock.json" "$PKG_SRC/.npmrc" "$DEST/"
(cd "$DEST" && npm ci --no-audit --no-fund --loglevel=error >&2) ||
  die "npm ci failed in $DEST (is the npm registry reachable?)"

# The SDK must load on this node (CommonJS entry: the test loads it with createRequire from the cache).
versions=$(cd "$DEST" && node -e '
  const fs = require("fs"), v = (p) => JSON.parse(fs.readFileSync(`node_modules/${p}/package.json`)).version;
  const o = v("openai"), a = v("ajv");
  const OpenAI = require("openai").default, Ajv = require("ajv").default;
  if (typeof OpenAI !== "function" || typeof Ajv !== "function") throw new Error("unexpected exports");
  console.log(`openai ${o}, ajv ${a}`);') || die "the installed packages do not load with $(node --version)"

echo "$want" >"$DEST/.stamp"
echo "install_openai_client: $versions" >&2
echo "node_modules: $DEST/node_modules"
