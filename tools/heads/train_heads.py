#!/usr/bin/env python3
"""Trains an EAGLE-3 head, an EAGLE-1 head or Medusa heads for a Hugging Face Llama-family
target on CPU.

Features and soft labels come from llama_reference's float32 forward of the target over
BOS-separated corpus windows, computed on the fly. Step/head k at index i predicts
t_{i+k+2}; its label is the target's softmax at token i+k+1 (EAGLE-1 also regresses its
layer output onto the target's feature at token i+k+1).
"""
import argparse
import json
import math
import os
import platform
import random
import re
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus import DOMAINS, eval_windows, load_tokenizer, train_windows  # noqa: E402
from eagle1_head import Eagle1Head  # noqa: E402
from eagle3_head import Eagle3Head, eagle3_tap_layers  # noqa: E402
from llama_reference import LlamaReference  # noqa: E402
from medusa_head import MedusaHeads  # noqa: E402
from safetensors_io import read_safetensors, write_safetensors  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--kind", choices=("eagle3", "eagle1", "medusa"), help="head type to train")
    p.add_argument("--target", required=True, help="target checkpoint folder (HF Llama layout)")
    p.add_argument("--corpus", default="shared/corpus",
                   help="folder with <domain>.{train,eval}.jsonl")
    p.add_argument("--out", help="output folder for the trained head")
    p.add_argument("--eval-only", metavar="DIR",
                   help="load the head saved in DIR, recompute and write DIR/eval.json")
    p.add_argument("--init-from", metavar="DIR",
                   help="start from the head saved in DIR (same kind and sizes) instead of "
                        "the fresh initialisation")
    p.add_argument("--steps", type=int, default=None,
                   help="draft steps (eagle3 / eagle1 TTT depth, default 5 / 3) or medusa "
                        "heads (default 4)")
    p.add_argument("--medusa-num-layers", type=int, default=1, help="residual blocks per head")
    p.add_argument("--train-tokens", type=int, default=200_000,
                   help="training token budget (tokens of the train stream, one pass)")
    p.add_argument("--window", type=int, default=512, help="training window length in tokens")
    p.add_argument("--batch-windows", type=int, default=2, help="windows per optimizer step")
    p.add_argument("--lr", type=float, default=1e-3, help="peak AdamW learning rate")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--min-lr-ratio", type=float, default=0.1,
                   help="cosine schedule ends at lr * this")
    p.add_argument("--step-weight-decay", type=float, default=0.8,
                   help="loss weight of step/head k is this ** k")
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--feature-loss-weight", type=float, default=1.0,
                   help="eagle1: weight of the smooth-L1 regression onto the next feature")
    p.add_argument("--token-loss-weight", type=float, default=None,
                   help="weight of the soft cross-entropy (default 0.1 for eagle1, as the "
                        "EAGLE reference, 1 otherwise)")
    p.add_argument("--time-limit-min", type=float, default=0.0,
                   help="stop training (and save) after this many minutes; 0 = no limit")
    p.add_argument("--eval-windows", type=int, default=4, help="eval windows per domain")
    p.add_argument("--eval-window", type=int, default=128, help="eval window length")
    p.add_argument("--save-dtype", choices=("bf16", "f32"), default="bf16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = p.parse_args()
    if not args.eval_only and not (args.kind and args.out):
        p.error("training needs --kind and --out (or use --eval-only DIR)")
    return args


def default_steps(kind):
    return {"eagle3": 5, "eagle1": 3, "medusa": 4}[kind]


def build_head(kind, target, steps, medusa_num_layers):
    c = target.config
    if kind == "eagle3":
        return Eagle3Head(c)
    if kind == "eagle1":
        return Eagle1Head(c, target.lm_head)
    return MedusaHeads(c["hidden_size"], c["vocab_size"], steps, medusa_num_layers)


def shift(tensor, k):
    """tensor[:, k + 1:] zero-padded back to T - 1 positions: index i holds token i+k+1."""
    return F.pad(tensor[:, k + 1:], (0, 0, 0, k))


def step_logits(kind, head, target, ids, steps):
    """Runs the target and the head over ids [B, T].

    Returns (draft, teacher, features): lists of `steps` tensors [B, T-1, V]; entry i of
    step k predicts t_{i+k+2} and teacher[k][:, i] is the target's logits at token i+k+1
    (zero past the window). features (EAGLE-1, else None) lists per step the pair (head
    output [B, T-1, H], the target's final-normed hidden state at token i+k+1)."""
    taps = eagle3_tap_layers(target.num_layers) if kind == "eagle3" else ()
    target_logits, tapped, final_hidden = target.forward(ids, taps)
    n = ids.shape[1] - 1
    features = None
    if kind == "eagle3":
        taps_cat = torch.cat([tapped[layer] for layer in taps], dim=-1)
        draft = head.ttt_forward(taps_cat, ids, target.embed_tokens, steps)
    elif kind == "eagle1":
        outs = head.ttt_outputs(final_hidden, ids, target.embed_tokens, steps)
        draft = [head.logits(out) for out in outs]
        features = [(out, shift(final_hidden, k)) for k, out in enumerate(outs)]
    else:
        draft = [logits[:, :n] for logits in head(final_hidden[:, :n])]
    teacher = [shift(target_logits, k) for k in range(steps)]
    return draft, teacher, features


def valid_mask(n, step):
    """Index i of step k has a label when i + k + 1 <= n, i.e. i <= n - 1 - k."""
    return torch.arange(n) <= n - 1 - step


def step_statistics(draft, teacher, step):
    """Sums over valid positions: (soft cross-entropy, top-1 agreements, positions)."""
    mask = valid_mask(draft.shape[1], step).expand(draft.shape[0], -1)
    teacher_probs = torch.softmax(teacher, dim=-1)
    loss = -(teacher_probs * torch.log_softmax(draft, dim=-1)).sum(-1)
    agree = draft.argmax(-1) == teacher.argmax(-1)
    return loss[mask].sum(), agree[mask].sum().item(), int(mask.sum())


def feature_loss(out, feature, step):
    """Mean over valid positions of the smooth-L1 distance (mean over the hidden size)."""
    mask = valid_mask(out.shape[1], step).expand(out.shape[0], -1)
    return F.smooth_l1_loss(out, feature, reduction="none").mean(-1)[mask].mean()


def training_loss(draft, teacher, features, decay, token_weight, feature_weight):
    """Weighted sum over steps (decay ** step) of token_weight * the step's mean soft
    cross-entropy plus feature_weight * its feature loss (EAGLE-1); step-0 agreement."""
    total = 0.0
    first_agreement = 0.0
    for step, (d, t) in enumerate(zip(draft, teacher)):
        loss_sum, agree, count = step_statistics(d, t, step)
        step_loss = token_weight * loss_sum / count
        if features is not None:
            step_loss = step_loss + feature_weight * feature_loss(*features[step], step)
        total = total + decay ** step * step_loss
        if step == 0:
            first_agreement = agree / count
    return total, first_agreement


@torch.no_grad()
def evaluate(kind, head, target, eval_sets, steps):
    """Per domain: loss and agreement per step (list index k = step/head k, 0-based)."""
    head.eval()
    result = {}
    for domain, windows in eval_sets.items():
        draft, teacher, _ = step_logits(kind, head, target, torch.tensor(windows), steps)
        losses, agreements, counts = [], [], []
        for step in range(steps):
            loss_sum, agree, count = step_statistics(draft[step], teacher[step], step)
            losses.append(loss_sum.item() / count)
            agreements.append(agree / count)
            counts.append(count)
        result[domain] = {
            "windows": len(windows),
            "window_tokens": len(windows[0]),
            "positions_per_step": counts,
            "agreement_per_step": agreements,
            "loss_per_step": losses,
            "loss": sum(losses) / steps,
        }
    head.train()
    return result


def print_eval(result, label):
    for domain, r in result.items():
        agreement = " ".join(f"{a:.3f}" for a in r["agreement_per_step"])
        print(f"[{label}] {domain:10s} loss {r['loss']:.4f} agreement/step {agreement}")
    mean_loss = sum(r["loss"] for r in result.values()) / len(result)
    print(f"[{label}] eval loss (mean over domains and steps) {mean_loss:.4f}")


def lr_at(step, total_steps, args):
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    progress = (step - args.warmup_steps) / max(1, total_steps - args.warmup_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * cosine)


def machine_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def load_eval_sets(args, tokenizer):
    return {domain: eval_windows(tokenizer, args.corpus, domain, args.eval_window,
                                 args.eval_windows)
            for domain in DOMAINS}


def eval_record(args, steps, result, eval_sets):
    return {
        "eval_set": (f"per domain: the first {args.eval_windows} windows of "
                     f"{args.eval_window} tokens of <domain>.eval.jsonl, documents in file "
                     "order each prefixed by BOS (1), concatenated, cut consecutively"),
        "step_convention": ("index k = step/head k (0-based): predicts t_{i+k+2} from "
                            "features at token i; teacher-forced input tokens; agreement = "
                            "argmax equals the target's argmax at token i+k+1"),
        "steps": steps,
        "domains": result,
        "mean_agreement_per_step": [
            sum(r["agreement_per_step"][k] for r in result.values()) / len(result)
            for k in range(steps)],
        "eval_window_ids": eval_sets,
    }


def save_head(kind, head, target, args, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    torch_dtype = "bfloat16" if args.save_dtype == "bf16" else "float32"
    if kind in ("eagle3", "eagle1"):
        config = head.export_config(target.config, torch_dtype)
    else:
        config = head.export_config(os.path.basename(os.path.normpath(args.target)),
                                    torch_dtype)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(out_dir, "model.safetensors"), head.export_tensors(),
                      float_dtype=args.save_dtype)


def load_saved_head(directory, target):
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    tensors = read_safetensors(os.path.join(directory, "model.safetensors"))
    if "LlamaForCausalLMEagle3" in config.get("architectures", []):
        kind, steps = "eagle3", None
        head = Eagle3Head(target.config)
    elif "fc.bias" in tensors:
        kind, steps = "eagle1", None
        head = Eagle1Head(target.config, target.lm_head)
    else:
        kind, steps = "medusa", config["medusa_num_heads"]
        head = MedusaHeads(config["hidden_size"], config["vocab_size"],
                           config["medusa_num_heads"], config["medusa_num_layers"])
    head.load_exported(tensors)
    return kind, head, steps


def write_json(path, data):
    """Indented JSON with every list of numbers on one line."""
    text = json.dumps(data, indent=1)
    text = re.sub(r"\[[-\d\s,.e]+\]", lambda m: json.dumps(json.loads(m.group(0))), text)
    with open(path, "w") as f:
        f.write(text + "\n")


def run_eval_only(args, target, tokenizer):
    kind, head, steps = load_saved_head(args.eval_only, target)
    previous = os.path.join(args.eval_only, "eval.json")
    if not (args.steps or steps) and os.path.exists(previous):
        with open(previous) as f:
            steps = json.load(f)["steps"]  # the depth the head was evaluated at before
    steps = args.steps or steps or default_steps(kind)
    eval_sets = load_eval_sets(args, tokenizer)
    result = evaluate(kind, head, target, eval_sets, steps)
    print_eval(result, "eval-only")
    write_json(os.path.join(args.eval_only, "eval.json"),
               eval_record(args, steps, result, eval_sets))


def train(args, target, tokenizer):
    steps = args.steps or default_steps(args.kind)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    head = build_head(args.kind, target, steps, args.medusa_num_layers)
    head.init_from_target(target)
    if args.init_from:
        head.load_exported(read_safetensors(os.path.join(args.init_from, "model.safetensors")))
    eval_sets = load_eval_sets(args, tokenizer)
    windows = train_windows(tokenizer, args.corpus, args.window, args.train_tokens, args.seed)
    batches = [windows[i:i + args.batch_windows]
               for i in range(0, len(windows), args.batch_windows)]
    print(f"{len(windows)} train windows of {args.window} tokens, {len(batches)} batches, "
          f"{sum(p.numel() for p in head.parameters())} parameters")
    print_eval(evaluate(args.kind, head, target, eval_sets, steps), "init")
    token_weight = args.token_loss_weight
    if token_weight is None:
        token_weight = 0.1 if args.kind == "eagle1" else 1.0
    optimizer = torch.optim.AdamW(head.parameters(), lr=args.lr, betas=(0.9, 0.95),
                                  weight_decay=args.weight_decay)
    start = time.time()
    trained_batches = 0
    progress = tqdm(batches, desc=f"train {args.kind}", dynamic_ncols=True)
    for step, batch in enumerate(progress):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, len(batches), args)
        draft, teacher, features = step_logits(args.kind, head, target, torch.tensor(batch),
                                               steps)
        loss, first_agreement = training_loss(draft, teacher, features, args.step_weight_decay,
                                              token_weight, args.feature_loss_weight)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), args.grad_clip)
        optimizer.step()
        trained_batches += 1
        progress.set_postfix(loss=f"{loss.item():.3f}", agree0=f"{first_agreement:.3f}")
        if args.time_limit_min and time.time() - start > 60 * args.time_limit_min:
            print(f"time limit reached after {trained_batches}/{len(batches)} batches")
            break
    wall_s = time.time() - start
    save_head(args.kind, head, target, args, args.out)
    _, saved_head, _ = load_saved_head(args.out, target)
    result = evaluate(args.kind, saved_head, target, eval_sets, steps)
    print_eval(result, "final, saved weights")
    write_json(os.path.join(args.out, "eval.json"), eval_record(args, steps, result, eval_sets))
    write_json(os.path.join(args.out, "train_log.json"), {
        "command": " ".join(sys.argv),
        "args": vars(args),
        "train_windows": trained_batches * args.batch_windows,
        "train_tokens": sum(len(w) for b in batches[:trained_batches] for w in b),
        "planned_batches": len(batches),
        "trained_batches": trained_batches,
        "train_wall_s": round(wall_s, 1),
        "machine": machine_name(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    })
    print(f"saved to {args.out}; training wall time {wall_s:.0f} s")


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    target = LlamaReference(args.target)
    tokenizer = load_tokenizer(args.target)
    if args.eval_only:
        run_eval_only(args, target, tokenizer)
    else:
        train(args, target, tokenizer)


if __name__ == "__main__":
    main()
