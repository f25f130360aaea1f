"""Llama (LlamaForCausalLM) and an EAGLE-1 draft head in plain PyTorch.

Runs on torch 1.13 (Debian's, CPU) and newer (CUDA). The parameter names are exactly
HF transformers' LlamaForCausalLM state_dict keys, and the math follows HF's modeling_llama:
RMSNorm computed in fp32, RoPE with inv_freq = 1 / theta^(2i/d) applied with rotate_half
(the "neox" layout: first half / second half of each head), grouped-query attention,
SwiGLU MLP, untied lm_head. The C++ models_llama plugin and HF transformers read the
exported weights unchanged.
"""
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LlamaConfig:
    vocab_size: int = 8192
    hidden_size: int = 256
    intermediate_size: int = 688
    num_hidden_layers: int = 6
    num_attention_heads: int = 8
    num_key_value_heads: int = 2
    max_position_embeddings: int = 512
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    initializer_range: float = 0.02
    bos_token_id: int = 0
    eos_token_id: int = 0

    @property
    def head_dim(self):
        return self.hidden_size // self.num_attention_heads

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_cos_sin(position_ids, head_dim, theta, dtype):
    """cos, sin of shape [B, T, head_dim] for integer positions [B, T] (HF convention)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64,
                                             device=position_ids.device).float() / head_dim))
    freqs = position_ids.float()[..., None] * inv_freq  # [B, T, d/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):
    # x: [B, H, T, d], cos/sin: [B, T, d]
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return x * cos + rotate_half(x) * sin


_BIAS_CACHE = {}


def attention_bias(mask, t, device):
    """Additive fp32 bias: 0 where attention is allowed, -inf elsewhere (causal if mask is None)."""
    if mask is not None:
        return torch.zeros(mask.shape, device=device).masked_fill(~mask, float("-inf"))
    key = (t, str(device))
    if key not in _BIAS_CACHE:
        _BIAS_CACHE.clear()
        _BIAS_CACHE[key] = torch.full((t, t), float("-inf"), device=device).triu(1)
    return _BIAS_CACHE[key]


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, cfg.hidden_size, bias=False)

    def forward(self, x, cos, sin, mask):
        """mask: None (causal) or a bool tensor [T, T] / [B, 1, T, T], True = may attend."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = self.nh // self.nkv
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0
            if mask is None:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:  # torch 1.13: explicit softmax(q k^T / sqrt(d) + bias) v, softmax in fp32
            scores = (q * (1.0 / math.sqrt(self.hd))) @ k.transpose(-1, -2)
            scores = scores.float() + attention_bias(mask, t, x.device)
            out = torch.softmax(scores, dim=-1).to(v.dtype) @ v
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.nh * self.hd))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg, input_layernorm=True):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        # EAGLE-1's single layer has no input_layernorm (its input is fc's output).
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps) if input_layernorm else None
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, mask):
        h = self.input_layernorm(x) if self.input_layernorm is not None else x
        x = x + self.self_attn(h, cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


def default_positions(input_ids):
    b, t = input_ids.shape
    return torch.arange(t, device=input_ids.device).unsqueeze(0).expand(b, t)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.model = LlamaModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.apply(lambda m: init_weights(m, cfg.initializer_range))

    def hidden(self, input_ids, position_ids=None, mask=None):
        """The final hidden state after model.norm: what lm_head consumes (EAGLE's feature)."""
        if position_ids is None:
            position_ids = default_positions(input_ids)
        x = self.model.embed_tokens(input_ids)
        cos, sin = rope_cos_sin(position_ids, self.config.head_dim, self.config.rope_theta, x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        return self.model.norm(x)

    def forward(self, input_ids, position_ids=None, mask=None):
        return self.lm_head(self.hidden(input_ids, position_ids, mask))


def init_weights(module, std):
    # HF LlamaPreTrainedModel._init_weights: normal(0, initializer_range), norms at 1.
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=std)


class EagleHead(nn.Module):
    """EAGLE-1 draft head. At position t its input is fc(cat(embed(x_{t+1}), f_t)), where f_t
    is the target's final hidden state (after model.norm); one Llama decoder layer without
    input_layernorm then predicts f_{t+1}, which the target's lm_head turns into logits.
    Parameters: fc.weight, fc.bias, layers.0.* only. The embedding and lm_head belong to the
    target and are passed in (shared, frozen), never copied."""

    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.fc = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=True)
        self.layers = nn.ModuleList([DecoderLayer(cfg, input_layernorm=False)])
        self.apply(lambda m: init_weights(m, cfg.initializer_range))

    def forward(self, features, next_token_embeds, position_ids, mask=None):
        x = self.fc(torch.cat((next_token_embeds, features), dim=-1))
        cos, sin = rope_cos_sin(position_ids, self.config.head_dim, self.config.rope_theta, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return x


def count_params(module):
    return sum(p.numel() for p in module.parameters())
