# The layers of core/, checked from the #include lines of every file in it (ctest core_include_layers):
# each directory includes only itself and the directories listed for it, so the dependency graph
# stays {host, router} -> server -> engine -> {scheduler, plugin, tokenizer} -> ... and never points up
# (the engine never includes core/host or core/server). core/ includes nothing from plugins/,
# tools/ or tests/. The libraries link the same way (core/*/CMakeLists.txt); this catches an
# include that would compile anyway, since every target sees the repository root.
#
#   cmake -DCORE_DIR=<repo>/core -P include_layers.cmake

cmake_minimum_required(VERSION 3.20)

set(allowed_common "")
set(allowed_tokenizer common)
set(allowed_config common)
set(allowed_kv common config)
set(allowed_plugin common config)
set(allowed_scheduler common config kv)
set(allowed_engine common config kv plugin scheduler tokenizer)
set(allowed_server common config kv plugin scheduler tokenizer engine)
set(allowed_host common config kv plugin scheduler tokenizer engine server)
# pagedllm-router: the host's request parsing and error shapes (server), its tokenizer and block hashes; no engine.
set(allowed_router common config kv tokenizer server)

if(NOT IS_DIRECTORY "${CORE_DIR}")
  message(FATAL_ERROR "CORE_DIR='${CORE_DIR}' is not a directory")
endif()

file(GLOB layers LIST_DIRECTORIES true RELATIVE "${CORE_DIR}" "${CORE_DIR}/*")
set(violations "")
foreach(layer IN LISTS layers)
  if(NOT IS_DIRECTORY "${CORE_DIR}/${layer}")
    continue()
  endif()
  if(NOT DEFINED allowed_${layer})
    string(APPEND violations "\n  core/${layer}/ has no entry in the layer table of ${CMAKE_CURRENT_LIST_FILE}")
    continue()
  endif()
  file(GLOB_RECURSE files RELATIVE "${CORE_DIR}" "${CORE_DIR}/${layer}/*.h" "${CORE_DIR}/${layer}/*.cpp"
       "${CORE_DIR}/${layer}/*.inc")
  foreach(file IN LISTS files)
    file(STRINGS "${CORE_DIR}/${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\".*" "\\1" included "${line}")
      if(included MATCHES "^(plugins|tools|tests)/")
        string(APPEND violations "\n  core/${file} includes \"${included}\" (core includes nothing outside core/ "
               "and the SDK)")
      elseif(included MATCHES "^core/([^/]+)/")
        set(target "${CMAKE_MATCH_1}")
        if(NOT target STREQUAL layer AND NOT target IN_LIST allowed_${layer})
          string(APPEND violations "\n  core/${file} includes \"${included}\": core/${layer}/ may include only "
                 "core/{${layer};${allowed_${layer}}}")
        endif()
      endif()
    endforeach()
  endforeach()
endforeach()

if(violations)
  message(FATAL_ERROR "include across core's layers:${violations}")
endif()
message(STATUS "core/: every #include stays within its layer's dependencies")
