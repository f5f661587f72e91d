#!/bin/sh
# Writes the image's /etc/frost/frost.yaml from configs/default.yaml, changing only what a container needs:
#   server.listen, server.metrics_listen  -> host 0.0.0.0 (ports kept: the Dockerfile's EXPOSE matches them)
#   server.http.listen                    -> "0.0.0.0:8000": the OpenAI-compatible HTTP API, off ("") in
#                                            default.yaml, is on in the image at the port `make run` uses
#                                            (EXPOSEd with the other two); --http-listen "" turns it off
#   jobs.state_dir                        -> /var/lib/frost/state (in the VOLUME /var/lib/frost, owned by the
#                                            image's user; the working directory /opt/frost is read-only to it)
# model.path stays "models/stories260K": relative to the working directory /opt/frost, where the image keeps
# the built-in model. Every other field keeps default.yaml's value and comment.
#
#   make-config.sh configs/default.yaml OUT.yaml
#
# Fails (exit 1, naming the field) when default.yaml no longer has a line this script rewrites, so the image
# build breaks instead of shipping an unchanged default. tests/deploy/image_test.py runs it on every test run.
set -eu
[ $# -eq 2 ] || { echo "usage: make-config.sh DEFAULT.yaml OUT.yaml" >&2; exit 2; }
src=$1
out=$2

need() {  # need FIELD REGEX: exactly one line of $src matches
  n=$(grep -cE "$2" "$src" || true)
  if [ "$n" != 1 ]; then
    echo "make-config.sh: $src: expected one '$1' line matching /$2/, found $n" >&2
    exit 1
  fi
}
# server.listen is the 2-space `listen:` (a field of server:), server.http.listen the 4-space one (a field of
# server.http:); the anchored indents keep the two apart. The http line's value may be anything ("" = off).
need server.listen         '^  listen: "[^"]*:[0-9]+"$'
need server.metrics_listen '^  metrics_listen: "[^"]*:[0-9]+"$'
need server.http.listen    '^    listen: "[^"]*"$'
# ... and that one 4-space line must sit in server: -> http: (not a listen: another subsection grew).
in_http=$(awk '/^[^ #]/ { top = $1 } /^  [^ #]/ { sub2 = $1 }
               top == "server:" && sub2 == "http:" && /^    listen: "[^"]*"$/ { n++ } END { print n + 0 }' "$src")
if [ "$in_http" != 1 ]; then
  echo "make-config.sh: $src: the one 4-space 'listen:' line is not server.http.listen (not under server: http:)" >&2
  exit 1
fi
need jobs.state_dir        '^  state_dir: "[^"]*"$'
need model.path            '^  path: "models/stories260K"$'

sed -E \
  -e 's|^(  listen: ")[^"]*:([0-9]+")$|\10.0.0.0:\2|' \
  -e 's|^(  metrics_listen: ")[^"]*:([0-9]+")$|\10.0.0.0:\2|' \
  -e 's|^(    listen: ")[^"]*(")$|\10.0.0.0:8000\2|' \
  -e 's|^(  state_dir: ")[^"]*(")$|\1/var/lib/frost/state\2|' \
  "$src" > "$out.tmp"
{
  echo "# The container image's frostd config: configs/default.yaml with the listen hosts, the OpenAI HTTP API on at"
  echo "# 0.0.0.0:8000, and the state directory moved into the volume /var/lib/frost (deploy/image/make-config.sh)."
  echo "# Mount your own file here to change it."
  cat "$out.tmp"
} > "$out"
rm -f "$out.tmp"
