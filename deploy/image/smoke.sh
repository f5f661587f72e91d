#!/usr/bin/env bash
# `make image-test`: runs the built image and talks to it. Not part of CI (it needs a container engine, and
# `make image` builds frostd inside the image: ~30 min on 2 cores).
#
#   smoke.sh IMAGE
#
# Two containers, one after the other:
#   1. the image as shipped: the built-in stories260K from /opt/frost/models, state in the volume;
#   2. a model mounted read-only at /models (this tree's models/stories260K) with `--model /models`.
# Each must turn healthy (`frostctl health --service frost.v1.Generation`, the image's HEALTHCHECK), answer
# `frostctl generate` from outside the container, serve /metrics and the OpenAI API's GET /v1/models (port
# 8000, which the image's config turns on), run as uid 10001 with its state directory
# at /var/lib/frost/state, and exit 0 on `stop` (SIGTERM: drain).
#
# CONTAINER_ENGINE=docker|podman (default: the first that works). IMAGE_TEST_NETWORK=publish (default:
# -p 127.0.0.1::50051 etc., random host ports) or host (--network host, frostd on free host ports chosen
# here, for engines without working bridge networking; the HEALTHCHECK, fixed to 50051, is then not used).
# IMAGE_TEST_RUN_ARGS: extra arguments for every container run.
set -euo pipefail
cd "$(dirname "$0")/../.."
image=${1:-frost:latest}
network=${IMAGE_TEST_NETWORK:-publish}
# Extra arguments for every `run` (e.g. "--cpus 2"); split on spaces.
read -r -a extra_run <<<"${IMAGE_TEST_RUN_ARGS:-}"

works() { command -v "$1" >/dev/null 2>&1 && "$1" info >/dev/null 2>&1; }
engine=${CONTAINER_ENGINE:-}
if [[ -z $engine ]]; then
  for e in docker podman; do if works "$e"; then engine=$e; break; fi; done
fi
if [[ -z $engine ]] || ! works "$engine"; then
  echo "image-test: needs docker (with a running daemon) or podman to run containers; see 'make image'" >&2
  exit 1
fi

# This tree's frostctl talks to the container from outside (FROSTCTL=path to use another).
frostctl=${FROSTCTL:-}
if [[ -z $frostctl && -x build/client/frostctl ]]; then frostctl=build/client/frostctl; fi
name=frost-image-test-$$
cleanup() { "$engine" rm -f -v "$name" >/dev/null 2>&1 || true; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
fail() { echo "image-test: FAIL: $*" >&2; echo "--- container log:" >&2; "$engine" logs "$name" 2>&1 | tail -40 >&2; exit 1; }

# ctl ARGS...: frostctl against the container from outside (this tree's frostctl) or, without one, inside.
ctl() {
  if [[ -n $frostctl ]]; then "$frostctl" --addr "127.0.0.1:$grpc" "$@"
  else "$engine" exec "$name" frostctl --addr "127.0.0.1:$grpc_in" "$@"; fi
}

run_case() {  # run_case LABEL [engine run args...] -- [frostd args...]
  local label=$1; shift
  local run_args=() fd_args=()
  while (($#)) && [[ $1 != -- ]]; do run_args+=("$1"); shift; done
  shift || true
  fd_args=("$@")
  echo "== $label"
  local t0=$SECONDS
  if [[ $network == host ]]; then
    # All three listeners moved to free host ports (the image's 8000 may be taken on the host).
    grpc=$(free_port); metrics=$(free_port); http=$(free_port)
    grpc_in=$grpc
    "$engine" run -d --name "$name" --network host "${extra_run[@]}" "${run_args[@]}" "$image" "${fd_args[@]}" \
      --listen "0.0.0.0:$grpc" --metrics-listen "0.0.0.0:$metrics" --http-listen "0.0.0.0:$http" >/dev/null
  else
    grpc_in=50051
    "$engine" run -d --name "$name" -p 127.0.0.1::50051 -p 127.0.0.1::9090 -p 127.0.0.1::8000 "${extra_run[@]}" \
      "${run_args[@]}" "$image" "${fd_args[@]}" >/dev/null
    grpc=$("$engine" port "$name" 50051/tcp | head -1 | sed 's/.*://')
    metrics=$("$engine" port "$name" 9090/tcp | head -1 | sed 's/.*://')
    http=$("$engine" port "$name" 8000/tcp | head -1 | sed 's/.*://')
  fi

  local ok=""
  for _ in $(seq 1 120); do
    if "$engine" exec "$name" frostctl --addr "127.0.0.1:$grpc_in" --timeout 2 health \
         --service frost.v1.Generation >/dev/null 2>&1; then ok=1; break; fi
    [[ $("$engine" inspect -f '{{.State.Running}}' "$name") == true ]] || fail "$label: frostd exited"
    sleep 1
  done
  [[ -n $ok ]] || fail "$label: not SERVING after 120 s"
  echo "   healthy after $((SECONDS - t0)) s (frostctl health --service frost.v1.Generation)"
  if [[ $network != host ]]; then
    if [[ $engine == podman ]]; then
      podman healthcheck run "$name" >/dev/null || fail "$label: podman healthcheck run (the image's HEALTHCHECK) failed"
      echo "   the image's HEALTHCHECK: healthy"
    else
      for _ in $(seq 1 60); do
        [[ $(docker inspect -f '{{.State.Health.Status}}' "$name") == healthy ]] && break; sleep 1
      done
      [[ $(docker inspect -f '{{.State.Health.Status}}' "$name") == healthy ]] || fail "$label: HEALTHCHECK not healthy"
      echo "   the image's HEALTHCHECK: healthy"
    fi
  fi

  local out
  out=$(ctl generate --max-tokens 24 --seed 1 --temperature 0 "Once upon a time" 2>/dev/null) \
    || fail "$label: frostctl generate failed"
  [[ -n $out ]] || fail "$label: frostctl generate printed nothing"
  echo "   generate: Once upon a time${out//$'\n'/ }"
  python3 - "$metrics" <<'EOF' || fail "$label: /metrics"
import sys, urllib.request
body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
assert "frost_" in body, "no frost_ metrics"
print(f"   /metrics: {sum(1 for l in body.splitlines() if l.startswith('frost_'))} frost_ samples")
EOF
  python3 - "$http" <<'EOF' || fail "$label: the OpenAI HTTP API (GET /v1/models)"
import json, sys, urllib.request
body = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v1/models", timeout=5))
print(f"   GET /v1/models: {', '.join(m['id'] for m in body['data'])}")
EOF
  local uid
  uid=$("$engine" exec "$name" id -u)
  [[ $uid == 10001 ]] || fail "$label: frostd's container runs as uid $uid, not 10001"
  "$engine" exec "$name" test -e /var/lib/frost/state/LOCK || fail "$label: no /var/lib/frost/state/LOCK"
  echo "   uid $uid; state in /var/lib/frost/state"
  local t1=$SECONDS
  "$engine" stop -t 40 "$name" >/dev/null
  local rc
  rc=$("$engine" inspect -f '{{.State.ExitCode}}' "$name")
  [[ $rc == 0 ]] || fail "$label: exit code $rc after stop (SIGTERM), expected 0"
  echo "   stopped (SIGTERM, drained) in $((SECONDS - t1)) s, exit 0"
  "$engine" rm -f -v "$name" >/dev/null
}

start=$SECONDS
run_case "built-in model (stories260K from the image)" --
run_case "model mounted at /models" -v "$PWD/models/stories260K:/models:ro" -- --model /models
echo "image-test: ok ($engine, $image, $((SECONDS - start)) s)"
