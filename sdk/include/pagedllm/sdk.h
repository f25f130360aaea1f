#ifndef PAGEDLLM_SDK_H
#define PAGEDLLM_SDK_H

/* The pagedllm plugin SDK: the C ABI between the host and its plugins.
 * C++ plugin authors include "pagedllm/sdk.hpp" instead. */

#include "pagedllm/sdk/attention.h"
#include "pagedllm/sdk/batch.h"
#include "pagedllm/sdk/collectives.h"
#include "pagedllm/sdk/constraint.h"
#include "pagedllm/sdk/host.h"
#include "pagedllm/sdk/model.h"
#include "pagedllm/sdk/plugin.h"
#include "pagedllm/sdk/sampler.h"
#include "pagedllm/sdk/speculator.h"
#include "pagedllm/sdk/status.h"
#include "pagedllm/sdk/tensor.h"
#include "pagedllm/sdk/version.h"

#endif
