#!/bin/sh
# The image's entrypoint: sets OpenBLAS's core type for THIS host, then becomes frostd (exec: frostd is PID 1
# and gets SIGTERM itself, so `docker stop` / a pod's termination drains it).
#
# Why: the Makefile exports OPENBLAS_CORETYPE=SkylakeX when /proc/cpuinfo lists avx512f, because on these
# machines OpenBLAS's own detection settles on Haswell kernels although the CPU has AVX-512 (SkylakeX doubles
# GEMM speed). In an image that decision cannot be baked in with ENV: the image built on an AVX-512 machine
# also runs on AVX2-only hosts, where SkylakeX kernels die of SIGILL. So the same check runs here, on the host
# that runs the container, at every start. It asks for the whole Skylake-X AVX-512 set (F, CD, BW, DQ, VL) that
# those kernels use, not avx512f alone. A value given with `-e OPENBLAS_CORETYPE=...` is kept as it is.
set -eu

if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -r /proc/cpuinfo ]; then
  flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
  skx=yes
  for f in avx512f avx512cd avx512bw avx512dq avx512vl; do
    case " ${flags#*:} " in
      *" $f "*) ;;
      *) skx=no ;;
    esac
  done
  if [ "$skx" = yes ]; then
    OPENBLAS_CORETYPE=SkylakeX
    export OPENBLAS_CORETYPE
  fi
fi

exec /usr/local/bin/frostd "$@"
