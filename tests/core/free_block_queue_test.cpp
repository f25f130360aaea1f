#include <catch2/catch.hpp>

#include <vector>

#include "core/common/check.h"
#include "core/kv/free_block_queue.h"

using pagedllm::BlockId;
using pagedllm::FreeBlockQueue;
using pagedllm::InternalError;

TEST_CASE("free queue starts with every block in id order", "[free_queue]") {
  FreeBlockQueue queue(4);
  CHECK(queue.size() == 4);
  CHECK(queue.to_vector() == std::vector<BlockId>{0, 1, 2, 3});
  CHECK(queue.pop_front() == 0);
  CHECK(queue.pop_front() == 1);
  CHECK(queue.to_vector() == std::vector<BlockId>{2, 3});
}

TEST_CASE("free queue appends freed blocks at the tail and removes from the middle",
          "[free_queue]") {
  FreeBlockQueue queue(5);
  for (int i = 0; i < 5; ++i) queue.pop_front();
  CHECK(queue.empty());
  queue.push_back(3);
  queue.push_back(1);
  queue.push_back(4);
  queue.push_back(0);
  CHECK(queue.to_vector() == std::vector<BlockId>{3, 1, 4, 0});
  queue.remove(4);  // a prefix-cache hit
  CHECK(queue.to_vector() == std::vector<BlockId>{3, 1, 0});
  queue.remove(3);  // the head
  queue.remove(0);  // the tail
  CHECK(queue.to_vector() == std::vector<BlockId>{1});
  CHECK(queue.contains(1));
  CHECK_FALSE(queue.contains(3));
  CHECK(queue.pop_front() == 1);
  CHECK(queue.empty());
}

TEST_CASE("free queue rejects misuse loudly", "[free_queue]") {
  FreeBlockQueue queue(2);
  CHECK_THROWS_AS(queue.push_back(0), InternalError);  // already free
  CHECK_THROWS_AS(queue.remove(5), InternalError);     // out of range
  queue.pop_front();
  CHECK_THROWS_AS(queue.remove(0), InternalError);  // not queued
  queue.pop_front();
  CHECK_THROWS_AS(queue.pop_front(), InternalError);  // empty
}
