"""EAGLE-3 draft head (SpecForge/EAGLE layout) and the training-time-test forward shared
with EAGLE-1 (eagle1_head.py).

Inference rules reproduced by ChainHead.ttt_forward:
- head cache entry i (step 0) has x = project(features at token i) (EAGLE-3: fc over
  cat(tap a, tap b, tap c)), token t_{i+1}, RoPE position i, and attends causally to step-0
  entries 0..i;
- draft step k >= 1 at index i has x = out of step k-1 at index i, token t_{i+k+1}, RoPE
  position i+k, and attends to step-0 entries 0..i plus the step-1..k entries of index i;
- step k at index i predicts t_{i+k+2}.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from llama_reference import apply_rope, rope_cos_sin


def eagle3_tap_layers(num_layers):
    """Target decoder layers whose INPUTS feed fc, in concatenation order."""
    return (2, num_layers // 2, num_layers - 3)


class RMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, config, input_size):
        super().__init__()
        self.heads = config["num_attention_heads"]
        self.kv_heads = config["num_key_value_heads"]
        self.head_dim = config["head_dim"]
        self.q_proj = nn.Linear(input_size, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(input_size, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(input_size, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, config["hidden_size"], bias=False)

    def project(self, a, cos, sin):
        """q [B, h, n, d], k/v [B, h, n, d] (kv heads repeated), RoPE applied to q and k."""
        batch, length, _ = a.shape
        q = self.q_proj(a).view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(a).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(a).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        repeat = self.heads // self.kv_heads
        k = k.repeat_interleave(repeat, dim=1)
        v = v.repeat_interleave(repeat, dim=1)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def attend(self, q, step0_k, step0_v, chain_k, chain_v):
        """Scores against step-0 entries 0..i (causal) and against the chain entries of the
        same index i (elementwise); one softmax over both."""
        scale = self.head_dim ** -0.5
        length = q.shape[2]
        causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
        scores = (q @ step0_k.transpose(-1, -2)) * scale
        scores = scores.masked_fill(~causal, float("-inf"))
        chain_scores = [(q * k).sum(-1, keepdim=True) * scale for k in chain_k]
        probs = torch.softmax(torch.cat([scores] + chain_scores, dim=-1), dim=-1)
        out = probs[..., :length] @ step0_v
        for j, v in enumerate(chain_v):
            out = out + probs[..., length + j:length + j + 1] * v
        batch = q.shape[0]
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, -1))


class MLP(nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Attention over an input of `attention_input_size`, then the MLP; no input norm."""

    def __init__(self, config, attention_input_size):
        super().__init__()
        self.post_attention_layernorm = RMSNorm(config["hidden_size"], config["rms_norm_eps"])
        self.self_attn = Attention(config, attention_input_size)
        self.mlp = MLP(config["hidden_size"], config["intermediate_size"])

    def finish(self, residual, attn):
        h = residual + attn
        return h + self.mlp(self.post_attention_layernorm(h))


class MidLayer(DecoderLayer):
    def __init__(self, config):
        super().__init__(config, 2 * config["hidden_size"])
        hidden, eps = config["hidden_size"], config["rms_norm_eps"]
        self.input_layernorm = RMSNorm(hidden, eps)
        self.hidden_norm = RMSNorm(hidden, eps)

    def attention_input(self, x, embedded):
        return torch.cat([self.input_layernorm(embedded), self.hidden_norm(x)], dim=-1)


class ChainHead(nn.Module):
    """A one-layer EAGLE head drafting a chain: subclasses define `layer` (a DecoderLayer),
    project (features -> step-0 x), step_input (x, embedded token -> attention input,
    residual) and logits (layer output -> logits)."""

    def layer_config(self, architectures, target_config, torch_dtype):
        """The config.json keys every head writes: its one decoder layer's shape and the
        target's vocabulary and special tokens."""
        c = self.config
        return {
            "architectures": architectures,
            "model_type": "llama",
            "hidden_size": c["hidden_size"],
            "intermediate_size": c["intermediate_size"],
            "num_attention_heads": c["num_attention_heads"],
            "num_key_value_heads": c["num_key_value_heads"],
            "head_dim": c["head_dim"],
            "num_hidden_layers": 1,
            "vocab_size": c["vocab_size"],
            "rms_norm_eps": c["rms_norm_eps"],
            "rope_theta": c["rope_theta"],
            "max_position_embeddings": target_config.get("max_position_embeddings", 2048),
            "hidden_act": "silu",
            "tie_word_embeddings": False,
            "bos_token_id": target_config.get("bos_token_id", 1),
            "eos_token_id": target_config.get("eos_token_id", 2),
            "torch_dtype": torch_dtype,
        }

    def ttt_outputs(self, features, tokens, embed_tokens, steps):
        """features [B, T, F] (the head's features at tokens 0..T-1), tokens [B, T].

        Returns a list of `steps` layer outputs [B, T-1, H]; entry i of step k predicts
        t_{i+k+2} and is step k+1's x. Input tokens past the window are padded with 0 (their
        outputs are masked by the caller)."""
        n = tokens.shape[1] - 1
        x = self.project(features[:, :n])
        head_dim, theta = self.config["head_dim"], self.config["rope_theta"]
        attention = self.layer.self_attn
        step0_k = step0_v = None
        chain_k, chain_v = [], []
        outs = []
        for k in range(steps):
            input_tokens = F.pad(tokens[:, k + 1:k + 1 + n], (0, k + 1 + n - tokens.shape[1]))
            embedded = F.embedding(input_tokens, embed_tokens)
            cos, sin = rope_cos_sin(torch.arange(n) + k, head_dim, theta)
            a, residual = self.step_input(x, embedded)
            q, key, value = attention.project(a, cos, sin)
            if k == 0:
                step0_k, step0_v = key, value
            else:
                chain_k.append(key)
                chain_v.append(value)
            out = self.layer.finish(residual, attention.attend(q, step0_k, step0_v, chain_k,
                                                               chain_v))
            outs.append(out)
            x = out
        return outs

    def ttt_forward(self, features, tokens, embed_tokens, steps):
        """The logits [B, T-1, V] of each step of ttt_outputs."""
        return [self.logits(out) for out in self.ttt_outputs(features, tokens, embed_tokens, steps)]


class Eagle3Head(ChainHead):
    def __init__(self, config):
        super().__init__()
        hidden = config["hidden_size"]
        self.config = config
        self.fc = nn.Linear(3 * hidden, hidden, bias=False)
        self.midlayer = MidLayer(config)
        self.norm = RMSNorm(hidden, config["rms_norm_eps"])
        self.lm_head = nn.Linear(hidden, config["vocab_size"], bias=False)

    def init_from_target(self, target, std=0.02):
        """Random linear layers (normal, std), unit norms; lm_head and norm from the target."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=std)
        with torch.no_grad():
            self.lm_head.weight.copy_(target.lm_head)
            self.norm.weight.copy_(target.w("model.norm.weight"))

    @property
    def layer(self):
        return self.midlayer

    def project(self, features):
        return self.fc(features)

    def step_input(self, x, embedded):
        return self.midlayer.attention_input(x, embedded), x

    def logits(self, out):
        return self.lm_head(self.norm(out))

    def export_tensors(self):
        """Tensors of model.safetensors: parameters plus d2t (zeros) and t2d (all true)."""
        tensors = {name: p.detach() for name, p in self.named_parameters()}
        draft_vocab = self.config["vocab_size"]
        tensors["d2t"] = torch.zeros(draft_vocab, dtype=torch.int64)
        tensors["t2d"] = torch.ones(self.config["vocab_size"], dtype=torch.bool)
        return tensors

    def export_config(self, target_config, torch_dtype):
        return {
            **self.layer_config(["LlamaForCausalLMEagle3"], target_config, torch_dtype),
            "draft_vocab_size": self.config["vocab_size"],
            # SpecForge's convention: the OUTPUT of each named target layer, so the input of
            # layer l is written as l - 1.
            "eagle_config": {
                "eagle_aux_hidden_state_layer_ids": [l - 1 for l in eagle3_tap_layers(
                    target_config["num_hidden_layers"])],
            },
        }

    def load_exported(self, tensors):
        self.load_state_dict({k: v for k, v in tensors.items() if k not in ("d2t", "t2d")})
