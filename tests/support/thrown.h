#pragma once
// The exception a call must throw, returned so the test can check what it
// says: the error_of / call_error helpers of the tests are this.

#include <catch2/catch.hpp>

#include <stdexcept>

namespace pagedllm::testing {

// The E that `call()` throws. Throwing nothing fails the test; an exception
// of another type propagates and fails it too.
template <class E, class Call>
E thrown(Call&& call) {
  try {
    call();
  } catch (const E& e) {
    return e;
  }
  FAIL("expected the call to throw");
  throw std::logic_error("unreachable: FAIL throws");
}

}  // namespace pagedllm::testing
