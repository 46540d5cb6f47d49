// An AX tool worker (AX Tool Framework v0.1, §5): POST /run takes the request envelope
// { meta: { trace_id, tool_run_id, domain_id, deadline_ms }, input } and answers the response envelope;
// GET /healthz answers 200. It serves one tool, text.stats. Plain Node, no dependencies:
//   PORT=8081 WORKER_TOKEN=… node worker.mjs
// With WORKER_TOKEN set, a request must carry `Authorization: Bearer <WORKER_TOKEN>`.
import { createServer } from 'node:http';

const token = process.env.WORKER_TOKEN;
const MAX_REQUEST_BYTES = 1024 * 1024;

function send(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

function stats(text) {
  return {
    words: text.split(/\s+/).filter(Boolean).length,
    chars: [...text].length,
    lines: text === '' ? 0 : text.split('\n').length,
  };
}

async function run(envelope) {
  const { meta, input } = envelope;
  const started = Date.now();
  const answer = (fields) => ({ ...fields, meta: { trace_id: meta.trace_id, tool_run_id: meta.tool_run_id, duration_ms: Date.now() - started } });
  // The gateway validated the input against the manifest's schema; a worker checks only what it relies on.
  if (typeof input?.text !== 'string') {
    return answer({ ok: false, error: { code: 'VALIDATION_ERROR', message: 'input.text must be a string', retryable: false } });
  }
  // delay_ms makes the worker slow on purpose, to try the gateway's timeout.
  const delay = Math.min(Number(input.delay_ms) || 0, Math.max(0, meta.deadline_ms - Date.now()) + 1000);
  if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
  return answer({ ok: true, output: stats(input.text) });
}

const server = createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/healthz') return send(res, 200, { status: 'ok' });
  if (req.method !== 'POST' || req.url !== '/run') return send(res, 404, { error: 'not found' });
  if (token !== undefined && req.headers.authorization !== `Bearer ${token}`) return send(res, 401, { error: 'unauthorized' });
  const chunks = [];
  let size = 0;
  req.on('data', (chunk) => {
    size += chunk.length;
    if (size > MAX_REQUEST_BYTES) req.destroy();
    else chunks.push(chunk);
  });
  req.on('end', async () => {
    let envelope;
    try {
      envelope = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      return send(res, 400, { error: 'the body is not JSON' });
    }
    process.stdout.write(`run ${envelope?.meta?.tool_run_id}\n`);
    send(res, 200, await run(envelope));
  });
});

server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  process.stdout.write(`listening on http://127.0.0.1:${server.address().port}\n`);
});
