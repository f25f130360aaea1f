/* example_c_sampler: a greedy sampler written against the bare C ABI
 * (pagedllm/sdk.h), without the C++ helpers. It shows what PAGEDLLM_PLUGIN
 * does for a C++ plugin: fill a pllm_plugin_descriptor and the kind's function
 * table, export pagedllm_plugin_entry, validate options, and report every
 * failure as a status plus a message in the caller's pllm_error.
 *
 * It samples greedily (the argmax, ties: the lowest id) and reports the raw
 * log-probability of each token and the best alternatives a request asks for.
 * A request with temperature > 0 is refused (PLLM_ERROR_UNSUPPORTED), never
 * silently sampled greedily. Options: none ({}). */

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

static pllm_status c_sample(pllm_sampler* self, const pllm_sample_batch* batch, pllm_sample_output* out,
                            pllm_error* error) {
  const pllm_tensor* logits = &batch->logits;
  int32_t r;
  (void)self;
  if (logits->dtype != PLLM_DTYPE_F32 || logits->device.type != PLLM_DEVICE_CPU || logits->ndim != 2 ||
      logits->shape[0] != batch->num_rows || logits->shape[1] <= 0 || logits->strides[1] != 1) {
    return fail(error, PLLM_ERROR_UNSUPPORTED, "logits must be a CPU f32 [num_rows, vocab] tensor");
  }
  if (batch->num_rows > 0 && (!logits->data || !batch->rows || !out->token_ids)) {
    return fail(error, PLLM_ERROR_INVALID_ARGUMENT, "null logits, rows or token_ids");
  }
  for (r = 0; r < batch->num_rows; ++r) {
    const pllm_sample_row* row = row_at(batch, r);
    const float* x = (const float*)logits->data + r * logits->strides[0];
    const int64_t vocab = logits->shape[1];
    int64_t i, best = 0;
    double sum = 0.0, lse;
    if (!row->params) return fail(error, PLLM_ERROR_INVALID_ARGUMENT, "row %d: null params", (int)r);
    if (row->params->temperature >= 1e-5f) {
      return fail(error, PLLM_ERROR_UNSUPPORTED,
                  "row %d: temperature %g: example_c_sampler samples greedily only (temperature 0)", (int)r,
                  (double)row->params->temperature);
    }
    for (i = 1; i < vocab; ++i) {
      if (x[i] > x[best]) best = i; /* strict: ties keep the lowest id */
    }
    if (!isfinite(x[best])) return fail(error, PLLM_ERROR_INVALID_ARGUMENT, "row %d: no finite maximum logit", (int)r);
    for (i = 0; i < vocab; ++i) sum += exp((double)x[i] - (double)x[best]);
    lse = (double)x[best] + log(sum);
    out->token_ids[r] = (int32_t)best;
    if (out->logprobs) out->logprobs[r] = (float)((double)x[best] - lse);
    if (out->max_top_logprobs > 0) {
      /* The n best by (logit desc, id asc): n passes, each taking the best not yet taken. */
      int32_t* top_ids = out->top_token_ids + (int64_t)r * out->max_top_logprobs;
      float* top_logprobs = out->top_logprobs + (int64_t)r * out->max_top_logprobs;
      int32_t n =
          row->params->num_top_logprobs < out->max_top_logprobs ? row->params->num_top_logprobs : out->max_top_logprobs;
      int32_t j;
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
