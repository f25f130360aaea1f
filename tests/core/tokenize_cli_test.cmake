# Runs pagedllm-tokenize on each fixture: encode a text, decode the ids back,
# and check the exit status for bad usage and bad input.
# Variables: TOOL (the executable), FIXTURES (tests/fixtures/tokenizer), WORK_DIR.
file(MAKE_DIRECTORY ${WORK_DIR})
set(text "Hello world, I'm a prompt: 你好 🙂\n  def f(x): return x\n")
file(WRITE ${WORK_DIR}/input.txt "${text}")

foreach(fixture spm_llama2 bytelevel_gpt2 bytelevel_llama3)
  execute_process(COMMAND ${TOOL} --tokenizer ${FIXTURES}/${fixture}
    INPUT_FILE ${WORK_DIR}/input.txt OUTPUT_FILE ${WORK_DIR}/ids.json RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${fixture}: encode exited with ${status}")
  endif()
  file(READ ${WORK_DIR}/ids.json ids)
  if(NOT ids MATCHES "^\\[[0-9,]+\\]\n$")
    message(FATAL_ERROR "${fixture}: encode printed '${ids}', expected a JSON array of ids")
  endif()
  execute_process(COMMAND ${TOOL} --tokenizer ${FIXTURES}/${fixture} --decode --no-special
    INPUT_FILE ${WORK_DIR}/ids.json OUTPUT_VARIABLE decoded RESULT_VARIABLE status)
  if(NOT status EQUAL 0 OR NOT decoded STREQUAL text)
    message(FATAL_ERROR "${fixture}: decode exited with ${status} and printed '${decoded}'")
  endif()
  # The model directory and its tokenizer.json give the same ids without BOS handling differences
  # only when --no-special is used.
  execute_process(COMMAND ${TOOL} --tokenizer ${FIXTURES}/${fixture}/tokenizer.json --no-special
    INPUT_FILE ${WORK_DIR}/input.txt OUTPUT_VARIABLE file_ids RESULT_VARIABLE status)
  execute_process(COMMAND ${TOOL} --tokenizer ${FIXTURES}/${fixture} --no-special
    INPUT_FILE ${WORK_DIR}/input.txt OUTPUT_VARIABLE dir_ids)
  if(NOT status EQUAL 0 OR NOT file_ids STREQUAL dir_ids)
    message(FATAL_ERROR "${fixture}: tokenizer.json and directory disagree: ${file_ids} vs ${dir_ids}")
  endif()
endforeach()

function(expect_exit expected input)
  file(WRITE ${WORK_DIR}/bad_input.txt "${input}")
  execute_process(COMMAND ${TOOL} ${ARGN} INPUT_FILE ${WORK_DIR}/bad_input.txt
    RESULT_VARIABLE status ERROR_VARIABLE error OUTPUT_QUIET)
  if(NOT status EQUAL expected OR error STREQUAL "")
    message(FATAL_ERROR "'${ARGN}' exited with ${status} (expected ${expected}), stderr: '${error}'")
  endif()
endfunction()

set(llama ${FIXTURES}/bytelevel_llama3)
expect_exit(2 "hello")                                          # no --tokenizer
expect_exit(2 "hello" --tokenizer ${llama} --bogus)
expect_exit(2 "hello" --tokenizer ${WORK_DIR}/missing.json)
expect_exit(2 "[1, 2" --tokenizer ${llama} --decode)
expect_exit(2 "[1, -2]" --tokenizer ${llama} --decode)
expect_exit(2 "{}" --tokenizer ${llama} --decode)
file(WRITE ${WORK_DIR}/broken.json "{\"model\": {\"type\": \"BPE\", \"vocab\": {}}}")
expect_exit(2 "hello" --tokenizer ${WORK_DIR}/broken.json)
# Invalid UTF-8 on stdin: a lone 0xFF byte.
string(ASCII 255 invalid_byte)
expect_exit(2 "ab${invalid_byte}" --tokenizer ${llama})
