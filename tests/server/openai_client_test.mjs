// `specula serve` against the official OpenAI client (the openai npm package, tests/server/package.json):
// whole and streamed completions and chat completions, greedy and seeded sampling, plain and
// speculative, at concurrency 1, 8, 32 and 64, equal to `specula generate`'s output; refusals (400
// naming the field, 401, 404, 429, the KV pool); a client that leaves mid-stream; the drain on SIGTERM.
//   node tests/server/openai_client_test.mjs SPECULA_BINARY SOURCE_DIR
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [binary, sourceDir] = process.argv.slice(2);
assert.ok(binary && sourceDir, 'usage: openai_client_test.mjs SPECULA_BINARY SOURCE_DIR');
const target = path.join(sourceDir, 'models/target-16m');
const draft = path.join(sourceDir, 'models/draft-1m');
const apiKey = 'sk-specula-test';

// target-16m with a chat template (Mistral's, which it has never seen) for the chat routes.
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'specula-serve-'));
const model = path.join(work, 'target-16m');
fs.mkdirSync(model);
for (const file of fs.readdirSync(target))
  if (file !== 'tokenizer_config.json') fs.symlinkSync(path.join(target, file), path.join(model, file));
const config = JSON.parse(fs.readFileSync(path.join(target, 'tokenizer_config.json'), 'utf8'));
config.chat_template = "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}";
fs.writeFileSync(path.join(model, 'tokenizer_config.json'), JSON.stringify(config));

const prompts = ['def fibonacci(n):\n', '#include <stdio.h>\n', 'specula (0.1) unstable; urgency=low\n', 'NAME\n       ls - '];

// `specula generate --json` of one prompt (extra flags appended).
function cli(args) {
  const out = execFileSync(binary, ['generate', '--model', model, '--json', ...args], { encoding: 'utf8' });
  return JSON.parse(out);
}

function startServer(args) {
  const child = spawn(binary, ['serve', '--model', model, '--port', '0', ...args],
                      { stdio: ['ignore', 'pipe', 'inherit'] });
  let output = '';
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const port = new Promise((resolve, reject) => {
    child.stdout.on('data', (data) => {
      output += data;
      const m = output.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    exited.then(({ code }) => reject(new Error(`specula serve exited (${code}) before listening: ${output}`)));
  });
  return { child, port, exited, output: () => output };
}

function checkUsage(usage) {
  for (const field of ['prompt_tokens', 'completion_tokens', 'total_tokens']) assert.ok(Number.isInteger(usage[field]), field);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
}

function checkCompletion(response, kind, choices = 1) {
  assert.match(response.id, kind === 'chat' ? /^chatcmpl-/ : /^cmpl-/);
  assert.equal(response.object, kind === 'chat' ? 'chat.completion' : 'text_completion');
  assert.equal(response.model, 'target-16m');
  assert.ok(Number.isInteger(response.created));
  assert.equal(response.choices.length, choices);
  response.choices.forEach((c, i) => {
    assert.equal(c.index, i);
    assert.ok(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
    assert.equal(typeof (kind === 'chat' ? c.message.content : c.text), 'string');
    if (kind === 'chat') assert.equal(c.message.role, 'assistant');
  });
  checkUsage(response.usage);
}

// A streamed request through the client: each choice's text, finish reason and the usage chunk;
// onFirstChunk runs once the first chunk is in.
async function streamed(client, kind, body, onFirstChunk = () => {}) {
  const stream = kind === 'chat'
    ? await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } })
    : await client.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  const texts = [], reasons = [];
  let usage = null, id = null;
  for await (const chunk of stream) {
    if (id === null) onFirstChunk();
    assert.equal(chunk.object, kind === 'chat' ? 'chat.completion.chunk' : 'text_completion');
    id ??= chunk.id;
    assert.equal(chunk.id, id);
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      texts[c.index] = (texts[c.index] ?? '') + ((kind === 'chat' ? c.delta.content : c.text) ?? '');
      if (c.finish_reason) reasons[c.index] = c.finish_reason;
    }
  }
  assert.ok(usage, 'no usage chunk');
  checkUsage(usage);
  return { texts, reasons, usage };
}

// A streamed request's log-probabilities, each choice's chunks joined: completions' four lists,
// chat's content list. Every chunk with text carries them.
async function streamedLogprobs(client, kind, body) {
  const stream = kind === 'chat'
    ? await client.chat.completions.create({ ...body, stream: true })
    : await client.completions.create({ ...body, stream: true });
  const joined = [];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      if (c.finish_reason) continue;
      assert.ok(c.logprobs, `a chunk without logprobs: ${JSON.stringify(chunk)}`);
      if (kind === 'chat') {
        joined[c.index] ??= { content: [], refusal: null };
        joined[c.index].content.push(...c.logprobs.content);
      } else {
        joined[c.index] ??= { tokens: [], token_logprobs: [], top_logprobs: c.logprobs.top_logprobs && [], text_offset: [] };
        for (const field of ['tokens', 'token_logprobs', 'text_offset']) joined[c.index][field].push(...c.logprobs[field]);
        if (c.logprobs.top_logprobs) joined[c.index].top_logprobs.push(...c.logprobs.top_logprobs);
      }
    }
  }
  return joined;
}

async function expectStatus(promise, status, pattern) {
  try {
    await promise;
  } catch (e) {
    assert.equal(e.status, status, `${e.status} ${e.message}`);
    if (pattern) assert.match(e.error?.message ?? e.message, pattern);
    return e;
  }
  assert.fail(`expected HTTP ${status}`);
}

async function post(url, body, headers = {}) {
  const response = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}`, ...headers }, body });
  return { status: response.status, body: await response.text() };
}

const started = Date.now();
const step = (what) => console.log(`[${((Date.now() - started) / 1000).toFixed(1)} s] ${what}`);
const maxTokens = 12;
const reference = prompts.map((p) => cli(['--prompt', p, '--max-new-tokens', String(maxTokens)]));
const sampledReference = cli(['--prompt', prompts[0], '--max-new-tokens', String(maxTokens), '--sampler', 'sample',
                              '--temperature', '0.8', '--seed', '7', '--num-samples', '2']);
const stopReference = cli(['--prompt', prompts[0], '--max-new-tokens', '24', '--stop', '(']);
const chatReference = cli(['--chat', 'Write a loop in C.', '--max-new-tokens', String(maxTokens)]);
const logprobsReference = cli(['--prompt', prompts[1], '--max-new-tokens', String(maxTokens), '--logprobs', '2']);
const longReference = cli(['--prompt', prompts[2], '--max-new-tokens', '600', '--min-new-tokens', '600']);
const beamReference = cli(['--prompt', prompts[0], '--max-new-tokens', String(maxTokens), '--sampler', 'beam', '--beam-width', '4']);
step('CLI reference');

const server = startServer(['--api-key', apiKey, '--max-batch', '16', '--max-queue', '64']);
const port = await server.port;
const base = `http://127.0.0.1:${port}`;
const client = new OpenAI({ apiKey, baseURL: `${base}/v1`, maxRetries: 0 });
try {
  assert.deepEqual(await (await fetch(`${base}/health`)).json(), { status: 'ok' });
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ['target-16m']);

  // Greedy, whole and streamed, plain and speculative: the CLI's text and counts.
  for (const specula of [undefined, { 'draft.method': 'model', 'draft.path': draft, 'draft.gamma': 3 }]) {
    for (let i = 0; i < prompts.length; ++i) {
      const body = { model: 'target-16m', prompt: prompts[i], max_tokens: maxTokens, temperature: 0, specula };
      const whole = await client.completions.create(body);
      checkCompletion(whole, 'completion');
      assert.equal(whole.choices[0].text, reference[i].text, `prompt ${i}`);
      assert.equal(whole.usage.prompt_tokens, reference[i].stats.prompt_tokens);
      assert.equal(whole.usage.completion_tokens, reference[i].stats.new_tokens);
      if (specula) assert.ok(whole.specula.stats.drafted > 0, 'speculative request drafted nothing');
      const stream = await streamed(client, 'completion', body);
      assert.deepEqual(stream.texts, [reference[i].text]);
      assert.deepEqual(stream.usage, whole.usage);
      assert.deepEqual(stream.reasons, [reference[i].finish_reason === 'length' ? 'length' : 'stop']);
    }
  }
  step('greedy, plain and speculative');

  // Seeded sampling, two choices: the CLI's samples, whole and streamed.
  const sampled = { model: 'target-16m', prompt: prompts[0], max_tokens: maxTokens, temperature: 0.8, seed: 7, n: 2 };
  const sampledWhole = await client.completions.create(sampled);
  checkCompletion(sampledWhole, 'completion', 2);
  assert.deepEqual(sampledWhole.choices.map((c) => c.text), sampledReference.sample_texts);
  assert.deepEqual((await streamed(client, 'completion', sampled)).texts, sampledReference.sample_texts);
  const sampledSpeculative = await client.completions.create({ ...sampled, specula: { 'draft.method': 'model', 'draft.path': draft } });
  checkCompletion(sampledSpeculative, 'completion', 2);
  step('seeded sampling');

  // Stop strings and chat.
  const stopped = await client.completions.create({ model: 'target-16m', prompt: prompts[0], max_tokens: 24, temperature: 0, stop: '(' });
  assert.equal(stopped.choices[0].text, stopReference.text);
  assert.equal(stopped.choices[0].finish_reason, stopReference.finish_reason === 'length' ? 'length' : 'stop');
  const chatBody = { model: 'target-16m', messages: [{ role: 'user', content: 'Write a loop in C.' }], max_completion_tokens: maxTokens, temperature: 0 };
  const chat = await client.chat.completions.create(chatBody);
  checkCompletion(chat, 'chat');
  assert.equal(chat.choices[0].message.content, chatReference.text);
  assert.deepEqual((await streamed(client, 'chat', chatBody)).texts, [chatReference.text]);
  step('stop strings, chat');

  // Log-probabilities: the CLI's, in each endpoint's shape.
  const withLogprobs = await client.completions.create({ model: 'target-16m', prompt: prompts[1], max_tokens: maxTokens, temperature: 0, logprobs: 2 });
  const lp = withLogprobs.choices[0].logprobs;
  assert.equal(lp.tokens.join(''), withLogprobs.choices[0].text);
  assert.deepEqual(lp.token_logprobs, logprobsReference.logprobs.content.map((t) => t.logprob));
  assert.deepEqual(lp.text_offset, lp.tokens.map((_, i) => lp.tokens.slice(0, i).join('').length));
  lp.top_logprobs.forEach((top) => assert.ok(Object.keys(top).length >= 1 && Object.keys(top).length <= 2));
  const chatLogprobs = await client.chat.completions.create({ ...chatBody, logprobs: true, top_logprobs: 3 });
  const content = chatLogprobs.choices[0].logprobs.content;
  assert.equal(content.length, chatLogprobs.usage.completion_tokens);
  assert.equal(content.map((t) => t.token).join(''), chatLogprobs.choices[0].message.content);
  content.forEach((t) => assert.equal(t.top_logprobs.length, 3));
  assert.deepEqual(content[0].bytes, [...Buffer.from(content[0].token)]);
  step('logprobs');

  // Streamed logprobs: each choice's chunks joined are the whole response's, greedy and
  // seeded, plain and speculative, and under a stop string (whose held-back text carries its
  // tokens' logprobs with it).
  for (const specula of [undefined, { 'draft.method': 'model', 'draft.path': draft, 'draft.gamma': 3 }]) {
    for (const sampling of [{ temperature: 0 }, { temperature: 0.8, seed: 7, n: 2 }]) {
      const cases = [
        ['completion', { model: 'target-16m', prompt: prompts[1], max_tokens: maxTokens, logprobs: 2 }],
        ['completion', { model: 'target-16m', prompt: prompts[0], max_tokens: 24, logprobs: 0, stop: ['(', 'ib('] }],
        ['chat', { ...chatBody, logprobs: true, top_logprobs: 3 }],
        ['chat', { ...chatBody, logprobs: true }],
      ];
      for (const [kind, request] of cases) {
        const body = { ...request, ...sampling, specula };
        const whole = kind === 'chat' ? await client.chat.completions.create(body) : await client.completions.create(body);
        const joined = await streamedLogprobs(client, kind, body);
        const what = `${kind} ${JSON.stringify(body)}`;
        assert.equal(joined.length, whole.choices.length, what);
        whole.choices.forEach((c, i) => {
          assert.deepEqual(joined[i], c.logprobs, what);
          const texts = kind === 'chat' ? c.logprobs.content.map((t) => t.token) : c.logprobs.tokens;
          assert.ok(texts.length > 0, what);
          // The tokens' texts begin with the choice's text: a stop string cuts the text, not the token it began in.
          assert.ok(texts.join('').startsWith(kind === 'chat' ? c.message.content : c.text), what);
          if (c.finish_reason === 'length') assert.equal(texts.join(''), kind === 'chat' ? c.message.content : c.text, what);
        });
      }
    }
  }
  step('streamed logprobs');

  // Concurrency: every connection's requests batch together; each answer is still the CLI's.
  for (const concurrency of [1, 8, 32, 64]) {
    const jobs = Array.from({ length: concurrency }, async (_, k) => {
      const i = k % prompts.length;
      const body = { model: 'target-16m', prompt: prompts[i], max_tokens: maxTokens, temperature: 0,
                     specula: k % 3 === 2 ? { 'draft.method': 'model', 'draft.path': draft } : undefined };
      if (k % 2 === 1) return assert.deepEqual((await streamed(client, 'completion', body)).texts, [reference[i].text]);
      const whole = await client.completions.create(body);
      checkCompletion(whole, 'completion');
      assert.equal(whole.choices[0].text, reference[i].text);
    });
    await Promise.all(jobs);
    step(`concurrency ${concurrency}`);
  }

  // The raw stream: server-sent events, each a JSON chunk, ending with [DONE].
  const raw = await post(`${base}/v1/completions`, JSON.stringify({ model: 'target-16m', prompt: prompts[1], max_tokens: 4, stream: true }));
  assert.equal(raw.status, 200);
  const events = raw.body.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
  assert.equal(events.at(-1), '[DONE]');
  events.slice(0, -1).forEach((e) => assert.equal(JSON.parse(e).object, 'text_completion'));

  // Refusals name the field and the value.
  const refused = async (body, status, pattern, param) => {
    const r = await post(`${base}/v1/completions`, body);
    assert.equal(r.status, status, r.body);
    const error = JSON.parse(r.body).error;
    assert.equal(typeof error.type, 'string');
    assert.match(error.message, pattern);
    if (param !== undefined) assert.equal(error.param, param);
  };
  await refused('{"model": "target-16m", "prompt": ', 400, /not valid JSON/);
  await refused(JSON.stringify({ model: 'target-16m', prompt: 'x', max_tokens: '8' }), 400, /'max_tokens' must be an integer, got "8"/, 'max_tokens');
  await refused(JSON.stringify({ model: 'target-16m', prompt: 'x', colour: 'blue' }), 400, /unknown field 'colour'/, 'colour');
  await refused(JSON.stringify({ model: 'target-16m', prompt: 'x', temperature: 3 }), 400, /'temperature' must be in \[0, 2\], got 3/, 'temperature');
  await refused(JSON.stringify({ model: 'target-16m', prompt: 'x', echo: true }), 400, /'echo' is not supported/, 'echo');
  await refused(JSON.stringify({ model: 'target-16m', prompt: 'x', specula: { 'draft.gama': 4 } }), 400, /specula: unknown key 'draft.gama'/);
  await refused(JSON.stringify({ model: 'target-16m', prompt: 'x', specula: { 'draft.method': 'model', 'draft.path': draft, 'draft.gamma': -1 } }), 400, /specula\.draft\.gamma/);
  await refused(JSON.stringify({ model: 'target-16m', prompt: 'x', top_p: 0.5 }), 400, /top_p/);
  await refused(JSON.stringify({ model: 'gpt-4', prompt: 'x' }), 404, /'gpt-4' does not exist/, 'model');
  const noRoute = await fetch(`${base}/v1/embeddings`, { headers: { Authorization: `Bearer ${apiKey}` } });
  assert.equal(noRoute.status, 404);
  assert.match((await noRoute.json()).error.message, /no route for GET \/v1\/embeddings/);
  await expectStatus(client.completions.create({ model: 'target-16m', prompt: 'x', max_tokens: 4096 }), 400, /max_tokens|prompt/);
  await expectStatus(new OpenAI({ apiKey: 'wrong', baseURL: `${base}/v1`, maxRetries: 0 }).models.list(), 401);
  assert.equal((await fetch(`${base}/v1/models`)).status, 401);
  step('refusals');

  // A client that leaves mid-stream: its request is cancelled, and the server goes on serving.
  const controller = new AbortController();
  const leaving = await client.completions.create({ model: 'target-16m', prompt: prompts[2], max_tokens: 1000, stream: true },
                                                  { signal: controller.signal });
  let received = 0;
  for await (const chunk of leaving) {
    if (++received < 2) continue;
    controller.abort();
    break;
  }
  const after = await client.completions.create({ model: 'target-16m', prompt: prompts[0], max_tokens: maxTokens, temperature: 0 });
  assert.equal(after.choices[0].text, reference[0].text);
  let metrics = '';
  for (let tries = 0; tries < 100; ++tries) {  // the cancellation lands at the engine's next step
    metrics = await (await fetch(`${base}/metrics`)).text();
    if (/^specula_requests_cancelled_total 1$/m.test(metrics) && /^specula_running_requests 0$/m.test(metrics)) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.match(metrics, /^specula_requests_cancelled_total 1$/m, metrics);
  assert.match(metrics, /^specula_running_requests 0$/m, metrics);
  const counter = (name) => Number(metrics.match(new RegExp(`^${name} (\\d+)$`, 'm'))[1]);
  assert.ok(counter('specula_requests_total') >= 60, metrics);
  assert.ok(counter('specula_generation_tokens_total') > 0 && counter('specula_prompt_tokens_total') > 0, metrics);
  assert.ok(counter('specula_accepted_tokens_total') > 0 && counter('specula_draft_tokens_total') >= counter('specula_accepted_tokens_total'), metrics);
  // Chains: the drafts reaching position 1 hold every longer accepted path, and the positions
  // count the accepted tokens.
  const perPosition = [...metrics.matchAll(/^specula_spec_decode_num_accepted_tokens_per_pos_total\{position="(\d+)"\} (\d+)$/mg)]
    .map((m) => Number(m[2]));
  assert.ok(perPosition.length > 0, metrics);
  assert.equal(perPosition.reduce((a, b) => a + b, 0), counter('specula_accepted_tokens_total'), metrics);
  perPosition.forEach((v, i) => assert.ok(i === 0 || v <= perPosition[i - 1], metrics));
  assert.ok(counter('specula_spec_decode_num_drafts_total') >= perPosition[0], metrics);
  assert.ok(counter('specula_engine_sequence_steps_total') >= counter('specula_engine_steps_total') &&
            counter('specula_engine_steps_total') > 0, metrics);
  step('client abort, metrics');

  // A whole response not ready at once is preceded by spaces; its body is the same JSON.
  const longBody = { model: 'target-16m', prompt: prompts[2], max_tokens: 600, temperature: 0, specula: { 'sampling.min_new_tokens': 600 } };
  const long = await post(`${base}/v1/completions`, JSON.stringify(longBody));
  assert.equal(long.status, 200);
  assert.match(long.body, /^ +\{"choices"/);
  const longParsed = JSON.parse(long.body);
  assert.equal(longParsed.choices[0].text, longReference.text);
  assert.deepEqual(longParsed.usage, { prompt_tokens: longReference.stats.prompt_tokens, completion_tokens: 600, total_tokens: longReference.stats.prompt_tokens + 600 });
  const longWhole = await client.completions.create(longBody);
  assert.equal(longWhole.choices[0].text, longReference.text);
  assert.deepEqual(longWhole.usage, longParsed.usage);

  // A client that leaves a whole request: the request is cancelled and its blocks freed long
  // before its 2000 steps (greedy plain decoding: one token a step) are done.
  metrics = await (await fetch(`${base}/metrics`)).text();
  const stepsBefore = counter('specula_engine_steps_total');
  const wholeController = new AbortController();
  const abandoned = client.completions.create({ model: 'target-16m', prompt: prompts[2], max_tokens: 2000, temperature: 0,
                                                specula: { 'sampling.min_new_tokens': 2000 } }, { signal: wholeController.signal });
  setTimeout(() => wholeController.abort(), 500);
  await assert.rejects(abandoned, (e) => ['AbortError', 'APIUserAbortError'].includes(e.name));
  for (let tries = 0; tries < 100; ++tries) {
    metrics = await (await fetch(`${base}/metrics`)).text();
    if (/^specula_requests_cancelled_total 2$/m.test(metrics) && /^specula_running_requests 0$/m.test(metrics)) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.match(metrics, /^specula_requests_cancelled_total 2$/m, metrics);
  assert.match(metrics, /^specula_running_requests 0$/m, metrics);
  assert.match(metrics, /^specula_kv_blocks_in_use 0$/m, metrics);
  assert.ok(counter('specula_engine_steps_total') - stepsBefore < 1500, metrics);
  step('a client that leaves a whole request');

  // Beam search runs alone; a beam request and plain ones sent together all finish with the CLI's text.
  const beamBody = { model: 'target-16m', prompt: prompts[0], max_tokens: maxTokens, specula: { 'sampling.strategy': 'beam', 'sampling.beam_width': 4 } };
  const [beam, ...plain] = await Promise.all([
    client.completions.create(beamBody),
    ...prompts.map((p) => client.completions.create({ model: 'target-16m', prompt: p, max_tokens: maxTokens, temperature: 0 })),
    streamed(client, 'completion', { model: 'target-16m', prompt: prompts[1], max_tokens: maxTokens, temperature: 0 }),
  ]);
  assert.equal(beam.choices[0].text, beamReference.text);
  prompts.forEach((_, i) => assert.equal(plain[i].choices[0].text, reference[i].text, `prompt ${i} beside a beam request`));
  assert.deepEqual(plain.at(-1).texts, [reference[1].text]);
  step('beam beside plain requests');

  // SIGTERM while a stream runs: it finishes whole, the server exits 0.
  const draining = await streamed(client, 'completion', { model: 'target-16m', prompt: prompts[3], max_tokens: maxTokens, temperature: 0 },
                                  () => server.child.kill('SIGTERM'));
  assert.deepEqual(draining.texts, [reference[3].text]);
  assert.deepEqual(await server.exited, { code: 0, signal: null });
  step('SIGTERM drain');
} finally {
  server.child.kill('SIGKILL');
}

// A small queue and KV pool: overflow is 429, a request larger than the pool is 400 with its sizes.
const small = startServer(['--max-queue', '2', '--max-batch', '1', '--kv-pool-blocks', '16']);
try {
  const smallClient = new OpenAI({ apiKey: 'unused', baseURL: `http://127.0.0.1:${await small.port}/v1`, maxRetries: 0 });
  const results = await Promise.allSettled(Array.from({ length: 8 }, () =>
    smallClient.completions.create({ model: 'target-16m', prompt: prompts[0], max_tokens: 48, temperature: 0 })));
  const full = results.filter((r) => r.status === 'rejected');
  assert.ok(full.length >= 1 && full.length <= 6, `${full.length} refused`);
  for (const r of full) {
    assert.equal(r.reason.status, 429, String(r.reason));
    assert.match(r.reason.error.message, /queue is full/);
  }
  results.filter((r) => r.status === 'fulfilled').forEach((r) => checkCompletion(r.value, 'completion'));
  await expectStatus(smallClient.completions.create({ model: 'target-16m', prompt: prompts[0], max_tokens: 1000 }), 400,
                     /--kv-pool-blocks 16 is below the \d+ blocks a request of \d+ prompt tokens and 1000 new tokens needs/);
  small.child.kill('SIGTERM');
  assert.deepEqual(await small.exited, { code: 0, signal: null });
  step('queue overflow, KV pool');
} finally {
  small.child.kill('SIGKILL');
  fs.rmSync(work, { recursive: true, force: true });
}
console.log('openai client test: passed');
