# xgrammar's C++ core (the grammar engine of plugins/constraint_xgrammar), built from the PyPI
# source distribution that scripts/setup.sh fetches, checks (sha256) and unpacks into .deps/.
#
# An ExternalProject rather than add_subdirectory: xgrammar sets its own flags (-O3 -Werror
# -flto=auto) on CMAKE_CXX_FLAGS, which must not reach our targets, and ours (warnings, the
# sanitizers) must not reach it. It is built the same way in every build tree (Release, no
# sanitizer, LTO off so that the static library links into a plugin without the LTO plugin), so the
# ASan and TSan trees of scripts/test.sh compile the same command lines from the same sources in
# .deps/ and ccache serves them. Its Python bindings (which need tvm_ffi) are switched off through a
# config.cmake in its build directory, which its CMakeLists.txt reads before cmake/config.cmake.
#
# Provides the imported target xgrammar::xgrammar, or nothing when PAGEDLLM_XGRAMMAR is OFF (then
# the constraint_xgrammar plugin is not built and structured-output requests are refused with 400).
option(PAGEDLLM_XGRAMMAR "Build the xgrammar constraint plugin (structured output; needs scripts/setup.sh's .deps/)" ON)
set(PAGEDLLM_XGRAMMAR_VERSION 0.2.8)
if(NOT PAGEDLLM_XGRAMMAR)
  return()
endif()

set(xgrammar_source_dir ${PROJECT_SOURCE_DIR}/.deps/xgrammar-${PAGEDLLM_XGRAMMAR_VERSION})
if(NOT EXISTS ${xgrammar_source_dir}/.sha256-verified)
  message(FATAL_ERROR "xgrammar ${PAGEDLLM_XGRAMMAR_VERSION}'s sources are not in ${xgrammar_source_dir}: run "
    "scripts/setup.sh (it downloads and checks them), or configure with -DPAGEDLLM_XGRAMMAR=OFF")
endif()

include(ExternalProject)
set(xgrammar_binary_dir ${PROJECT_BINARY_DIR}/xgrammar)
set(xgrammar_library ${xgrammar_binary_dir}/${CMAKE_STATIC_LIBRARY_PREFIX}xgrammar${CMAKE_STATIC_LIBRARY_SUFFIX})
file(MAKE_DIRECTORY ${xgrammar_binary_dir})
file(WRITE ${xgrammar_binary_dir}/config.cmake
  "# Written by pagedllm's cmake/PagedLLMXgrammar.cmake: the C++ core only.\n"
  "set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)\n"
  "set(XGRAMMAR_BUILD_CXX_TESTS OFF)\n"
  "set(XGRAMMAR_ENABLE_CPPTRACE OFF)\n"
  "set(XGRAMMAR_ENABLE_COVERAGE OFF)\n"
  "set(XGRAMMAR_ENABLE_INTERNAL_CHECK OFF)\n")
ExternalProject_Add(xgrammar_build
  SOURCE_DIR ${xgrammar_source_dir}
  BINARY_DIR ${xgrammar_binary_dir}
  CMAKE_GENERATOR ${CMAKE_GENERATOR}
  CMAKE_ARGS
    -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
    -DCMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER}
    # After its -flto=auto on the command line: a plain static library that links anywhere.
    -DCMAKE_CXX_FLAGS=-fno-lto
  BUILD_COMMAND ${CMAKE_COMMAND} --build ${xgrammar_binary_dir} --target xgrammar
  INSTALL_COMMAND ""
  BUILD_BYPRODUCTS ${xgrammar_library}
  # The sources do not change (a pinned, checked sdist): no update step, no re-run on every build.
  UPDATE_COMMAND ""
  USES_TERMINAL_BUILD ON)

add_library(xgrammar::xgrammar STATIC IMPORTED GLOBAL)
set_target_properties(xgrammar::xgrammar PROPERTIES IMPORTED_LOCATION ${xgrammar_library})
# SYSTEM: our -Werror warnings stay out of its headers.
target_include_directories(xgrammar::xgrammar SYSTEM INTERFACE ${xgrammar_source_dir}/include
  ${xgrammar_source_dir}/3rdparty/dlpack/include)
target_compile_definitions(xgrammar::xgrammar INTERFACE XGRAMMAR_ENABLE_CPPTRACE=0 XGRAMMAR_ENABLE_INTERNAL_CHECK=0)
add_dependencies(xgrammar::xgrammar xgrammar_build)
