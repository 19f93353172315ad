// The serving table: `specula serve` under the official OpenAI client (tests/server's openai
// package) at each concurrency, streamed completions of the dev prompts, one server per drafter
// setting (--settings: a comma-separated list of the names in `settings` below, plain among
// them; all by default), the settings alternated over repetitions. Per cell: output tokens/s over the wall
// time, time to first token and inter-token latency (a request's (last - first chunk time) /
// (tokens - 1)), p50 and p99 over the requests, medians over the repetitions.
//   node bench/serve_bench.mjs SPECULA_BINARY SOURCE_DIR [--concurrency 1,8,32,64] [--tokens 64]
//        [--requests-per-client 2] [--repetitions 3] [--threads 1] [--settings plain,eagle3] [--json OUT]
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const args = process.argv.slice(2);
const [binary, sourceDir] = args;
if (!binary || !sourceDir) {
  console.error('usage: serve_bench.mjs SPECULA_BINARY SOURCE_DIR [--concurrency LIST] [--tokens N] ' +
                '[--requests-per-client N] [--repetitions N] [--threads N] [--settings LIST] [--json OUT]');
  process.exit(2);
}
const flag = (name, fallback) => {
  const i = args.indexOf(name);
  return i < 0 ? fallback : args[i + 1];
};
const positive = (name, fallback) => {
  const value = Number(flag(name, fallback));
  if (!Number.isInteger(value) || value < 1) {
    console.error(`serve_bench: ${name} must be a positive integer, got '${flag(name, fallback)}'`);
    process.exit(2);
  }
  return value;
};
const concurrencies = String(flag('--concurrency', '1,8,32,64')).split(',').map((c) => {
  const value = Number(c);
  if (!Number.isInteger(value) || value < 1) {
    console.error(`serve_bench: --concurrency must list positive integers, got '${c}'`);
    process.exit(2);
  }
  return value;
});
const tokens = positive('--tokens', 64);
const perClient = positive('--requests-per-client', 2);
const repetitions = positive('--repetitions', 3);
const threads = positive('--threads', 1);
const jsonOut = flag('--json', null);

const OpenAI = createRequire(path.join(sourceDir, 'tests/server/package.json'))('openai');
const model = path.join(sourceDir, 'models/target-16m');
const prompts = fs.readFileSync(path.join(sourceDir, 'configs/prompts/dev.jsonl'), 'utf8')
  .split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l).prompt);

const allSettings = {
  plain: [],
  'draft-1m load': ['--option', 'draft.method=model', '--option', `draft.path=${path.join(sourceDir, 'models/draft-1m')}`,
                    '--option', 'draft.gamma=4', '--option', 'draft.gamma_policy=load'],
  'n-gram': ['--option', 'draft.method=ngram', '--option', 'draft.gamma=4'],
  // The EAGLE-3 head of target-16m drafting chains of one token.
  eagle3: ['--option', 'draft.method=eagle3', '--option', `draft.path=${path.join(sourceDir, 'models/target-16m-eagle3')}`,
           '--option', 'draft.gamma=1', '--option', 'draft.gamma_policy=fixed'],
};
const chosen = flag('--settings', null)?.split(',') ?? Object.keys(allSettings);
for (const name of chosen) {
  if (!(name in allSettings)) {
    console.error(`serve_bench: --settings: unknown setting '${name}' (known: ${Object.keys(allSettings).join(', ')})`);
    process.exit(2);
  }
}
if (!chosen.includes('plain')) {
  console.error(`serve_bench: --settings must include plain (the x plain column's base), got '${chosen.join(',')}'`);
  process.exit(2);
}
const settings = Object.fromEntries(chosen.map((name) => [name, allSettings[name]]));

function startServer(extra, maxBatch) {
  const child = spawn(binary, ['serve', '--model', model, '--port', '0', '--threads', String(threads),
                               '--max-batch', String(maxBatch), '--max-queue', String(Math.max(64, maxBatch)), ...extra],
                      { stdio: ['ignore', 'pipe', 'inherit'] });
  let output = '';
  return new Promise((resolve, reject) => {
    child.stdout.on('data', (data) => {
      output += data;
      const m = output.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) resolve({ child, port: Number(m[1]) });
    });
    child.on('exit', (code) => reject(new Error(`specula serve exited (${code}) before listening: ${output}`)));
  });
}

function quantile(values, q) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}
const median = (values) => quantile(values, 0.5);

// One request, streamed: its first and last chunk times after `start` and its token count.
async function request(client, prompt) {
  const start = performance.now();
  let first = null, last = null, completion = 0;
  const stream = await client.completions.create({
    model: 'target-16m', prompt, max_tokens: tokens, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  for await (const chunk of stream) {
    if (chunk.usage) completion = chunk.usage.completion_tokens;
    if (chunk.choices?.[0]?.text) {
      last = performance.now() - start;
      if (first === null) first = last;
    }
  }
  return { ttft: first, itl: completion > 1 ? (last - first) / (completion - 1) : null, completion };
}

// `concurrency` clients, each sending `perClient` requests one after another.
async function cell(port, concurrency) {
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'none', maxRetries: 0 });
  let next = 0;
  const results = [];
  const start = performance.now();
  await Promise.all(Array.from({ length: concurrency }, async () => {
    for (let i = 0; i < perClient; ++i) results.push(await request(client, prompts[next++ % prompts.length]));
  }));
  const wall = (performance.now() - start) / 1000;
  const completion = results.reduce((sum, r) => sum + r.completion, 0);
  const ttfts = results.map((r) => r.ttft).filter((v) => v !== null);
  const itls = results.map((r) => r.itl).filter((v) => v !== null);
  return {
    tokens_per_s: completion / wall, ttft_p50_ms: median(ttfts), ttft_p99_ms: quantile(ttfts, 0.99),
    itl_p50_ms: median(itls), itl_p99_ms: quantile(itls, 0.99),
  };
}

const runs = [];
for (const concurrency of concurrencies) {
  for (let rep = 0; rep < repetitions; ++rep) {
    const names = Object.keys(settings);
    const order = rep % 2 === 0 ? names : [...names].reverse();  // alternated
    for (const name of order) {
      const { child, port } = await startServer(settings[name], concurrency);
      try {
        runs.push({ setting: name, concurrency, repetition: rep, ...(await cell(port, concurrency)) });
      } finally {
        child.kill('SIGTERM');
        await new Promise((resolve) => child.on('exit', resolve));
      }
    }
  }
}

const fields = ['tokens_per_s', 'ttft_p50_ms', 'ttft_p99_ms', 'itl_p50_ms', 'itl_p99_ms'];
console.log('| concurrency | setting | output tok/s | x plain | TTFT p50 / p99 ms | ITL p50 / p99 ms |');
console.log('|---|---|---|---|---|---|');
for (const concurrency of concurrencies) {
  const of = (name) => {
    const mine = runs.filter((r) => r.concurrency === concurrency && r.setting === name);
    return Object.fromEntries(fields.map((f) => [f, median(mine.map((r) => r[f]))]));
  };
  const plain = of('plain');
  for (const name of Object.keys(settings)) {
    const m = of(name);
    console.log(`| ${concurrency} | ${name} | ${m.tokens_per_s.toFixed(0)} | ${(m.tokens_per_s / plain.tokens_per_s).toFixed(2)} | ` +
                `${m.ttft_p50_ms.toFixed(0)} / ${m.ttft_p99_ms.toFixed(0)} | ${m.itl_p50_ms.toFixed(1)} / ${m.itl_p99_ms.toFixed(1)} |`);
  }
}
if (jsonOut) fs.writeFileSync(jsonOut, JSON.stringify(runs, null, 1));
