#!/usr/bin/env bash
# Installs the official OpenAI Node SDK (`openai`), the JSON Schema validator `ajv`, LangChain.js
# (`@langchain/openai`, `@langchain/core`), the Vercel AI SDK (`ai`, `@ai-sdk/openai`) and `zod` from the npm
# registry into a cache directory, pinned by tests/client/openai/package-lock.json. Used by
# tests/client/openai_client_test.mjs (ctest openai_client), tests/client/openai_agents_test.mjs (ctest
# openai_agents, which installs its own copy into ~/.cache/frost/openai-agents-client so that a checkout pinning
# fewer packages cannot reinstall them away under it) and bench/structured_output_bench.mjs.
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
      -f $DEST/node_modules/ajv/package.json && -f $DEST/node_modules/ai/package.json ]]; then
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

# The packages must load on this node: openai and ajv as CommonJS (the tests load them with createRequire from
# the cache), LangChain.js, the AI SDK and zod with import() (ESM entries).
versions=$(cd "$DEST" && node --input-type=module -e '
  import fs from "node:fs";
  import { createRequire } from "node:module";
  import { pathToFileURL } from "node:url";
  const req = createRequire(`${process.cwd()}/package.json`);
  const v = (p) => JSON.parse(fs.readFileSync(`node_modules/${p}/package.json`)).version;
  const imp = (p) => import(pathToFileURL(req.resolve(p)).href);
  const OpenAI = req("openai").default, Ajv = req("ajv").default;
  if (typeof OpenAI !== "function" || typeof Ajv !== "function") throw new Error("unexpected exports (openai, ajv)");
  const lc = await imp("@langchain/openai"), msgs = await imp("@langchain/core/messages");
  const ai = await imp("ai"), aio = await imp("@ai-sdk/openai"), zod = await imp("zod");
  if (typeof lc.ChatOpenAI !== "function" || typeof msgs.HumanMessage !== "function" || typeof ai.generateText !== "function" ||
      typeof aio.createOpenAI !== "function" || typeof zod.z.object !== "function")
    throw new Error("unexpected exports (@langchain/openai, @langchain/core, ai, @ai-sdk/openai, zod)");
  const names = ["openai", "ajv", "@langchain/openai", "@langchain/core", "ai", "@ai-sdk/openai", "zod"];
  console.log(names.map((n) => `${n} ${v(n)}`).join(", "));') || die "the installed packages do not load with $(node --version)"

echo "$want" >"$DEST/.stamp"
echo "install_openai_client: $versions" >&2
echo "node_modules: $DEST/node_modules"
