#ifndef PAGEDLLM_SDK_CONSTRAINT_H
#define PAGEDLLM_SDK_CONSTRAINT_H

#include <stdint.h>

#include "pagedllm/sdk/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A constraint engine (SDK 2.1) restricts what a request may generate: a JSON
 * object, a JSON schema, a regular expression or one of a list of choices
 * (OpenAI's response_format, vLLM's guided decoding). It works on token ids
 * over the model's vocabulary, which the host passes at create time:
 *   compile()         a request's constraint -> a grammar (immutable, shared by
 *                     the request's sequences); a bad schema or regex is
 *                     PLLM_ERROR_INVALID_ARGUMENT with a message the API layer
 *                     returns to the client (as a 400 naming its field);
 *   create_matcher()  a grammar -> one sequence's matcher state;
 *   fill_bitmask()    the next-token masks of a set of matchers, which core
 *                     hands the sampler (pllm_sample_batch.token_bitmask);
 *   accept_token()    advances a matcher by the token the sampler drew;
 *   rollback()        undoes the last accepted tokens (a speculative draft
 *                     rejected by verification).
 * Threads: compile() and release_grammar() may be called from any thread,
 * concurrently with each other and with the engine thread's calls on the same
 * instance (they read only the vocabulary fixed at create); every other call
 * follows the contract of sdk/README.md ("Threads and reentrancy"). A matcher
 * is used by one sequence; the host never calls two functions on one matcher
 * at once. */
typedef struct pllm_constraint_engine pllm_constraint_engine;
typedef struct pllm_constraint_grammar pllm_constraint_grammar;
typedef struct pllm_constraint_matcher pllm_constraint_matcher;

/* How the vocabulary's token strings encode bytes (tokenizer.json's decoder). */
typedef enum pllm_vocab_type {
  PLLM_VOCAB_RAW = 0,           /* the strings are the bytes */
  PLLM_VOCAB_BYTE_FALLBACK = 1, /* SentencePiece: U+2581 is a space, <0xNN> a byte */
  PLLM_VOCAB_BYTE_LEVEL = 2,    /* GPT-2 byte-level: each byte mapped to a printable code point */
  PLLM_VOCAB_TYPE_FORCE_32BIT = 0x7fffffff
} pllm_vocab_type;

typedef struct pllm_constraint_create_args {
  uint32_t struct_size;
  const char* options_json;
  /* Width of the model's logits rows; masks cover this many ids (ids past the
   * tokenizer's vocabulary are never allowed). */
  int32_t vocab_size;
  /* The tokenizer's token strings by id, [num_tokens] (num_tokens <= vocab_size),
   * as tokenizer.json spells them; token_lengths[i] bytes each (not
   * NUL-terminated). An id the tokenizer does not define has length 0. */
  int32_t num_tokens;
  const char* const* token_strings;
  const int32_t* token_lengths;
  pllm_vocab_type vocab_type;
  /* Ids that end a sequence (EOS): allowed exactly where the constraint is complete. */
  const int32_t* stop_token_ids;
  int32_t num_stop_tokens;
  /* Special tokens (other than the stop tokens): never allowed in constrained output. */
  const int32_t* special_token_ids;
  int32_t num_special_tokens;
} pllm_constraint_create_args;

typedef enum pllm_constraint_type {
  PLLM_CONSTRAINT_INVALID = 0,
  PLLM_CONSTRAINT_JSON_OBJECT = 1, /* any JSON object; text unused */
  PLLM_CONSTRAINT_JSON_SCHEMA = 2, /* text: a JSON schema (JSON) */
  PLLM_CONSTRAINT_REGEX = 3,       /* text: a regular expression the whole output matches */
  PLLM_CONSTRAINT_CHOICE = 4,      /* text: a JSON array of strings; the output is one of them */
  /* SDK 2.4. text: a structural tag in xgrammar's JSON format ({"type": "structural_tag", "format": {...}},
   * as vLLM's structured_outputs.structural_tag): fixed text around schema-constrained JSON, which is how
   * tool calls are forced. A plugin of an older minor answers PLLM_ERROR_UNSUPPORTED; core refuses the
   * request with a 400 naming the plugin's lack. */
  PLLM_CONSTRAINT_STRUCTURAL_TAG = 5,
  PLLM_CONSTRAINT_TYPE_FORCE_32BIT = 0x7fffffff
} pllm_constraint_type;

typedef struct pllm_constraint_spec {
  uint32_t struct_size;
  pllm_constraint_type type;
  const char* text; /* NUL-terminated UTF-8 */
} pllm_constraint_spec;

typedef struct pllm_constraint_api {
  uint32_t struct_size;
  pllm_status (*create)(const pllm_constraint_create_args* args, pllm_constraint_engine** out, pllm_error* error);
  void (*destroy)(pllm_constraint_engine* self);
  pllm_status (*compile)(pllm_constraint_engine* self, const pllm_constraint_spec* spec,
                         pllm_constraint_grammar** out, pllm_error* error);
  void (*release_grammar)(pllm_constraint_engine* self, pllm_constraint_grammar* grammar);
  pllm_status (*create_matcher)(pllm_constraint_engine* self, const pllm_constraint_grammar* grammar,
                                pllm_constraint_matcher** out, pllm_error* error);
  void (*destroy_matcher)(pllm_constraint_engine* self, pllm_constraint_matcher* matcher);
  /* Row r of `bitmask` ([num_matchers, bitmask_words] 32-bit words, host
   * memory, bitmask_words = ceil(vocab_size / 32)) gets matchers[r]'s allowed
   * next tokens: bit (id % 32) of word (id / 32) set = allowed. A terminated
   * matcher allows only the stop tokens. */
  pllm_status (*fill_bitmask)(pllm_constraint_engine* self, pllm_constraint_matcher* const* matchers,
                              int32_t num_matchers, uint32_t* bitmask, int32_t bitmask_words, pllm_error* error);
  /* Advances the matcher by `token`. *accepted = 0 (and the state unchanged)
   * when the grammar does not allow it; a stop token is accepted where the
   * constraint is complete and terminates the matcher. */
  pllm_status (*accept_token)(pllm_constraint_engine* self, pllm_constraint_matcher* matcher, int32_t token,
                              int32_t* accepted, pllm_error* error);
  /* Undoes the last num_tokens accepted tokens, stop tokens included (at most
   * the matcher's history; the in-tree plugin keeps all of it). Speculative
   * decoding rolls back at most num_speculative_tokens at once. */
  pllm_status (*rollback)(pllm_constraint_engine* self, pllm_constraint_matcher* matcher, int32_t num_tokens,
                          pllm_error* error);
  /* 1 when the matcher accepted a stop token (the constrained output is complete). */
  int32_t (*is_terminated)(pllm_constraint_engine* self, const pllm_constraint_matcher* matcher);
} pllm_constraint_api;

#ifdef __cplusplus
}
#endif

#endif
