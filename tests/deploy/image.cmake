# deploy_image: the container image's definition (Dockerfile, .dockerignore, deploy/image/) against the build:
# every shared library of the built frostd and frostctl, and of libfrost_spm.so (which frostd dlopen()s), must
# come from deploy/image/runtime-packages.txt or the packages apt brings with it (ldd + dpkg), and the
# Dockerfile's stages, user, health check, entrypoint, ports (EXPOSE: gRPC, metrics and the image config's HTTP
# port) and volumes must agree with configs/default.yaml
# (tests/deploy/image_test.py; < 1 s, no container engine needed). Building and running the image itself is `make image` (not in CI: ~30 min on 2 cores).
#
# frostd and frostctl are defined after tests/ (server/, client/): the test is registered once the whole
# tree has been read, with a deferred call in the top-level directory, as python_jobs is.
if(FROST_BUILD_SERVER)
  function(frost_add_deploy_image_test)
    if(NOT TARGET frostd OR NOT TARGET frostctl)
      message(STATUS "frost: no frostd/frostctl target, deploy_image test not registered")
      return()
    endif()
    # libfrost_spm.so: the sentencepiece shim frostd dlopen()s (core/model/spm_backend.h); ldd frostd does not
    # show it or what it links, so the test is given it, and checks that the image ships it.
    set(dlopen_args)
    if(TARGET frost_spm)
      set(dlopen_args --dlopen $<TARGET_FILE:frost_spm>)
    endif()
    # A FROST_CUDA build links libcudart and libcublas from the CUDA Toolkit, which no Debian package holds: the
    # image is the CPU build (no nvcc in its builder), so the test leaves that folder's libraries out.
    if(FROST_CUDA AND CUDAToolkit_LIBRARY_DIR)
      list(APPEND dlopen_args --cuda-lib-dir ${CUDAToolkit_LIBRARY_DIR})
    endif()
    add_test(NAME deploy_image
      COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/deploy/image_test.py
        --frostd $<TARGET_FILE:frostd> --frostctl $<TARGET_FILE:frostctl> ${dlopen_args}
        --source-dir ${PROJECT_SOURCE_DIR}
      WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    # 77: no dpkg / ldd on this machine (not a Debian build host): skipped, not passed.
    set_tests_properties(deploy_image PROPERTIES
      LABELS unit
      TIMEOUT 120
      SKIP_RETURN_CODE 77)
  endfunction()
  cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL frost_add_deploy_image_test)
endif()
