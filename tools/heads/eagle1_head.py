"""EAGLE-1 draft head (the EAGLE reference's layout), as the engine computes it.

- feature f_i: the target's last hidden state at token i after the target's final norm;
- h = fc(cat(embed(token), x)) + fc.bias (fc [H, 2H]), x = f_i at step 0;
- one decoder layer without input norm: out = h + attn(h), out += mlp(post_norm(out));
- logits = the target's lm_head(out), no norm; out is the next step's x and regresses onto
  the target's feature at the predicted position.
The chain and cache rules are ChainHead's (eagle3_head.py); embedding and lm_head are the
target's, frozen and not stored.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from eagle3_head import ChainHead, DecoderLayer


class Eagle1Head(ChainHead):
    def __init__(self, config, lm_head):
        super().__init__()
        hidden = config["hidden_size"]
        self.config = config
        self.fc = nn.Linear(2 * hidden, hidden, bias=True)
        self.layers = nn.ModuleList([DecoderLayer(config, hidden)])
        self.register_buffer("target_lm_head", lm_head, persistent=False)

    def init_from_target(self, target, std=0.02):
        """Random linear layers (normal, std), zero fc bias, unit norm."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=std)
        nn.init.zeros_(self.fc.bias)

    @property
    def layer(self):
        return self.layers[0]

    def project(self, features):
        return features

    def step_input(self, x, embedded):
        h = self.fc(torch.cat([embedded, x], dim=-1))
        return h, h

    def logits(self, out):
        return F.linear(out, self.target_lm_head)

    def export_tensors(self):
        return {name: p.detach() for name, p in self.named_parameters()}

    def export_config(self, target_config, torch_dtype):
        return self.layer_config(["LlamaForCausalLM"], target_config, torch_dtype)

    def load_exported(self, tensors):
        self.load_state_dict(tensors)
