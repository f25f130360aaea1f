// Appended to sdk/README.md's "Write a plugin" block (which declares
// MyAttention's methods) so that it links into my_attention.so and the host
// can load it and validate its options. The bodies only make the skeleton
// whole: a backend that computes attention is examples/paged_attention.

MyAttention::MyAttention(const Options&, const pllm_attention_create_args&) {}
uint64_t MyAttention::bytes_per_block(const pllm_kv_cache_spec&) {
  throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "my_attention: the README's skeleton computes nothing");
}
void MyAttention::allocate_cache(const pllm_kv_cache_spec&, int64_t, int64_t) {}
void MyAttention::plan(const pllm_batch&) {}
void MyAttention::run(int32_t, const pllm_attention_layer_args&) {}
void MyAttention::swap_out(std::span<const pllm_block_copy>) {}
void MyAttention::swap_in(std::span<const pllm_block_copy>) {}
void MyAttention::copy_blocks(std::span<const pllm_block_copy>) {}
