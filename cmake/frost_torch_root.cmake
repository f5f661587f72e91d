# LibTorch from a PyTorch install's torch/ folder (-DFROST_TORCH_ROOT=$(python3 -c 'import torch,os;
# print(os.path.dirname(torch.__file__))')): its libraries and headers, linked directly, instead of
# find_package(Torch). The GPU machine's build (scripts/gpu_check.sh): TorchConfig's CUDA / cuDNN discovery
# would only add ways for the build to fail there. frost's CUDA decoder uses none of LibTorch's CUDA parts (it
# calls the CUDA runtime and cuBLAS itself); the prototype head (core/prototype/device.h) computes on the GPU
# through ATen's CUDA backend when LibTorch has one. Sets TORCH_LIBRARIES.
#
# FROST_TORCH_CUDA (AUTO | ON | OFF): link libtorch_cuda + libc10_cuda too. AUTO: when both are in lib/ (a CUDA
# wheel); ON: required, a configure error without them; OFF: torch_cpu + c10 only (at::hasCUDA() is false, the
# prototype head computes on the CPU). They are linked with --no-as-needed: frost calls nothing in them by
# name, and what they bring — the CUDA backend's operator and allocator registrations — runs from their static
# initializers, which the linker would otherwise drop with the unreferenced libraries.
#
# FROST_TORCH_CXX11_ABI: the C++ ABI LibTorch was built with (torch.compiled_with_cxx11_abi(); PyTorch wheels
# are cxx11 since 2.7), which every translation unit that includes its headers must share.
set(FROST_TORCH_CXX11_ABI 1 CACHE STRING "_GLIBCXX_USE_CXX11_ABI of the LibTorch in FROST_TORCH_ROOT")
set(FROST_TORCH_CUDA AUTO CACHE STRING "link LibTorch's CUDA libraries from FROST_TORCH_ROOT: AUTO, ON or OFF")
set_property(CACHE FROST_TORCH_CUDA PROPERTY STRINGS AUTO ON OFF)
if(NOT FROST_TORCH_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "FROST_TORCH_CUDA=${FROST_TORCH_CUDA}: expected AUTO, ON or OFF")
endif()
if(NOT EXISTS "${FROST_TORCH_ROOT}/include/ATen/ATen.h")
  message(FATAL_ERROR "FROST_TORCH_ROOT=${FROST_TORCH_ROOT}: no include/ATen/ATen.h there (expected a PyTorch "
                      "install's torch/ folder)")
endif()
foreach(lib torch_cpu c10)
  find_library(FROST_TORCH_LIB_${lib} ${lib} PATHS "${FROST_TORCH_ROOT}/lib" NO_DEFAULT_PATH)
  if(NOT FROST_TORCH_LIB_${lib})
    message(FATAL_ERROR "FROST_TORCH_ROOT=${FROST_TORCH_ROOT}: no lib${lib}.so in lib/")
  endif()
endforeach()
set(_frost_torch_cuda_libs "")
if(NOT FROST_TORCH_CUDA STREQUAL "OFF")
  set(_frost_torch_cuda_missing "")
  foreach(lib torch_cuda c10_cuda)
    find_library(FROST_TORCH_LIB_${lib} ${lib} PATHS "${FROST_TORCH_ROOT}/lib" NO_DEFAULT_PATH)
    if(FROST_TORCH_LIB_${lib})
      list(APPEND _frost_torch_cuda_libs ${FROST_TORCH_LIB_${lib}})
    else()
      list(APPEND _frost_torch_cuda_missing lib${lib}.so)
    endif()
  endforeach()
  if(_frost_torch_cuda_missing)
    if(FROST_TORCH_CUDA STREQUAL "ON")
      list(JOIN _frost_torch_cuda_missing " or " _frost_torch_cuda_missing)
      message(FATAL_ERROR "FROST_TORCH_CUDA=ON but FROST_TORCH_ROOT=${FROST_TORCH_ROOT} has no "
                          "${_frost_torch_cuda_missing} in lib/ (a CPU-only PyTorch? use AUTO or OFF)")
    endif()
    set(_frost_torch_cuda_libs "")  # AUTO: a CPU-only LibTorch
  endif()
endif()
add_library(frost_torch INTERFACE)
target_include_directories(frost_torch SYSTEM INTERFACE "${FROST_TORCH_ROOT}/include"
                                                        "${FROST_TORCH_ROOT}/include/torch/csrc/api/include")
target_link_libraries(frost_torch INTERFACE ${FROST_TORCH_LIB_torch_cpu} ${FROST_TORCH_LIB_c10})
if(_frost_torch_cuda_libs)
  target_link_libraries(frost_torch INTERFACE "-Wl,--push-state,--no-as-needed" ${_frost_torch_cuda_libs}
                                            "-Wl,--pop-state")
  # A wheel's libtorch_cuda finds its CUDA libraries (site-packages/nvidia/*/lib) through its own $ORIGIN
  # RUNPATH at run time; the link step is told those folders too, so that resolving the libraries' own
  # dependencies does not depend on how the linker expands $ORIGIN. (Where our CUDA toolkit has a library of the
  # same soname, one copy is loaded for the process: the executable's own dependency, found first.)
  file(GLOB _frost_nvidia_libdirs LIST_DIRECTORIES true "${FROST_TORCH_ROOT}/../nvidia/*/lib"
       "${FROST_TORCH_ROOT}/../nvidia/*/*/lib")
  foreach(d ${_frost_nvidia_libdirs})
    target_link_options(frost_torch INTERFACE "LINKER:-rpath-link,${d}")
  endforeach()
  set(_frost_torch_what "torch_cpu + c10 + torch_cuda + c10_cuda")
else()
  set(_frost_torch_what "torch_cpu + c10, no CUDA")
endif()
target_compile_definitions(frost_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=${FROST_TORCH_CXX11_ABI})
set(TORCH_LIBRARIES frost_torch)
message(STATUS "frost: LibTorch from ${FROST_TORCH_ROOT} (${_frost_torch_what}, cxx11 ABI ${FROST_TORCH_CXX11_ABI}, "
               "FROST_TORCH_CUDA=${FROST_TORCH_CUDA})")
