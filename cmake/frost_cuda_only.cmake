# The GPU machine's build: only the CUDA decoder (kernels/cuda), its tests (tests/gpu) and its benchmark
# (bench/cuda), with no LibTorch, gRPC or Abseil (scripts/gpu_check.sh). GoogleTest from FROST_GTEST_SOURCE
# (a source tree, e.g. /usr/src/googletest carried over) or the system package; nlohmann/json from
# FROST_JSON_INCLUDE or the system package. Included by the top-level CMakeLists.txt, which returns after it.
if(NOT FROST_CUDA)
  message(FATAL_ERROR "FROST_CUDA_ONLY needs -DFROST_CUDA=ON")
endif()
if(FROST_GTEST_SOURCE)
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  add_subdirectory(${FROST_GTEST_SOURCE} ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
else()
  find_package(GTest REQUIRED)
endif()
if(FROST_JSON_INCLUDE)  # the same target name the package defines, so that users link it one way
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  target_include_directories(nlohmann_json::nlohmann_json INTERFACE ${FROST_JSON_INCLUDE})
else()
  find_package(nlohmann_json CONFIG REQUIRED)
endif()
enable_testing()
add_subdirectory(${PROJECT_SOURCE_DIR}/kernels/cuda ${CMAKE_BINARY_DIR}/kernels/cuda)
add_subdirectory(${PROJECT_SOURCE_DIR}/tests/gpu ${CMAKE_BINARY_DIR}/tests/gpu)
add_subdirectory(${PROJECT_SOURCE_DIR}/bench/cuda ${CMAKE_BINARY_DIR}/bench/cuda)
