"""The Python module against the CLI: the same requests give the same tokens, errors carry the
CLI's messages, a batch equals its requests run alone, and decoding releases the GIL.

Run by CTest (python_bindings) with PYTHONPATH at BUILD/python and SPECULA_BINARY, the CLI."""
import json
import os
import pathlib
import subprocess
import threading
import time

import pytest

import specula

SOURCE = pathlib.Path(os.environ.get("SPECULA_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
TARGET = str(SOURCE / "models" / "target-16m")
DRAFT = str(SOURCE / "models" / "draft-1m")
CLI = os.environ["SPECULA_BINARY"]
PROMPTS = ["def fibonacci(n):", "The kernel", "int main(void) {"]


def cli_json(*args):
    threads = ["--threads", "1"] if args[0] == "generate" else []
    done = subprocess.run([CLI, *args, *threads, "--json"], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def model():
    return specula.Model(TARGET, threads=1)


def test_model_properties(model):
    assert model.path == TARGET
    assert model.vocab_size == 4096


def test_tokenize_and_decode_equal_the_cli(model):
    text = "int main(void) { return 0; }"
    ids = model.tokenize(text)
    assert ids == cli_json("tokenize", "--model", TARGET, "--text", text)["ids"]
    assert model.decode(ids[1:]) == text
    assert model.tokenize(ids) == ids  # ids pass as given


@pytest.mark.parametrize("draft", [[], ["--draft", DRAFT, "--gamma", "3"], ["--draft-method", "ngram"]])
def test_greedy_generate_equals_the_cli(model, draft):
    options = {}
    if "--draft" in draft:
        options = {"draft.method": "model", "draft.path": DRAFT, "draft.gamma": 3}
    elif draft:
        options = {"draft.method": "ngram"}
    for prompt in PROMPTS[:2]:
        ours = model.generate(prompt, max_new_tokens=24, options=options)
        theirs = cli_json("generate", "--model", TARGET, "--prompt", prompt, "--max-new-tokens", "24", *draft)
        assert ours["ids"] == theirs["ids"] and ours["text"] == theirs["text"]
        assert ours["stats"]["new_tokens"] == 24
        if draft:
            assert ours["stats"]["drafted"] > 0


def test_seeded_sampling_equals_the_cli(model):
    options = {"sampling.strategy": "sample", "sampling.temperature": 0.9, "sampling.top_p": 0.95,
               "draft.method": "model", "draft.path": DRAFT, "draft.gamma": 2}
    ours = model.generate(PROMPTS[0], max_new_tokens=16, seed=7, num_samples=2, options=options)
    theirs = cli_json("generate", "--model", TARGET, "--prompt", PROMPTS[0], "--max-new-tokens", "16", "--seed", "7",
                      "--num-samples", "2", "--sampler", "sample", "--temperature", "0.9", "--top-p", "0.95",
                      "--draft", DRAFT, "--gamma", "2")
    assert ours["samples"] == theirs["samples"]
    assert ours["samples"][0] != ours["samples"][1]
    other_seed = model.generate(PROMPTS[0], max_new_tokens=16, seed=8, num_samples=2, options=options)
    assert other_seed["samples"] != ours["samples"]


# Recognised as Qwen2.5's ChatML (text/chat_template.h): the target with this template.
CHATML = ("{%- if messages[0]['role'] != 'system' %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. "
          "You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}{%- for message in messages %}{{- '<|im_start|>' + "
          "message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{%- endfor %}"
          "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def test_chat_messages_and_logprobs(tmp_path):
    for file in pathlib.Path(TARGET).iterdir():
        if file.name != "tokenizer_config.json":
            (tmp_path / file.name).symlink_to(file)
    config = json.loads((pathlib.Path(TARGET) / "tokenizer_config.json").read_text())
    config["chat_template"] = CHATML
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    chat = specula.Model(str(tmp_path), threads=1)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
    ids = chat.tokenize(messages)
    assert ids == cli_json("tokenize", "--model", str(tmp_path), "--chat", "Name a colour.", "--system", "Be brief.")["ids"]
    out = chat.generate(messages, max_new_tokens=4, options={"output.logprobs": 2})
    theirs = cli_json("generate", "--model", str(tmp_path), "--chat", "Name a colour.", "--system", "Be brief.",
                      "--max-new-tokens", "4", "--logprobs", "2")
    assert out["ids"] == theirs["ids"] and out["logprobs"] == theirs["logprobs"]
    assert [len(t["top"]) for t in out["logprobs"]["content"]] == [2] * 4


def test_on_token_streams_every_token_in_order(model):
    seen = []
    out = model.generate(PROMPTS[2], max_new_tokens=12, options={"draft.method": "model", "draft.path": DRAFT},
                         on_token=lambda sample, token: seen.append((sample, token)))
    assert seen == [(0, t) for t in out["ids"]]


def test_batch_equals_each_request_alone(model):
    run = model.generate_batch(PROMPTS, batch_size=2, max_new_tokens=16, options={"draft.method": "ngram"},
                               request_options=[None, {"draft.gamma": 2}, {"run.max_new_tokens": 8}])
    assert run["summary"]["requests"] == 3
    alone = [model.generate(PROMPTS[0], max_new_tokens=16, options={"draft.method": "ngram"}),
             model.generate(PROMPTS[1], max_new_tokens=16, options={"draft.method": "ngram", "draft.gamma": 2}),
             model.generate(PROMPTS[2], max_new_tokens=8, options={"draft.method": "ngram"})]
    assert [r["ids"] for r in run["results"]] == [a["ids"] for a in alone]
    assert all("latency" in r for r in run["results"])


@pytest.mark.parametrize("call, message", [
    (lambda m: m.generate("x", options={"sampling.temprature": 0.5}), "options: unknown key 'sampling.temprature'"),
    (lambda m: m.generate("x", options={"draft.gamma": 0, "draft.method": "ngram"}), "options.draft.gamma"),
    (lambda m: m.generate("x", options={"run.threads": 2}), "set it on the Model"),
    (lambda m: m.generate("x", max_new_tokens=0), "max_new_tokens"),
    (lambda m: m.generate([99999]), "99999"),
    (lambda m: m.generate(""), "prompt is empty"),
    (lambda m: m.generate(3), "prompt must be a str"),
    (lambda m: m.generate("x", options={"sampling.temperature": float("nan")}), "options holds a value JSON cannot"),
    (lambda m: m.generate_batch(["a", "b"], request_options=[{}]), "request_options"),
    (lambda m: m.generate_batch(["a", "b"], request_options=[{}, {"draft.gamma": -1}]), "prompts[1]: options.draft.gamma"),
])
def test_errors_are_refused_by_name(model, call, message):
    with pytest.raises(specula.SpeculaError, match=None) as error:
        call(model)
    assert message in str(error.value)


def test_model_errors():
    with pytest.raises(specula.SpeculaError) as error:
        specula.Model(str(SOURCE / "models" / "no-such-model"))
    assert "no-such-model" in str(error.value)
    with pytest.raises(specula.SpeculaError, match="Model\\(backend=\\) must be"):
        specula.Model(TARGET, backend="tpu")


def test_decoding_releases_the_gil(model):
    # This thread's clock readings inside the generate call, 20 ms in from either end: none
    # could be taken there were the GIL held through the call (a switch interval is 5 ms).
    span = []

    def work():
        start = time.perf_counter()
        model.generate(PROMPTS[0], max_new_tokens=64)
        span.extend([start, time.perf_counter()])

    worker = threading.Thread(target=work)
    readings = []
    worker.start()
    while worker.is_alive():
        readings.append(time.perf_counter())
    worker.join()
    start, end = span
    assert end - start > 0.06, "the call was too short to tell"
    assert sum(start + 0.02 < t < end - 0.02 for t in readings) > 100


def test_run_experiment_and_read_results(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text(f"""
title = "bindings"
[target]
path = "{TARGET}"
[draft]
method = "ngram"
[run]
threads = 1
max_new_tokens = 8
repetitions = 1
prompts = [{{ id = "a", domain = "c", prompt = "int main(void) {{" }}]
[output]
directory = "{tmp_path / 'out'}"
formats = ["csv"]
""")
    run = specula.run_experiment(str(config))
    assert run["directory"] == str(tmp_path / "out")
    assert len(run["results"]) == 2  # the run and its target-alone baseline
    assert run["results"] == specula.read_results(run["directory"])
    speculative = [r for r in run["results"] if r["settings"]["draft"]["method"] == "ngram"]
    assert len(speculative) == 1 and speculative[0]["stats"]["new_tokens"] == 8
    with pytest.raises(specula.SpeculaError, match="--shard"):
        specula.run_experiment(str(config), shard="3/2")
