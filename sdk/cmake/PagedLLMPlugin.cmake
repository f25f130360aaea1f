# pagedllm_add_plugin(<name> <sources...>)
#
# Builds a pagedllm plugin: a MODULE library named <name>.so (no "lib" prefix,
# so the file name is the name configs use), linked to PagedLLM::sdk (the C ABI
# and the C++ helpers), or to PagedLLM::sdk_c (the C ABI alone) when every
# source is C. It exports exactly one symbol, the entry point: hidden
# visibility plus a linker version script, so two plugins never share a symbol
# by accident (not even the C++ library's template instances, which could
# otherwise pin a plugin in memory after it is unloaded).
function(pagedllm_add_plugin name)
  add_library(${name} MODULE ${ARGN})
  set(_sdk PagedLLM::sdk_c)
  foreach(_source IN LISTS ARGN)
    if(NOT _source MATCHES "\\.c$")
      set(_sdk PagedLLM::sdk)
    endif()
  endforeach()
  target_link_libraries(${name} PRIVATE ${_sdk})
  set_target_properties(${name} PROPERTIES
    PREFIX ""
    CXX_VISIBILITY_PRESET hidden
    C_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  set(_exports ${CMAKE_CURRENT_BINARY_DIR}/${name}.exports)
  file(WRITE ${_exports} "{ global: pagedllm_plugin_entry; local: *; };\n")
  # Fail at link time, not at load time, on an unresolved symbol.
  target_link_options(${name} PRIVATE -Wl,--no-undefined -Wl,--version-script=${_exports})
  set_property(TARGET ${name} APPEND PROPERTY LINK_DEPENDS ${_exports})
endfunction()
