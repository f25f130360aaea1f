# CUDA is optional: AUTO enables it when a toolkit is found, OFF never looks,
# ON fails the configure step without one. core never links CUDA; only
# plugins/attention_cuda and the CUDA half of models_llama do.
#
# Two ways to build the CUDA plugins (docs/architecture.md "CUDA emulation"):
#   PAGEDLLM_CUDA_EMULATION=ON (the default, what CI runs): every CUDA source
#     is compiled by the host compiler and linked against
#     libpagedllm_cuda_emulation.so (plugins/lib/cuda_emulation): a SIMT
#     emulator for the kernels, a CUDA runtime and cuBLAS stand-in over host
#     memory, on an emulated cuda:0. Only the toolkit's headers are needed.
#     When nvcc is there too, the .cu files are also compiled by it
#     (pagedllm_cuda_nvcc_check), so the real device code keeps compiling.
#   PAGEDLLM_CUDA_EMULATION=OFF (a GPU machine: tools/gpu/validate.sh): nvcc,
#     cudart and cuBLAS, as shipped.
option(PAGEDLLM_CUDA_EMULATION "Build the CUDA plugins for the CUDA emulator (host compiler, no GPU) instead of nvcc" ON)
set(PAGEDLLM_HAVE_CUDA OFF)
set(PAGEDLLM_CUDA_NVCC OFF)
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
    # One CUDA runtime per process, the toolkit's libcudart.so (CUDA::cudart, which every
    # CUDA target links already). CMake's default, Static, would also link a private
    # cudart_static into each plugin with .cu sources: two runtimes in every CUDA plugin,
    # each with its own state, and a copy per plugin in the host.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    # Targets that link the SDK inherit cxx_std_20, which CMake 3.25 maps to a
    # CUDA20 dialect it has no flag for with nvcc 13: name the flag.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    find_package(CUDAToolkit REQUIRED)
    set(PAGEDLLM_CUDA_NVCC ON)
    set(PAGEDLLM_HAVE_CUDA ON)
  elseif(PAGEDLLM_CUDA_EMULATION)
    find_package(CUDAToolkit QUIET)
    if(CUDAToolkit_FOUND)
      set(PAGEDLLM_HAVE_CUDA ON)
    endif()
  endif()
  if(NOT PAGEDLLM_HAVE_CUDA AND PAGEDLLM_ENABLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "PAGEDLLM_ENABLE_CUDA=ON but no CUDA compiler (or, for the emulation, toolkit headers) was found")
  endif()
endif()
if(PAGEDLLM_HAVE_CUDA AND PAGEDLLM_CUDA_EMULATION)
  message(STATUS "pagedllm: CUDA plugins ON, emulated (host compiler, libpagedllm_cuda_emulation)")
else()
  message(STATUS "pagedllm: CUDA plugins ${PAGEDLLM_HAVE_CUDA}")
endif()

# What an emulated .cu file is compiled with first (-include): the emulator's
# device-side half (plugins/lib/cuda_emulation).
set(PAGEDLLM_CUDA_EMULATION_HEADER
  ${PROJECT_SOURCE_DIR}/plugins/lib/cuda_emulation/include/cuda_emulation/cuda_emulation.h)

# pagedllm_cuda_sources(<target> <sources...>): adds CUDA sources (.cu) to
# <target>: compiled by nvcc, or in the emulated build by the host compiler
# with PAGEDLLM_CUDA_EMULATION_HEADER included first.
# pagedllm_cuda_nvcc_check collects them, and the targets whose include
# directories they need, for nvcc in the emulated build.
set_property(GLOBAL PROPERTY PAGEDLLM_CUDA_CHECK_SOURCES "")
set_property(GLOBAL PROPERTY PAGEDLLM_CUDA_CHECK_TARGETS "")
function(pagedllm_cuda_sources target)
  if(NOT PAGEDLLM_CUDA_EMULATION)
    target_sources(${target} PRIVATE ${ARGN})
    return()
  endif()
  set_property(GLOBAL APPEND PROPERTY PAGEDLLM_CUDA_CHECK_TARGETS ${target})
  foreach(source IN LISTS ARGN)
    get_filename_component(path ${source} ABSOLUTE)
    set_property(GLOBAL APPEND PROPERTY PAGEDLLM_CUDA_CHECK_SOURCES ${path})
    target_sources(${target} PRIVATE ${path})
    set_source_files_properties(${path} PROPERTIES
      LANGUAGE CXX
      COMPILE_OPTIONS "-include;${PAGEDLLM_CUDA_EMULATION_HEADER};-Wno-unknown-pragmas")
  endforeach()
endfunction()

# The CUDA runtime and cuBLAS the CUDA code links: the toolkit's, or the emulator.
function(pagedllm_cuda_link_targets)
  add_library(pagedllm_cudart INTERFACE)
  add_library(pagedllm_cublas INTERFACE)
  if(PAGEDLLM_CUDA_EMULATION)
    target_link_libraries(pagedllm_cudart INTERFACE pagedllm_cuda_emulation)
    target_link_libraries(pagedllm_cublas INTERFACE pagedllm_cuda_emulation)
  else()
    target_link_libraries(pagedllm_cudart INTERFACE CUDA::cudart)
    target_link_libraries(pagedllm_cublas INTERFACE CUDA::cublas)
  endif()
  # What links the runtime may copy device memory (tests reading a model's
  # device outputs, SDK 2.0).
  target_compile_definitions(pagedllm_cudart INTERFACE PAGEDLLM_LINKS_CUDART=1)
endfunction()
