# CUDA is optional: AUTO enables it when a toolkit is found, OFF never looks,
# ON fails the configure step without one. core never links CUDA; only
# plugins/attention_cuda and the CUDA half of models_llama do.
set(PAGEDLLM_HAVE_CUDA OFF)
if(NOT PAGEDLLM_ENABLE_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # CMake 3.25 does not know how to pass C++20 to nvcc 13; state it explicitly.
    set(CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS} -std=c++20")
    # A100 (sm_80) and H100/H200 (sm_90a, which also enables Hopper-only
    # instructions). Each architecture is a full device compile of every
    # kernel, so the list is the main lever on CI build time: select others
    # with -DCMAKE_CUDA_ARCHITECTURES=... (e.g. "89" for an L4, "native").
    set(CMAKE_CUDA_ARCHITECTURES "80;90a" CACHE STRING "CUDA architectures the CUDA plugins are compiled for")
    enable_language(CUDA)
    # Targets that link the SDK inherit cxx_std_20, which CMake 3.25 maps to a
    # CUDA20 dialect it has no flag for with nvcc 13: name the flag.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    find_package(CUDAToolkit REQUIRED)
    set(PAGEDLLM_HAVE_CUDA ON)
  elseif(PAGEDLLM_ENABLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "PAGEDLLM_ENABLE_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "pagedllm: CUDA plugins ${PAGEDLLM_HAVE_CUDA}")
