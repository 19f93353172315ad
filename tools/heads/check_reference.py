"""Compares the reference forward with hf-greedy.json (top-5 logits, greedy tokens).

Usage: check_reference.py TARGET_DIR HF_GREEDY_JSON MODEL_NAME
"""
import json
import sys

import torch

from llama_reference import LlamaReference


def greedy_continuation(model, prompt_ids, count):
    ids = list(prompt_ids)
    for _ in range(count):
        logits, _, _ = model.forward(torch.tensor([ids]))
        ids.append(int(logits[0, -1].argmax()))
    return ids[len(prompt_ids):]


def main():
    torch.set_num_threads(1)
    target_dir, reference_path, model_name = sys.argv[1:4]
    model = LlamaReference(target_dir)
    cases = json.load(open(reference_path))["models"][model_name]
    worst = 0.0
    greedy_matches = 0
    for case in cases:
        logits, _, _ = model.forward(torch.tensor([case["prompt_ids"]]))
        last = logits[0, -1]
        ours = last[torch.tensor(case["last_top5_ids"])]
        diff = (ours - torch.tensor(case["last_top5_logits"])).abs().max().item()
        top5_same = last.topk(5).indices.tolist() == case["last_top5_ids"]
        new_ids = greedy_continuation(model, case["prompt_ids"], len(case["new_ids"]))
        same_greedy = new_ids == case["new_ids"]
        greedy_matches += same_greedy
        worst = max(worst, diff)
        print(f"{case['id']:12s} max|dlogit| {diff:.2e} top5 ids same {top5_same} "
              f"greedy same {same_greedy}")
    print(f"max abs logit difference {worst:.3e}; greedy identical {greedy_matches}/{len(cases)}")


if __name__ == "__main__":
    main()
