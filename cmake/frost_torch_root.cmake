# LibTorch from a PyTorch install's torch/ folder (-DFROST_TORCH_ROOT=$(python3 -c 'import torch,os;
# print(os.path.dirname(torch.__file__))')): its CPU libraries and headers, linked directly, instead of
# find_package(Torch). The GPU machine's build (scripts/gpu_check.sh): frost's CUDA decoder uses none of
# LibTorch's CUDA parts (the host side needs LibTorch for loading and the CPU paths only), and TorchConfig's
# CUDA / cuDNN discovery would only add ways for the build to fail there. Sets TORCH_LIBRARIES.
#
# FROST_TORCH_CXX11_ABI: the C++ ABI LibTorch was built with (torch.compiled_with_cxx11_abi(); PyTorch wheels
# are cxx11 since 2.7), which every translation unit that includes its headers must share.
set(FROST_TORCH_CXX11_ABI 1 CACHE STRING "_GLIBCXX_USE_CXX11_ABI of the LibTorch in FROST_TORCH_ROOT")
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
add_library(frost_torch INTERFACE)
target_include_directories(frost_torch SYSTEM INTERFACE "${FROST_TORCH_ROOT}/include"
                                                        "${FROST_TORCH_ROOT}/include/torch/csrc/api/include")
target_link_libraries(frost_torch INTERFACE ${FROST_TORCH_LIB_torch_cpu} ${FROST_TORCH_LIB_c10})
target_compile_definitions(frost_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=${FROST_TORCH_CXX11_ABI})
set(TORCH_LIBRARIES frost_torch)
message(STATUS "frost: LibTorch from ${FROST_TORCH_ROOT} (torch_cpu + c10, cxx11 ABI ${FROST_TORCH_CXX11_ABI})")
