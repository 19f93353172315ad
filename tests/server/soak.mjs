// The server's soak, run by hand (as the [.soak] tests are): REQUESTS short completions through
// the OpenAI client at CONCURRENCY, every fifth and every seventh streamed, the seventh abandoned
// after its first chunk, a third speculative; the server's resident memory (VmRSS) is read after
// the first tenth and at the end, and the run fails if it grew by more than 10% (a leak of a
// request's record or channel grows it linearly), if an answer is malformed, if a request is
// still running at the end, or if the server does not exit 0 on SIGTERM.
//   node tests/server/soak.mjs SPECULA_BINARY SOURCE_DIR [REQUESTS (10000)] [CONCURRENCY (8)]
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [binary, sourceDir, requestsArg = '10000', concurrencyArg = '8'] = process.argv.slice(2);
assert.ok(binary && sourceDir, 'usage: soak.mjs SPECULA_BINARY SOURCE_DIR [REQUESTS] [CONCURRENCY]');
const requests = Number(requestsArg), concurrency = Number(concurrencyArg);
assert.ok(Number.isInteger(requests) && requests >= 10, `REQUESTS must be an integer >= 10, got '${requestsArg}'`);
assert.ok(Number.isInteger(concurrency) && concurrency >= 1, `CONCURRENCY must be a positive integer, got '${concurrencyArg}'`);
const draft = path.join(sourceDir, 'models/draft-1m');

const child = spawn(binary, ['serve', '--model', path.join(sourceDir, 'models/target-16m'), '--port', '0',
                             '--max-batch', String(concurrency), '--max-queue', String(2 * concurrency)],
                    { stdio: ['ignore', 'pipe', 'inherit'] });
let output = '';
const port = await new Promise((resolve, reject) => {
  child.stdout.on('data', (data) => {
    output += data;
    const m = output.match(/listening on http:\/\/[^:]+:(\d+)/);
    if (m) resolve(Number(m[1]));
  });
  child.on('exit', (code) => reject(new Error(`specula serve exited (${code}): ${output}`)));
});
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'none', maxRetries: 0 });
const rssKiB = () => Number(fs.readFileSync(`/proc/${child.pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+)/m)[1]);

let next = 0, done = 0, early = null;
const one = async (i) => {
  const body = { model: 'target-16m', prompt: `${i % 97} `, max_tokens: 6, temperature: i % 2 ? 0.8 : 0, seed: i,
                 specula: i % 3 === 0 ? { 'draft.method': 'model', 'draft.path': draft } : undefined };
  if (i % 5 === 0 || i % 7 === 0) {
    const stream = await client.completions.create({ ...body, stream: true });
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'text_completion');
      if (i % 7 === 0) break;  // the client's way to abandon a stream: it closes the connection
    }
    return;
  }
  const r = await client.completions.create(body);
  assert.equal(r.choices.length, 1);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
};
await Promise.all(Array.from({ length: concurrency }, async () => {
  while (next < requests) {
    await one(next++);
    if (++done === Math.floor(requests / 10)) early = rssKiB();
  }
}));
// Abandoned streams are cancelled at the engine's next turn; wait for the last of them.
let metrics = '';
for (let i = 0; i < 100; ++i) {
  metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  if (/^specula_running_requests 0$/m.test(metrics) && /^specula_queue_length 0$/m.test(metrics)) break;
  await new Promise((r) => setTimeout(r, 50));
}
const late = rssKiB();
const health = await (await fetch(`http://127.0.0.1:${port}/health`)).json();
child.kill('SIGTERM');
const code = await new Promise((resolve) => child.on('exit', resolve));
console.log(`soak: ${requests} requests at concurrency ${concurrency}; VmRSS ${early} KiB after ${Math.floor(requests / 10)}, ` +
            `${late} KiB at the end (${((late / early - 1) * 100).toFixed(1)}%); server exit ${code}`);
console.log(metrics.split('\n').filter((l) => l && !l.startsWith('#')).join('\n'));
assert.equal(health.status, 'ok');
assert.match(metrics, /^specula_running_requests 0$/m);
assert.equal(code, 0);
assert.ok(late <= early * 1.10, `VmRSS grew from ${early} to ${late} KiB`);
