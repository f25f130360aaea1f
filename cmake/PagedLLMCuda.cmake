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
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(PAGEDLLM_HAVE_CUDA ON)
  elseif(PAGEDLLM_ENABLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "PAGEDLLM_ENABLE_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "pagedllm: CUDA plugins ${PAGEDLLM_HAVE_CUDA}")
