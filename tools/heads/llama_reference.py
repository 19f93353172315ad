"""Plain PyTorch forward of a Hugging Face Llama checkpoint folder, in float32.

Tap convention: tap l is the INPUT of decoder layer l (the residual stream before
layer l), for l in 0..L; tap 0 is the token embedding and tap L is the final
residual before the final norm.
"""
import json
import os

import torch
import torch.nn.functional as F

from safetensors_io import read_safetensors


def load_config(folder):
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    config.setdefault("head_dim", config["hidden_size"] // config["num_attention_heads"])
    config.setdefault("num_key_value_heads", config["num_attention_heads"])
    config.setdefault("rope_theta", 10000.0)
    config.setdefault("rms_norm_eps", 1e-6)
    return config


def load_weights(folder):
    """Reads model.safetensors or every shard named in model.safetensors.index.json."""
    index_path = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
    else:
        shards = ["model.safetensors"]
    weights = {}
    for shard in shards:
        weights.update(read_safetensors(os.path.join(folder, shard)))
    return {name: tensor.float() for name, tensor in weights.items()}


def rms_norm(x, weight, eps):
    variance = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * weight


def rope_cos_sin(positions, head_dim, theta):
    """cos/sin tables [..., head_dim] for the rotate_half convention."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = positions.to(torch.float32).unsqueeze(-1) * inv_freq
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x, cos, sin):
    """x [B, heads, T, d]; cos/sin [T, d] or [B, 1, T, d]."""
    return x * cos + rotate_half(x) * sin


def causal_attention(q, k, v, mask):
    """q [B, h, T, d], k/v [B, kv, S, d] (kv heads repeated to h), mask [T, S] bool."""
    repeat = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(repeat, dim=1)
    v = v.repeat_interleave(repeat, dim=1)
    scores = q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5)
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


class LlamaReference:
    """Float32 Llama forward over token ids; weights are frozen tensors."""

    def __init__(self, folder):
        self.config = load_config(folder)
        self.weights = load_weights(folder)
        self.num_layers = self.config["num_hidden_layers"]

    def w(self, name):
        return self.weights[name]

    @property
    def embed_tokens(self):
        return self.w("model.embed_tokens.weight")

    @property
    def lm_head(self):
        if "lm_head.weight" in self.weights:
            return self.w("lm_head.weight")
        return self.embed_tokens

    def _attention(self, layer, x, cos, sin, mask):
        c = self.config
        batch, length, _ = x.shape
        prefix = f"model.layers.{layer}.self_attn."
        q = F.linear(x, self.w(prefix + "q_proj.weight"))
        k = F.linear(x, self.w(prefix + "k_proj.weight"))
        v = F.linear(x, self.w(prefix + "v_proj.weight"))
        q = q.view(batch, length, c["num_attention_heads"], c["head_dim"]).transpose(1, 2)
        k = k.view(batch, length, c["num_key_value_heads"], c["head_dim"]).transpose(1, 2)
        v = v.view(batch, length, c["num_key_value_heads"], c["head_dim"]).transpose(1, 2)
        out = causal_attention(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v, mask)
        out = out.transpose(1, 2).reshape(batch, length, -1)
        return F.linear(out, self.w(prefix + "o_proj.weight"))

    def _mlp(self, layer, x):
        prefix = f"model.layers.{layer}.mlp."
        gate = F.silu(F.linear(x, self.w(prefix + "gate_proj.weight")))
        up = F.linear(x, self.w(prefix + "up_proj.weight"))
        return F.linear(gate * up, self.w(prefix + "down_proj.weight"))

    @torch.no_grad()
    def forward(self, ids, taps=()):
        """ids [B, T] (positions 0..T-1, causal).

        Returns (logits [B, T, V], {l: tap l [B, T, H]}, final_hidden [B, T, H]),
        where final_hidden is the residual after the final norm.
        """
        c = self.config
        eps = c["rms_norm_eps"]
        length = ids.shape[1]
        cos, sin = rope_cos_sin(torch.arange(length), c["head_dim"], c["rope_theta"])
        mask = torch.ones(length, length, dtype=torch.bool).tril()
        x = F.embedding(ids, self.embed_tokens)
        tapped = {}
        for layer in range(self.num_layers):
            if layer in taps:
                tapped[layer] = x
            prefix = f"model.layers.{layer}."
            normed = rms_norm(x, self.w(prefix + "input_layernorm.weight"), eps)
            x = x + self._attention(layer, normed, cos, sin, mask)
            normed = rms_norm(x, self.w(prefix + "post_attention_layernorm.weight"), eps)
            x = x + self._mlp(layer, normed)
        if self.num_layers in taps:
            tapped[self.num_layers] = x
        final_hidden = rms_norm(x, self.w("model.norm.weight"), eps)
        return F.linear(final_hidden, self.lm_head), tapped, final_hidden
