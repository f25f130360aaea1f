# cmake -DSOURCE_DIR=<repository> -P check_plugin_includes.cmake
#
# The #include half of the plugin include boundary (docs/architecture.md
# "Layout"; the include directories are checked when the build is configured):
# - a file of plugins/ includes the SDK ("pagedllm/..."), a library's header
#   ("<library>/x.h"), its own directory's files or the system's, never
#   "core/", "tools/", "tests/", "plugins/" or a path climbing out with "../";
# - no file of core/, sdk/, tools/, tests/ or examples/ includes "plugins/...":
#   a test or tool reaches a plugin's internals through <plugin>_internals and
#   a library through its target.
# Fails with every offending file and line.
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "usage: cmake -DSOURCE_DIR=<repository> -P check_plugin_includes.cmake")
endif()
set(_extensions c cc cpp h hpp cu cuh inc)
set(_violations "")

# _pagedllm_check_includes(<regex> <why> <directories...>)
function(_pagedllm_check_includes regex why)
  set(_globs "")
  foreach(_directory IN LISTS ARGN)
    foreach(_extension IN LISTS _extensions)
      list(APPEND _globs ${SOURCE_DIR}/${_directory}/*.${_extension})
    endforeach()
  endforeach()
  file(GLOB_RECURSE _files ${_globs})
  foreach(_file IN LISTS _files)
    file(STRINGS ${_file} _lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]")
    foreach(_line IN LISTS _lines)
      if(_line MATCHES "${regex}")
        file(RELATIVE_PATH _relative ${SOURCE_DIR} ${_file})
        list(APPEND _violations "${_relative}: ${_line}  (${why})")
      endif()
    endforeach()
  endforeach()
  set(_violations ${_violations} PARENT_SCOPE)
endfunction()

_pagedllm_check_includes("include[ \t]*[\"<](core|tools|tests|plugins)/|include[ \t]*[\"<]\\.\\./"
  "a plugin or plugin library includes only the SDK, its libraries and its own files" plugins)
_pagedllm_check_includes("include[ \t]*[\"<]plugins/"
  "reach a plugin through <plugin>_internals, a library as <library>/x.h through its target"
  core sdk tools tests examples)

if(_violations)
  list(LENGTH _violations _count)
  list(JOIN _violations "\n  " _report)
  message(FATAL_ERROR "${_count} #include line(s) cross the plugin include boundary:\n  ${_report}")
endif()
message(STATUS "plugin include boundaries: no #include crosses them")
