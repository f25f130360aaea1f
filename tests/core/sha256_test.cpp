#include <catch2/catch.hpp>

#include <string>

#include "core/common/sha256.h"

using pagedllm::Sha256;
using pagedllm::sha256;
using pagedllm::to_hex;

// Test vectors from FIPS 180-4 examples (NIST CSRC "SHA256.pdf") and the NIST
// byte-oriented message set.
TEST_CASE("sha256 matches the FIPS 180-4 test vectors", "[sha256]") {
  CHECK(to_hex(sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(to_hex(sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(to_hex(sha256("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                      "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu")) ==
        "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST_CASE("sha256 of one million 'a' characters", "[sha256]") {
  const std::string million(1'000'000, 'a');
  CHECK(to_hex(sha256(million)) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("sha256 gives the same digest however the input is split", "[sha256]") {
  std::string message;
  for (int i = 0; i < 300; ++i) message.push_back(static_cast<char>('a' + i % 26));
  const auto expected = sha256(message);
  // Every split point crosses the 55/56/64-byte padding boundaries at some length.
  for (std::size_t length : {0u, 1u, 55u, 56u, 63u, 64u, 65u, 119u, 120u, 128u, 300u}) {
    const std::string prefix = message.substr(0, length);
    for (std::size_t split = 0; split <= length; split += 7) {
      Sha256 hasher;
      hasher.update(std::string_view(prefix).substr(0, split));
      hasher.update(std::string_view(prefix).substr(split));
      CHECK(hasher.finish() == sha256(prefix));
    }
  }
  Sha256 byte_by_byte;
  for (const char c : message) byte_by_byte.update(std::string_view(&c, 1));
  CHECK(byte_by_byte.finish() == expected);
}
