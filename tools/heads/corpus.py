"""Corpus windows: documents tokenized with the target's SentencePiece model, each
prefixed by BOS (id 1), concatenated into one stream and cut into fixed windows."""
import json
import os
import random

import sentencepiece

BOS_ID = 1
DOMAINS = ("python", "c", "changelog", "man")


def load_tokenizer(target_dir):
    return sentencepiece.SentencePieceProcessor(
        model_file=os.path.join(target_dir, "tokenizer.model"))


def read_documents(path):
    with open(path) as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def cut_windows(stream, window, max_windows):
    """Consecutive non-overlapping windows stream[j*window:(j+1)*window]; a short tail is dropped."""
    count = min(len(stream) // window, max_windows)
    return [stream[j * window:(j + 1) * window] for j in range(count)]


def eval_windows(tokenizer, corpus_dir, domain, window, count):
    """The fixed eval set of a domain: the first `count` windows of `window` tokens of the
    BOS-separated stream of <domain>.eval.jsonl in file order."""
    stream = []
    for text in read_documents(os.path.join(corpus_dir, f"{domain}.eval.jsonl")):
        stream += [BOS_ID] + tokenizer.encode(text)
        if len(stream) >= window * count:
            break
    return cut_windows(stream, window, count)


def train_windows(tokenizer, corpus_dir, window, token_budget, seed):
    """Documents of all four train splits, shuffled together with `seed`, tokenized until
    the stream holds token_budget tokens, cut into windows of `window` tokens; the windows
    are then shuffled with `seed` so that a long document does not fill consecutive batches."""
    documents = []
    for domain in DOMAINS:
        documents += read_documents(os.path.join(corpus_dir, f"{domain}.train.jsonl"))
    random.Random(seed).shuffle(documents)
    stream = []
    for text in documents:
        stream += [BOS_ID] + tokenizer.encode(text)
        if len(stream) >= token_budget:
            break
    windows = cut_windows(stream, window, token_budget // window)
    random.Random(seed).shuffle(windows)
    return windows
