"""Checks that ChainHead.ttt_forward (EAGLE-3 and EAGLE-1 heads) equals an entry-by-entry
inference simulation (explicit head cache, one draft step at a time) on a random head.

Usage: check_ttt.py TARGET_DIR
"""
import sys

import torch
import torch.nn.functional as F

from eagle1_head import Eagle1Head
from eagle3_head import Eagle3Head, eagle3_tap_layers
from llama_reference import LlamaReference, rope_cos_sin


def entry_kv_and_q(head, x, token, position, embed):
    """q, k, v of one head cache entry [h, d] (kv heads repeated) and the entry's residual."""
    c = head.config
    cos, sin = rope_cos_sin(torch.tensor([position]), c["head_dim"], c["rope_theta"])
    a, residual = head.step_input(x.view(1, 1, -1), F.embedding(torch.tensor([[token]]), embed))
    q, k, v = head.layer.self_attn.project(a, cos, sin)
    return q[0, :, 0], k[0, :, 0], v[0, :, 0], residual[0, 0]


def attend_entry(head, residual, q, keys, values):
    attn = head.layer.self_attn
    scores = torch.einsum("hd,shd->hs", q, torch.stack(keys)) * attn.head_dim ** -0.5
    out = torch.einsum("hs,shd->hd", torch.softmax(scores, -1), torch.stack(values))
    attn_out = attn.o_proj(out.reshape(1, -1))[0]
    return head.layer.finish(residual, attn_out)


def simulate(head, features, tokens, embed, last_index, steps):
    """Draft `steps` tokens after committed tokens t_0..t_{last_index+1} (teacher-forced
    chain tokens); returns the logits of each step."""
    keys, values = [], []
    for i in range(last_index + 1):
        q, k, v, residual = entry_kv_and_q(head, head.project(features[i]), int(tokens[i + 1]), i,
                                           embed)
        keys.append(k)
        values.append(v)
    out = attend_entry(head, residual, q, keys, values)
    logits = [head.logits(out)]
    for k in range(1, steps):
        q, key, value, residual = entry_kv_and_q(head, out, int(tokens[last_index + k + 1]),
                                                 last_index + k, embed)
        keys.append(key)
        values.append(value)
        out = attend_entry(head, residual, q, keys, values)
        logits.append(head.logits(out))
    return logits


def check(name, head, features, ids, embed, steps):
    with torch.no_grad():
        batched = head.ttt_forward(features, ids, embed, steps)
        worst = 0.0
        for last_index in (0, 5, 17):
            reference = simulate(head, features[0], ids[0], embed, last_index, steps)
            for k in range(steps):
                diff = (batched[k][0, last_index] - reference[k]).abs().max().item()
                worst = max(worst, diff)
    print(f"{name} ttt_forward vs simulation: max abs logit difference {worst:.3e}")
    assert worst < 1e-3


def main():
    torch.manual_seed(0)
    target = LlamaReference(sys.argv[1])
    ids = torch.randint(3, target.config["vocab_size"], (1, 24))
    taps = eagle3_tap_layers(target.num_layers)
    _, tapped, final_hidden = target.forward(ids, taps)
    eagle3 = Eagle3Head(target.config)
    eagle3.init_from_target(target, std=0.05)
    check("eagle3", eagle3, torch.cat([tapped[l] for l in taps], -1), ids, target.embed_tokens, 4)
    eagle1 = Eagle1Head(target.config, target.lm_head)
    eagle1.init_from_target(target, std=0.05)
    check("eagle1", eagle1, final_hidden, ids, target.embed_tokens, 4)


if __name__ == "__main__":
    main()
