#pragma once

#include <compare>
#include <string>

#include "pagedllm/sdk/version.h"

namespace pagedllm {

struct SdkVersion {
  int major = PLLM_SDK_VERSION_MAJOR;
  int minor = PLLM_SDK_VERSION_MINOR;

  auto operator<=>(const SdkVersion&) const = default;
  std::string str() const { return std::to_string(major) + "." + std::to_string(minor); }
};

// The SDK version this host implements.
inline constexpr SdkVersion kHostSdkVersion{};

}  // namespace pagedllm
