"""Checks that Eagle3Head.ttt_forward equals an entry-by-entry inference simulation
(explicit head cache, one draft step at a time) on a random head.

Usage: check_ttt.py TARGET_DIR
"""
import sys

import torch
import torch.nn.functional as F

from eagle3_head import Eagle3Head, eagle3_tap_layers
from llama_reference import LlamaReference, rope_cos_sin


def entry_kv_and_q(head, x, token, position, embed):
    """q, k, v of one head cache entry [h, d] (kv heads repeated)."""
    c = head.config
    cos, sin = rope_cos_sin(torch.tensor([position]), c["head_dim"], c["rope_theta"])
    a = head.midlayer.attention_input(x.view(1, 1, -1), F.embedding(torch.tensor([[token]]), embed))
    q, k, v = head.midlayer.self_attn.project(a, cos, sin)
    return q[0, :, 0], k[0, :, 0], v[0, :, 0]


def attend_entry(head, x, q, keys, values):
    attn = head.midlayer.self_attn
    scores = torch.einsum("hd,shd->hs", q, torch.stack(keys)) * attn.head_dim ** -0.5
    out = torch.einsum("hs,shd->hd", torch.softmax(scores, -1), torch.stack(values))
    attn_out = attn.o_proj(out.reshape(1, -1))[0]
    return head.midlayer.finish(x, attn_out)


def simulate(head, features, tokens, embed, last_index, steps):
    """Draft `steps` tokens after committed tokens t_0..t_{last_index+1} (teacher-forced
    chain tokens); returns the logits of each step."""
    keys, values = [], []
    for i in range(last_index + 1):
        x = head.fc(features[i])
        q, k, v = entry_kv_and_q(head, x, int(tokens[i + 1]), i, embed)
        keys.append(k)
        values.append(v)
    out = attend_entry(head, x, q, keys, values)
    logits = [head.lm_head(head.norm(out))]
    for k in range(1, steps):
        x = out
        q, key, value = entry_kv_and_q(head, x, int(tokens[last_index + k + 1]),
                                       last_index + k, embed)
        keys.append(key)
        values.append(value)
        out = attend_entry(head, x, q, keys, values)
        logits.append(head.lm_head(head.norm(out)))
    return logits


def main():
    torch.manual_seed(0)
    target = LlamaReference(sys.argv[1])
    head = Eagle3Head(target.config)
    head.init_from_target(target, std=0.05)
    ids = torch.randint(3, target.config["vocab_size"], (1, 24))
    _, tapped, _ = target.forward(ids, eagle3_tap_layers(target.num_layers))
    features = torch.cat([tapped[l] for l in eagle3_tap_layers(target.num_layers)], -1)
    steps = 4
    with torch.no_grad():
        batched = head.ttt_forward(features, ids, target.embed_tokens, steps)
        worst = 0.0
        for last_index in (0, 5, 17):
            reference = simulate(head, features[0], ids[0], target.embed_tokens, last_index,
                                 steps)
            for k in range(steps):
                diff = (batched[k][0, last_index] - reference[k]).abs().max().item()
                worst = max(worst, diff)
    print(f"ttt_forward vs simulation: max abs logit difference {worst:.3e}")
    assert worst < 1e-3


if __name__ == "__main__":
    main()
