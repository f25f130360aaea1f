/* example_c_sampler: a greedy sampler written against the bare C ABI
 * (pagedllm/sdk.h), without the C++ helpers. It shows what PAGEDLLM_PLUGIN
 * does for a C++ plugin: fill a pllm_plugin_descriptor and the kind's function
 * table, export pagedllm_plugin_entry, validate options, and report every
 * failure as a status plus a message in the caller's pllm_error.
 *
 * It samples greedily (the argmax, ties: the lowest id) and reports the raw
 * log-probability of each token and the best alternatives a request asks for.
 * A request with temperature > 0 or a penalty is refused (PLLM_ERROR_UNSUPPORTED),
 * never silently sampled another way. A row whose logits hold a NaN or +inf, or
 * are all -inf, is flagged PLLM_SAMPLE_NON_FINITE_LOGITS in row_status (token -1)
 * and the other rows are sampled; without row_status the call fails.
 * Options: none ({}). */

#include <math.h>
#include <pagedllm/sdk.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The sampler keeps no state; the handle exists because the ABI hands one back. */
struct pllm_sampler {
  int unused;
};

static pllm_status fail(pllm_error* error, pllm_status status, const char* format, ...) {
  if (error) {
    va_list args;
    va_start(args, format);
    vsnprintf(error->message, sizeof(error->message), format, args);
    va_end(args);
  }
  return status;
}

static pllm_status c_create(const pllm_sampler_create_args* args, pllm_sampler** out, pllm_error* error) {
  static struct pllm_sampler the_sampler;
  if (!args || !out) return fail(error, PLLM_ERROR_INVALID_ARGUMENT, "create: null arguments");
  if (args->device.type != PLLM_DEVICE_CPU) {
    return fail(error, PLLM_ERROR_UNSUPPORTED, "example_c_sampler runs on the CPU only");
  }
  *out = &the_sampler;
  return PLLM_OK;
}

static void c_destroy(pllm_sampler* self) { (void)self; }

static const pllm_sample_row* row_at(const pllm_sample_batch* batch, int32_t r) {
  return (const pllm_sample_row*)((const char*)batch->rows + (int64_t)r * batch->row_stride);
}

/* Nonzero when a row's logits are usable: no NaN, no +inf, and one value above -inf. */
static int finite_row(const float* x, int64_t vocab) {
  int64_t i;
  int any_finite = 0;
  for (i = 0; i < vocab; ++i) {
    if (isnan(x[i]) || (isinf(x[i]) && x[i] > 0)) return 0;
    if (isfinite(x[i])) any_finite = 1;
  }
  return any_finite;
}

static pllm_status c_sample(pllm_sampler* self, const pllm_sample_batch* batch, pllm_sample_output* out,
                            pllm_error* error) {
  const pllm_tensor* logits;
  int64_t vocab;
  int32_t r;
  (void)self;
  /* Every struct another party filled is checked with PLLM_HAS_FIELD before a field is read:
   * here the last field SDK 2.0 gave each one (the rule in sdk/README.md, "Versioning rules"). */
  if (!batch || !out || !PLLM_HAS_FIELD(pllm_sample_batch, batch, logits) ||
      !PLLM_HAS_FIELD(pllm_sample_output, out, row_status)) {
    return fail(error, PLLM_ERROR_INVALID_ARGUMENT, "null batch or output, or one without the SDK 2.0 fields");
  }
  /* The logits are held by pointer: [num_logits_rows, vocab], each sample row names its logits_row. */
  logits = batch->logits;
  if (!logits || !PLLM_HAS_FIELD(pllm_tensor, logits, strides)) {
    return fail(error, PLLM_ERROR_INVALID_ARGUMENT, "null logits, or a tensor without the SDK 2.0 fields");
  }
  if (logits->dtype != PLLM_DTYPE_F32 || logits->device.type != PLLM_DEVICE_CPU || logits->ndim != 2 ||
      logits->shape[1] <= 0 || logits->strides[1] != 1 || logits->strides[0] < logits->shape[1]) {
    return fail(error, PLLM_ERROR_UNSUPPORTED, "logits must be a CPU f32 [num_logits_rows, vocab] tensor");
  }
  vocab = logits->shape[1];
  if (batch->num_rows > 0 && (!logits->data || !batch->rows || !out->token_ids)) {
    return fail(error, PLLM_ERROR_INVALID_ARGUMENT, "null logits, rows or token_ids");
  }
  if (out->max_top_logprobs < 0 || (out->max_top_logprobs > 0 && (!out->top_token_ids || !out->top_logprobs))) {
    return fail(error, PLLM_ERROR_INVALID_ARGUMENT, "bad max_top_logprobs, or null top_token_ids or top_logprobs");
  }
  if (batch->num_rows > 0 && batch->row_stride < sizeof(pllm_sample_row)) {
    return fail(error, PLLM_ERROR_INVALID_ARGUMENT, "row_stride %u is smaller than a row", (unsigned)batch->row_stride);
  }
  for (r = 0; r < batch->num_rows; ++r) {
    const pllm_sample_row* row = row_at(batch, r);
    const float* x;
    int32_t* top_ids = out->max_top_logprobs > 0 ? out->top_token_ids + (int64_t)r * out->max_top_logprobs : NULL;
    float* top_logprobs = out->max_top_logprobs > 0 ? out->top_logprobs + (int64_t)r * out->max_top_logprobs : NULL;
    int64_t i, best = 0;
    int32_t j;
    double sum = 0.0, lse;
    if (!PLLM_HAS_FIELD(pllm_sample_row, row, logits_row) || !row->params) {
      return fail(error, PLLM_ERROR_INVALID_ARGUMENT, "row %d: null params, or a row without the SDK 2.0 fields",
                  (int)r);
    }
    if (row->logits_row < 0 || row->logits_row >= logits->shape[0]) {
      return fail(error, PLLM_ERROR_INVALID_ARGUMENT, "row %d: logits_row %d is outside the logits' %lld rows",
                  (int)r, (int)row->logits_row, (long long)logits->shape[0]);
    }
    if (row->params->temperature >= 1e-5f) {
      return fail(error, PLLM_ERROR_UNSUPPORTED,
                  "row %d: temperature %g: example_c_sampler samples greedily only (temperature 0)", (int)r,
                  (double)row->params->temperature);
    }
    /* sampler.h: every parameter must be honoured; what this sampler cannot do, it refuses. */
    if (row->params->repetition_penalty != 1.0f || row->params->frequency_penalty != 0.0f ||
        row->params->presence_penalty != 0.0f) {
      return fail(error, PLLM_ERROR_UNSUPPORTED,
                  "row %d: example_c_sampler applies no repetition, frequency or presence penalty", (int)r);
    }
    if (PLLM_HAS_FIELD(pllm_sample_row, row, scored_token_id) && (row->flags & PLLM_SAMPLE_ROW_SCORE)) {
      return fail(error, PLLM_ERROR_UNSUPPORTED, "row %d: example_c_sampler does not score given tokens", (int)r);
    }
    if (PLLM_HAS_FIELD(pllm_sampling_params, row->params, min_tokens_banned_ids) &&
        (row->params->num_logit_bias > 0 || row->params->min_tokens > 0)) {
      return fail(error, PLLM_ERROR_UNSUPPORTED, "row %d: example_c_sampler applies no logit_bias or min_tokens",
                  (int)r);
    }
    x = (const float*)logits->data + row->logits_row * logits->strides[0];
    if (!finite_row(x, vocab)) {
      /* A model fault: with row_status the row is flagged and the others are sampled. */
      if (!out->row_status) {
        return fail(error, PLLM_ERROR_INVALID_ARGUMENT, "row %d: logits contain NaN or +inf, or are all -inf",
                    (int)r);
      }
      out->row_status[r] = PLLM_SAMPLE_NON_FINITE_LOGITS;
      out->token_ids[r] = -1;
      if (out->logprobs) out->logprobs[r] = -INFINITY;
      for (j = 0; j < out->max_top_logprobs; ++j) {
        top_ids[j] = -1;
        top_logprobs[j] = -INFINITY;
      }
      continue;
    }
    if (out->row_status) out->row_status[r] = PLLM_SAMPLE_OK;
    for (i = 1; i < vocab; ++i) {
      if (x[i] > x[best]) best = i; /* strict: ties keep the lowest id */
    }
    for (i = 0; i < vocab; ++i) sum += exp((double)x[i] - (double)x[best]);
    lse = (double)x[best] + log(sum);
    out->token_ids[r] = (int32_t)best;
    if (out->logprobs) out->logprobs[r] = (float)((double)x[best] - lse);
    if (out->max_top_logprobs > 0) {
      /* The n best by (logit desc, id asc): n passes, each taking the best not yet taken. */
      int32_t n =
          row->params->num_top_logprobs < out->max_top_logprobs ? row->params->num_top_logprobs : out->max_top_logprobs;
      if (n > vocab) n = (int32_t)vocab;
      for (j = 0; j < out->max_top_logprobs; ++j) {
        int64_t pick = -1;
        if (j < n) {
          for (i = 0; i < vocab; ++i) {
            int32_t k, taken = 0;
            for (k = 0; k < j && !taken; ++k) taken = top_ids[k] == (int32_t)i;
            if (!taken && (pick < 0 || x[i] > x[pick])) pick = i;
          }
        }
        top_ids[j] = (int32_t)pick;
        top_logprobs[j] = pick >= 0 ? (float)((double)x[pick] - lse) : -INFINITY;
      }
    }
  }
  return PLLM_OK;
}

static pllm_status c_init(const pllm_host_api* host, pllm_error* error) {
  (void)error;
  host->log(host->context, PLLM_LOG_DEBUG, "example_c_sampler loaded");
  return PLLM_OK;
}

/* Options are a JSON object; this plugin has none, so anything but {} is refused. */
static pllm_status c_validate_options(const char* options_json, pllm_error* error) {
  const char* p = options_json ? options_json : "{}";
  while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') ++p;
  if (*p++ == '{') {
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') ++p;
    if (*p == '}') return PLLM_OK;
  }
  return fail(error, PLLM_ERROR_INVALID_CONFIG, "example_c_sampler takes no options, got %s", options_json);
}

/* The sampler table: struct_size says which slots this plugin knows; probabilities (optional) is NULL. */
static const pllm_sampler_api c_api = {
    sizeof(pllm_sampler_api), c_create, c_destroy, c_sample, NULL,
};

static const pllm_plugin_descriptor c_descriptor = {
    sizeof(pllm_plugin_descriptor),
    PLLM_SDK_VERSION_MAJOR, /* the SDK this plugin is built against: the host checks it */
    PLLM_SDK_VERSION_MINOR,
    PLLM_PLUGIN_KIND_SAMPLER,
    "example_c_sampler", /* must equal the file name (example_c_sampler.so) */
    "1.0.0",
    "Example: a greedy sampler in plain C",
    c_init,
    NULL, /* shutdown: nothing to release */
    c_validate_options,
    &c_api,
};

__attribute__((visibility("default"))) const pllm_plugin_descriptor* pagedllm_plugin_entry(void) {
  return &c_descriptor;
}
