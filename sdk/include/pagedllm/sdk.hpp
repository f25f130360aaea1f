#pragma once
// The pagedllm plugin SDK for C++ plugin authors: the C ABI plus header-only
// helpers. See sdk/README.md. The HF checkpoint reader is included separately:
// pagedllm/sdk/cpp/safetensors.hpp.

#include "pagedllm/sdk.h"
#include "pagedllm/sdk/cpp/error.hpp"
#include "pagedllm/sdk/cpp/float_convert.hpp"
#include "pagedllm/sdk/cpp/host.hpp"
#include "pagedllm/sdk/cpp/options.hpp"
#include "pagedllm/sdk/cpp/plugin.hpp"
#include "pagedllm/sdk/cpp/struct_check.hpp"
#include "pagedllm/sdk/cpp/suggest.hpp"
