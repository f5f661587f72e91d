# One place for compiler warnings, optimisation and sanitizer flags.

# -march: x86-64-v4 (AVX-512) when the build machine has it, else v3 (AVX2/FMA/F16C),
# else the compiler default. Override with -DFROST_MARCH=<value> (empty = compiler default).
if(NOT DEFINED FROST_MARCH)
  set(FROST_MARCH "")
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64" AND EXISTS "/proc/cpuinfo")
    file(READ "/proc/cpuinfo" _frost_cpuinfo)
    if(_frost_cpuinfo MATCHES "avx512f" AND _frost_cpuinfo MATCHES "avx512bw"
       AND _frost_cpuinfo MATCHES "avx512vl" AND _frost_cpuinfo MATCHES "avx512dq")
      set(FROST_MARCH "x86-64-v4")
    elseif(_frost_cpuinfo MATCHES "avx2" AND _frost_cpuinfo MATCHES "fma" AND _frost_cpuinfo MATCHES "f16c")
      set(FROST_MARCH "x86-64-v3")
    endif()
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
