#pragma once
// The project's Python (.venv/bin/python, made by scripts/setup.sh from requirements.txt),
// which every oracle and generator the C++ tests run uses. A missing interpreter or
// package fails the test that needs it: these tests never skip.

#include <catch2/catch.hpp>

#include <string>

#include "tests/support/run_command.h"

namespace pagedllm::testing {

inline constexpr const char* kPython = PAGEDLLM_PYTHON;
// The same with transformers 5 instead of 4.57.1 (requirements-transformers5.txt).
inline constexpr const char* kPythonTransformers5 = PAGEDLLM_PYTHON_TRANSFORMERS5;

// Fails the running test case unless `python` (the project's Python by default) imports every
// module listed (space- or comma-separated, as an import statement takes them).
inline void require_python_modules(const std::string& modules, const char* python = kPython) {
  static std::string checked;
  const std::string key = std::string(python) + ": " + modules;
  if (checked == key) return;
  const auto r = run_command(std::string(python) + " -c 'import " + modules + "'");
  if (r.exit_code != 0) {
    FAIL(python << " cannot import " << modules << " (run scripts/setup.sh): " << r.err);
  }
  checked = key;
}

}  // namespace pagedllm::testing
