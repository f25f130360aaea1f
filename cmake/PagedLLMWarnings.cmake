# pagedllm_target_warnings(<target>): the project's warning set, applied per
# target so third-party headers (included as SYSTEM) stay quiet.
function(pagedllm_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wcast-align -Wimplicit-fallthrough -Wswitch-enum>
    $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor -Woverloaded-virtual>
    $<$<AND:$<BOOL:${PAGEDLLM_WERROR}>,$<COMPILE_LANGUAGE:C,CXX>>:-Werror>)
endfunction()
