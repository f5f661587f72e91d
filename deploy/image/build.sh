#!/usr/bin/env bash
# `make image`: builds Dockerfile into $1 (default frost:latest) with the first container engine that works:
# docker (its daemon answers), podman, buildah. CONTAINER_ENGINE=docker|podman|buildah picks one; extra
# arguments for the build command go in IMAGE_BUILD_ARGS (e.g. "--build-arg CMAKE_FLAGS=...").
#
# podman and buildah build with --format docker: the OCI image format has no HEALTHCHECK and they would drop it.
set -euo pipefail
cd "$(dirname "$0")/../.."
image=${1:-frost:latest}
extra=${IMAGE_BUILD_ARGS:-}

works() {  # works ENGINE: installed, and able to build (docker: a daemon answers)
  command -v "$1" >/dev/null 2>&1 || return 1
  case $1 in
    docker) docker info >/dev/null 2>&1 ;;
    podman) podman info >/dev/null 2>&1 ;;
    buildah) buildah info >/dev/null 2>&1 ;;
    *) return 1 ;;
  esac
}

engine=${CONTAINER_ENGINE:-}
if [[ -n $engine ]]; then
  if ! works "$engine"; then
    echo "make image: CONTAINER_ENGINE=$engine is not installed or does not work ('$engine info' fails)" >&2
    exit 1
  fi
else
  for e in docker podman buildah; do
    if works "$e"; then engine=$e; break; fi
  done
fi

if [[ -z $engine ]]; then
  {
    echo "make image: no working container engine: need one of docker (with a running daemon), podman, buildah."
    for e in docker podman buildah; do
      if command -v "$e" >/dev/null 2>&1; then echo "  $e: installed, but '$e info' fails"; else echo "  $e: not installed"; fi
    done
    echo "On Debian 12, install podman (daemonless, rootless-capable) or buildah:"
    echo "  sudo apt-get install podman        # or: sudo apt-get install buildah"
    echo "then run 'make image' again (IMAGE=name:tag to name it; CONTAINER_ENGINE=... to pick one)."
  } >&2
  exit 1
fi

echo "make image: building $image with $engine"
start=$SECONDS
# shellcheck disable=SC2086  # IMAGE_BUILD_ARGS is split on purpose
case $engine in
  docker) docker build -t "$image" -f Dockerfile $extra . ;;
  podman) podman build --format docker -t "$image" -f Dockerfile $extra . ;;
  buildah) buildah bud --format docker -t "$image" -f Dockerfile $extra . ;;
esac
echo "make image: built $image with $engine in $((SECONDS - start)) s"
