#include "llama_common/rope_freq.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace pagedllm::llama {

namespace {

std::vector<double> unscaled_inv_freq(double theta, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  std::vector<double> inv_freq(static_cast<std::size_t>(half));
  for (int64_t i = 0; i < half; ++i) inv_freq[std::size_t(i)] = 1.0 / std::pow(theta, double(2 * i) / double(head_dim));
  return inv_freq;
}

}  // namespace

std::vector<double> local_rope_inv_freq(const LlamaConfig& config) {
  return unscaled_inv_freq(config.local_rope_theta, config.head_dim);
}

std::vector<double> rope_inv_freq(const LlamaConfig& config) {
  std::vector<double> inv_freq = unscaled_inv_freq(config.rope_theta, config.head_dim);
  const RopeScaling& s = config.rope_scaling;
  switch (s.type) {
    case RopeScaling::Type::kNone:
      break;
    case RopeScaling::Type::kLinear:
      for (double& f : inv_freq) f /= s.factor;
      break;
    case RopeScaling::Type::kFactors:
      for (std::size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] /= s.freq_factors[i];
      break;
    case RopeScaling::Type::kLongRope: {
      const std::vector<double>& factors =
          config.max_position_embeddings > s.original_max_position_embeddings ? s.long_factor : s.short_factor;
      for (std::size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] /= factors[i];
      break;
    }
    case RopeScaling::Type::kYarn: {
      // transformers' _compute_yarn_parameters: the pair index at which a frequency turns `rotations` times
      // over the original context bounds a linear ramp; below `low` a frequency is kept (extrapolated), above
      // `high` divided by the factor (interpolated), in between blended. transformers clamps `high` to
      // head_dim - 1, not head_dim / 2 - 1; kept, as the ramp past the last pair is never read.
      const double dim = double(config.head_dim);
      const auto correction_dim = [&](double rotations) {
        return dim * std::log(s.original_max_position_embeddings / (rotations * 2.0 * std::numbers::pi)) /
               (2.0 * std::log(config.rope_theta));
      };
      double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
      if (s.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, dim - 1.0);
      if (low == high) high += 0.001;
      for (std::size_t i = 0; i < inv_freq.size(); ++i) {
        const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
        const double extrapolation = 1.0 - ramp;
        inv_freq[i] = inv_freq[i] / s.factor * (1.0 - extrapolation) + inv_freq[i] * extrapolation;
      }
      break;
    }
    case RopeScaling::Type::kLlama3: {
      const double low_freq_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
      const double high_freq_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
      for (double& f : inv_freq) {
        const double wavelen = 2.0 * std::numbers::pi / f;
        if (wavelen > low_freq_wavelen) {
          f /= s.factor;
        } else if (wavelen >= high_freq_wavelen) {
          const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                                (s.high_freq_factor - s.low_freq_factor);
          f = (1.0 - smooth) * f / s.factor + smooth * f;
        }
      }
      break;
    }
  }
  return inv_freq;
}

}  // namespace pagedllm::llama
