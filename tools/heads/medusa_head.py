"""Medusa heads, FasterDecoding layout: head k maps the target's final-normed hidden state
at token i to logits for t_{i+k+2}."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ResBlock(nn.Module):
    """x + SiLU(W x + b); W starts at zero so the block starts as the identity."""

    def __init__(self, hidden):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)

    def forward(self, x):
        return x + F.silu(self.linear(x))


class MedusaHeads(nn.Module):
    def __init__(self, hidden, vocab, num_heads, num_layers):
        super().__init__()
        self.hidden, self.vocab = hidden, vocab
        self.num_heads, self.num_layers = num_heads, num_layers
        self.medusa_head = nn.ModuleList([
            nn.Sequential(*[ResBlock(hidden) for _ in range(num_layers)],
                          nn.Linear(hidden, vocab, bias=False))
            for _ in range(num_heads)
        ])

    def init_from_target(self, target):
        with torch.no_grad():
            for head in self.medusa_head:
                head[self.num_layers].weight.copy_(target.lm_head)

    def forward(self, final_hidden):
        """final_hidden [B, T, H] -> list of num_heads logits [B, T, V]."""
        return [head(final_hidden) for head in self.medusa_head]

    def export_tensors(self):
        return {name: p.detach() for name, p in self.named_parameters()}

    def export_config(self, target_dir_name, torch_dtype):
        return {
            "medusa_num_heads": self.num_heads,
            "medusa_num_layers": self.num_layers,
            "hidden_size": self.hidden,
            "vocab_size": self.vocab,
            "base_model_name_or_path": target_dir_name,
            "torch_dtype": torch_dtype,
        }

    def load_exported(self, tensors):
        self.load_state_dict(tensors)
