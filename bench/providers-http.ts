import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { Agent, request } from 'node:http';
import { join } from 'node:path';
import { httpProviderKind } from '../src/providers/http.js';
import type { Provider } from '../src/providers/provider.js';
import { median, percentile } from './stats.js';

const EXAMPLE = join(import.meta.dirname, '..', '..', 'examples', 'http-worker');

/**
 * What the `http` provider adds to a call of an AX tool worker: the example worker
 * (examples/http-worker/worker.mjs, a process of its own) called with the same input one call after
 * another, directly with `fetch` (the request envelope POSTed, the answer parsed) and through
 * `Provider.call` (the envelope built, the concurrency slot, the bounded read, the envelope checked),
 * interleaved call by call in the same run so that drift in the machine's load hits them alike. The
 * difference of the medians is the provider's cost; against `fetch` it is negative, since undici costs
 * more per request than the node:http client the provider uses, so the same request with that client is
 * timed too. The engine's own stages are not in it (see `mcp`).
 */
export async function benchProvidersHttp(): Promise<Record<string, unknown>> {
  const child = spawn(process.execPath, [join(EXAMPLE, 'worker.mjs')], { env: { ...process.env, PORT: '0' }, stdio: ['ignore', 'pipe', 'inherit'] });
  let live: Provider | undefined;
  try {
    const [first] = (await once(child.stdout, 'data')) as [Buffer];
    const base = /listening on (\S+)/.exec(first.toString())?.[1];
    if (!base) throw new Error(`the example worker did not say where it listens: ${first.toString()}`);
    // The worker is at a port of its own: the bundle's base_url is replaced, as `url` does in arium.json.
    live = httpProviderKind.create(
      'text',
      httpProviderKind.parse({ url: base, manifest: 'domain/manifest.yaml', policies: 'domain/policies.yaml' }, '/providers/text/http'),
      { projectDir: EXAMPLE, secret: () => undefined, log: () => {} },
    );
    await live.start();
    const input = { text: 'the quick brown fox jumps over the lazy dog\n'.repeat(20) };
    let n = 0;
    const direct = async () => {
      const runId = `direct-${n++}`;
      const res = await fetch(`${base}/run`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json' },
        body: JSON.stringify({ meta: { trace_id: runId, tool_run_id: runId, domain_id: 'text_tools', deadline_ms: Date.now() + 30_000 }, input }),
      });
      const body = (await res.json()) as { ok: boolean };
      if (!body.ok) throw new Error(JSON.stringify(body));
    };
    // The same request with the client the provider uses (node:http, keep-alive), so that the difference
    // to it is the provider's own work and not fetch's (undici's) cost per request.
    const agent = new Agent({ keepAlive: true });
    const url = new URL(`${base}/run`);
    const raw = () =>
      new Promise<void>((resolve, reject) => {
        const runId = `raw-${n++}`;
        const body = JSON.stringify({
          meta: { trace_id: runId, tool_run_id: runId, domain_id: 'text_tools', deadline_ms: Date.now() + 30_000 },
          input,
        });
        const req = request(
          url,
          { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
          (res) => {
            const chunks: Buffer[] = [];
            res.on('data', (c: Buffer) => chunks.push(c));
            res.on('end', () => ((JSON.parse(Buffer.concat(chunks).toString()) as { ok: boolean }).ok ? resolve() : reject(new Error('not ok'))));
          },
        );
        req.on('error', reject);
        req.end(body);
      });
    const throughProvider = async () => {
      const runId = `provider-${n++}`;
      const outcome = await (live as Provider).call('text.stats', input, {
        signal: new AbortController().signal,
        timeoutMs: 30_000,
        runId,
        traceId: runId,
      });
      if (!outcome.ok) throw new Error(outcome.message);
    };
    const time = async (fn: () => Promise<void>, into: number[]) => {
      const t0 = performance.now();
      await fn();
      into.push(performance.now() - t0);
    };
    for (let i = 0; i < 1_000; i++) {
      await direct();
      await raw();
      await throughProvider();
    }
    const directMs: number[] = [];
    const rawMs: number[] = [];
    const providerMs: number[] = [];
    for (let i = 0; i < 5_000; i++) {
      await time(direct, directMs);
      await time(raw, rawMs);
      await time(throughProvider, providerMs);
    }
    agent.destroy();
    return {
      calls_each: directMs.length,
      direct_fetch_median_ms: round(median(directMs)),
      provider_call_median_ms: round(median(providerMs)),
      provider_added_median_ms: round(median(providerMs) - median(directMs)),
      direct_node_http_median_ms: round(median(rawMs)),
      provider_added_over_node_http_median_ms: round(median(providerMs) - median(rawMs)),
      direct_fetch_p99_ms: round(percentile(directMs, 0.99)),
      provider_call_p99_ms: round(percentile(providerMs, 0.99)),
      target_added_ms: 1,
    };
  } finally {
    await live?.close();
    child.kill();
  }
}

const round = (ms: number) => Math.round(ms * 1000) / 1000;
