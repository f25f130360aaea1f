#pragma once
// The project's Python (.venv/bin/python, made by scripts/setup.sh from requirements.txt),
// which every oracle and generator the C++ tests run uses. A missing interpreter or
// package fails the test that needs it: these tests never skip.

#include <catch2/catch.hpp>

#include <string>

#include "tests/support/run_command.h"

namespace pagedllm::testing {

inline constexpr const char* kPython = PAGEDLLM_PYTHON;

// Fails the running test case unless the project's Python imports every module listed
// (space- or comma-separated, as an import statement takes them).
inline void require_python_modules(const std::string& modules) {
  static std::string checked;
  if (checked == modules) return;
  const auto r = run_command(std::string(kPython) + " -c 'import " + modules + "'");
  if (r.exit_code != 0) {
    FAIL(kPython << " cannot import " << modules << " (run scripts/setup.sh): " << r.err);
  }
  checked = modules;
}

}  // namespace pagedllm::testing
