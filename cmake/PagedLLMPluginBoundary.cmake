# The include boundary of plugins/ (docs/architecture.md "Layout"), checked when
# the build is configured: a plugin sees the SDK, its own directory and the
# include/ directory of each library it links; a library sees the SDK, its own
# include/ and those of the libraries it links. Any other directory of the
# source tree (the repository root, plugins/, core/, another plugin's
# directory) on a target of plugins/, directly or through what it links, fails
# the configure step and names the target and the library that brought it.

# pagedllm_check_plugin_include_boundary(<target>): <target>'s own include
# directories and the INTERFACE ones of everything it links, transitively; the
# one plugin directory allowed is <target>'s own.
function(pagedllm_check_plugin_include_boundary target)
  get_target_property(_own_directory ${target} SOURCE_DIR)
  set(_pending ${target})
  set(_seen "")
  while(_pending)
    list(POP_FRONT _pending _current)
    if(_current IN_LIST _seen OR NOT TARGET ${_current})
      continue()
    endif()
    list(APPEND _seen ${_current})
    get_target_property(_aliased ${_current} ALIASED_TARGET)
    if(_aliased)
      list(APPEND _pending ${_aliased})
      continue()
    endif()
    set(_properties INTERFACE_INCLUDE_DIRECTORIES INTERFACE_LINK_LIBRARIES)
    if(_current STREQUAL target)
      list(APPEND _properties INCLUDE_DIRECTORIES LINK_LIBRARIES)
    endif()
    set(_dirs "")
    set(_links "")
    foreach(_property IN LISTS _properties)
      get_target_property(_values ${_current} ${_property})
      if(NOT _values)
        continue()
      endif()
      if(_property MATCHES "INCLUDE_DIRECTORIES$")
        list(APPEND _dirs ${_values})
      else()
        list(APPEND _links ${_values})
      endif()
    endforeach()
    foreach(_dir IN LISTS _dirs)
      # What the build tree compiles with; the install tree's paths are the SDK's own.
      if(_dir MATCHES "^\\$<INSTALL_INTERFACE:")
        continue()
      endif()
      string(REGEX REPLACE "^\\$<BUILD_INTERFACE:(.*)>$" "\\1" _dir "${_dir}")
      cmake_path(IS_PREFIX PROJECT_SOURCE_DIR "${_dir}" NORMALIZE _in_source)
      cmake_path(IS_PREFIX PROJECT_BINARY_DIR "${_dir}" NORMALIZE _in_binary)
      if(NOT _in_source OR _in_binary)
        continue()
      endif()
      file(RELATIVE_PATH _relative ${PROJECT_SOURCE_DIR} ${_dir})
      # .deps/: third-party sources scripts/setup.sh unpacks (xgrammar), outside the project like /usr/include.
      if(NOT _relative MATCHES "^(sdk/include|plugins/lib/[^/]+/include|\\.deps/.*)$"
         AND NOT _dir STREQUAL _own_directory)
        message(FATAL_ERROR "${target}: include directory '${_dir}' (from ${_current}) is outside the plugin "
          "include boundary: a plugin sees the SDK, its own directory and the include/ of each library it links "
          "(docs/architecture.md \"Layout\")")
      endif()
    endforeach()
    foreach(_link IN LISTS _links)
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" _link "${_link}")
      if(NOT _link MATCHES "^\\$<")
        list(APPEND _pending ${_link})
      endif()
    endforeach()
  endwhile()
endfunction()

# pagedllm_check_plugin_include_boundaries(<directory>): every target defined in
# <directory> and below, except the nvcc compile check (it borrows its sources'
# targets' include directories).
function(pagedllm_check_plugin_include_boundaries directory)
  get_property(_targets DIRECTORY ${directory} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(_target IN LISTS _targets)
    if(NOT _target STREQUAL "pagedllm_cuda_nvcc_check")
      pagedllm_check_plugin_include_boundary(${_target})
    endif()
  endforeach()
  get_property(_subdirectories DIRECTORY ${directory} PROPERTY SUBDIRECTORIES)
  foreach(_subdirectory IN LISTS _subdirectories)
    pagedllm_check_plugin_include_boundaries(${_subdirectory})
  endforeach()
endfunction()
