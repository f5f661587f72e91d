# One place for compiler warnings, optimisation and sanitizer flags.

# -march: a portable baseline, x86-64-v3 (AVX2, FMA, F16C: every machine frost serves on has it), whatever the
# build machine is, so one build (and one image) runs on AVX2-only and AVX-512 hosts alike; the AVX-512 kernels
# (GEMM, attention, exp, matvec) are compiled for it with target attributes and chosen at run time
# (kernels/cpu/isa.h). frostd refuses to start on a CPU without the baseline. Override with
# -DFROST_MARCH=<value> (e.g. native for a machine-specific build; empty = the compiler's default).
if(NOT DEFINED FROST_MARCH)
  set(FROST_MARCH "")
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
    set(FROST_MARCH "x86-64-v3")
  endif()
endif()
set(FROST_MARCH "${FROST_MARCH}" CACHE STRING "value for -march (empty: compiler default)")
message(STATUS "frost: -march=${FROST_MARCH}")

function(frost_target_warnings tgt)
  target_compile_options(${tgt} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow=local -Wno-unused-parameter>)
  if(FROST_FATAL_WARNINGS)
    target_compile_options(${tgt} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
  if(FROST_MARCH)
    target_compile_options(${tgt} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=${FROST_MARCH}>)
  endif()
endfunction()

# Sanitizers apply to everything built after this point.
if(FROST_SANITIZE_ADDRESS)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
if(FROST_SANITIZE_THREAD)
  add_compile_options(-fsanitize=thread)
  add_link_options(-fsanitize=thread)
endif()
