#!/usr/bin/env bash
# apt_install_missing.sh TAG PACKAGE...: installs the Debian packages among PACKAGE that are not installed yet,
# non-interactively (sudo when not root); touches apt only when something is missing. TAG names the caller
# in the log line. Shared by scripts/install_deps.sh and scripts/fuzz.sh.
set -euo pipefail
tag=$1
shift
missing=()
for p in "$@"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "$tag: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
