import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine.js';
import { createGateway, type Gateway } from '../src/surfaces/http/gateway.js';
import { type TempProject, tempProject } from './support/project.js';

/**
 * The routes of the gateway and the resources of the MCP server act with their surface's grants, as a
 * call from that surface would: with `vfs.read:/pub/**` and `vfs.write:/pub/**` only, nothing of
 * /private is read, listed, diffed, shown in events or approvals, snapshotted or restored over.
 */

const GRANTS = ['vfs.read:/pub/**', 'vfs.write:/pub/**'];
/** Content and a name of /private that no request names: neither may appear in any answer. */
const CONTENT = 'PRIVATE-CONTENT-7f3a';
const LATER = 'PRIVATE-LATER-9c1e';
const HIDDEN = 'hidden-name-5d2b';

let project: TempProject;
let gateway: Gateway;
let base: string;
let engine: Engine;
/** A committed call of the host that changed /private and /pub. */
let hostRun: string;

beforeAll(async () => {
  project = tempProject();
  writeFileSync(
    join(project.dir, 'arium.json'),
    JSON.stringify({
      surfaces: { http: { grants: GRANTS }, mcp: { grants: GRANTS } },
      approvals: { rules: [{ tool: 'fs.delete' }], timeout_ms: 60_000 },
    }),
  );
  gateway = await createGateway({
    workspace: project.workspace,
    project: project.project,
    inspector: false,
    engineOptions: { persist: false, watch: false, changeLog: true },
  });
  base = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
  await fetch(`${base}/v1/project`);
  engine = gateway.engines().get(project.project) as Engine;
  engine.vfs.write('/pub/a.txt', 'public one\n');
  engine.vfs.write('/private/p.txt', `${CONTENT}\n`);
  engine.vfs.write(`/private/${HIDDEN}.txt`, 'moved in\n');
  engine.snapshot({ label: 'base' });
  // The host's own call, with the engine's grants: its events and its diff hold /private.
  const wrote = await engine.call('fs.write', { path: '/private/p.txt', content: `${LATER}\n` });
  expect(wrote.ok).toBe(true);
  hostRun = wrote.meta.run_id;
  await engine.call('fs.move', { from: `/private/${HIDDEN}.txt`, to: '/pub/moved.txt' });
  await engine.call('fs.write', { path: '/pub/a.txt', content: 'public two\n' });
  await engine.call('fs.read', { path: '/private/p.txt' });
});

afterAll(async () => {
  await gateway?.close();
  project?.remove();
});

interface Answer {
  status: number;
  text: string;
  json: () => Record<string, unknown>;
}

async function http(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, text, json: () => JSON.parse(text) };
}

/** Nothing of /private that the request did not name is in the answer. */
function clean(answer: Answer): Answer {
  expect(answer.text).not.toContain(CONTENT);
  expect(answer.text).not.toContain(LATER);
  expect(answer.text).not.toContain(HIDDEN);
  return answer;
}

/** The live tree and the snapshot log as the host sees them, to show that nothing changed. */
function state(): string {
  return JSON.stringify({
    snapshots: engine.snapshots().map((s) => s.id),
    files: [...engine.vfs.list('/', { recursive: true }).entries].map((e) => [e.path, e.type === 'file' ? engine.vfs.read(e.path).toString() : null]),
  });
}

/** Reads an event stream for a while, replaying the gateway's buffer from the start. */
async function events(prefix: string): Promise<string> {
  const controller = new AbortController();
  const res = await fetch(`${base}${prefix}/v1/events`, { headers: { 'last-event-id': '0' }, signal: controller.signal });
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  let text = '';
  const until = Date.now() + 1500;
  while (Date.now() < until && !text.includes('"tool":"fs.read"')) {
    const chunk = await Promise.race([reader.read(), new Promise<null>((r) => setTimeout(() => r(null), 200))]);
    if (chunk?.value) text += Buffer.from(chunk.value).toString();
  }
  controller.abort();
  return text;
}

/**
 * Every route of the OpenAPI document, by method and path (without the `/p/{project}` prefix), with
 * what it must do for a client granted only /pub. A route missing here fails the walk below.
 */
const ROUTES: Record<string, (prefix: string) => Promise<void>> = {
  'GET /v1/tools': async (p) => {
    expect(clean(await http('GET', `${p}/v1/tools`)).status).toBe(200);
  },
  'GET /v1/tools/{id}': async (p) => {
    expect(clean(await http('GET', `${p}/v1/tools/fs.read`)).status).toBe(200);
  },
  'POST /v1/tools/{id}:run': async (p) => {
    expect(clean(await http('POST', `${p}/v1/tools/fs.read:run`, { input: { path: '/private/p.txt' } })).status).toBe(403);
    expect(clean(await http('POST', `${p}/v1/tools/fs.write:run`, { input: { path: '/private/p.txt', content: 'x' } })).status).toBe(403);
    expect(clean(await http('POST', `${p}/v1/tools/fs.list:run`, { input: { path: '/private' } })).status).toBe(403);
    expect(clean(await http('POST', `${p}/v1/tools/vfs.diff:run`, { input: {} })).status).toBe(403);
  },
  'POST /v1/capabilities/{name}:run': async (p) => {
    expect(clean(await http('POST', `${p}/v1/capabilities/anything:run`, { input: {} })).status).toBeGreaterThanOrEqual(400);
  },
  'GET /v1/providers': async (p) => {
    const listed = clean(await http('GET', `${p}/v1/providers`));
    expect(listed.status).toBe(200);
    expect(listed.json()).toEqual({ providers: [] });
  },
  // Skills read no VFS: the project has none, and a name is not found whatever it is.
  'GET /v1/skills': async (p) => {
    const listed = clean(await http('GET', `${p}/v1/skills`));
    expect(listed.status).toBe(200);
    expect(listed.json()).toEqual({ skills: [], problems: [] });
  },
  'GET /v1/skills/{name}': async (p) => {
    expect(clean(await http('GET', `${p}/v1/skills/none`)).status).toBe(404);
  },
  'GET /v1/snapshots': async (p) => {
    expect(clean(await http('GET', `${p}/v1/snapshots`)).status).toBe(200);
  },
  'POST /v1/snapshots': async (p) => {
    const taken = clean(await http('POST', `${p}/v1/snapshots`, { label: 'taken' }));
    expect(taken.status).toBe(403);
    expect(taken.json()).toMatchObject({ ok: false, error: { code: 'DENIED' } });
  },
  'GET /v1/diff': async (p) => {
    const found = clean(await http('GET', `${p}/v1/diff?from=base&to=live`));
    expect(found.status).toBe(200);
    // What /pub may see is there; the file moved in from /private is an addition.
    expect(found.json().files).toEqual([
      expect.objectContaining({ path: '/pub/a.txt', status: 'modified' }),
      expect.objectContaining({ path: '/pub/moved.txt', status: 'added' }),
    ]);
    const one = clean(await http('GET', `${p}/v1/diff?from=base&to=live&file=/private/p.txt`));
    expect(one.json().files).toEqual([]);
    clean(await http('GET', `${p}/v1/diff?from=live&to=base&stat=true`));
  },
  'POST /v1/restore': async (p) => {
    const restored = clean(await http('POST', `${p}/v1/restore`, { ref: 'base' }));
    expect(restored.status).toBe(403);
    expect(restored.json()).toMatchObject({ ok: false, error: { code: 'DENIED' } });
  },
  'GET /v1/project': async (p) => {
    expect(clean(await http('GET', `${p}/v1/project`)).status).toBe(200);
  },
  'GET /v1/fs/list': async (p) => {
    for (const at of ['live', 'base']) {
      for (const path of ['/', '/private']) {
        const listed = clean(await http('GET', `${p}/v1/fs/list?path=${encodeURIComponent(path)}&at=${at}`));
        expect(listed.status).toBe(403);
        expect(listed.json()).toMatchObject({ ok: false, error: { code: 'DENIED', details: { permission: 'vfs.read', path } } });
      }
      expect(clean(await http('GET', `${p}/v1/fs/list?path=/pub&at=${at}`)).status).toBe(200);
    }
  },
  'GET /v1/fs/read': async (p) => {
    for (const at of ['live', 'base']) {
      expect(clean(await http('GET', `${p}/v1/fs/read?path=/private/p.txt&at=${at}`)).status).toBe(403);
      expect(clean(await http('GET', `${p}/v1/fs/read?path=/private/../private/p.txt&at=${at}`)).status).toBe(403);
      expect(clean(await http('GET', `${p}/v1/fs/read?path=/pub/a.txt&at=${at}`)).status).toBe(200);
    }
  },
  'GET /v1/runs/{run_id}/diff': async (p) => {
    // The host's write changed only /private: what is left to show is nothing.
    const found = clean(await http('GET', `${p}/v1/runs/${hostRun}/diff`));
    expect(found.status).toBe(200);
    expect(found.json().files).toEqual([]);
  },
  'GET /v1/approvals': async (p) => {
    const call = engine.call('fs.delete', { path: `/private/${HIDDEN}-gone.txt` });
    const runId = await pending();
    const listed = clean(await http('GET', `${p}/v1/approvals`));
    expect(listed.json().approvals).toEqual([]);
    engine.deny(runId, { by: 'host' });
    await call;
  },
  'POST /v1/approvals/{run_id}': async (p) => {
    const call = engine.call('fs.delete', { path: '/private/p.txt' });
    const runId = await pending();
    const answer = clean(await http('POST', `${p}/v1/approvals/${runId}`, { decision: 'approve', by: 'client' }));
    expect(answer.status).toBe(404);
    expect(engine.approvals().map((a) => a.run_id)).toEqual([runId]);
    engine.deny(runId, { by: 'host' });
    expect((await call).ok).toBe(false);
  },
  'GET /v1/events': async (p) => {
    const text = await events(p);
    expect(text).not.toContain(CONTENT);
    expect(text).not.toContain(LATER);
    expect(text).not.toContain(HIDDEN);
    expect(text).not.toContain('/private');
  },
};

async function pending(): Promise<string> {
  for (let i = 0; i < 500; i++) {
    const first = engine.approvals()[0];
    if (first) return first.run_id;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('no approval became pending');
}

describe('the gateway’s routes act with surfaces.http.grants', () => {
  it('walks every route of the OpenAPI document, under both prefixes, and reads or changes nothing outside the grants', async () => {
    const doc = (await http('GET', '/v1/openapi.json')).json() as { paths: Record<string, Record<string, unknown>> };
    const listed = new Set<string>();
    for (const [path, methods] of Object.entries(doc.paths)) {
      for (const method of Object.keys(methods)) listed.add(`${method.toUpperCase()} ${path}`);
    }
    const plain = [...listed].filter((r) => !r.includes('/p/{project}')).sort();
    const prefixed = [...listed].filter((r) => r.includes('/p/{project}')).map((r) => r.replace('/p/{project}', ''));
    // A route added without a line in ROUTES fails here, before anything else.
    expect(plain).toEqual(Object.keys(ROUTES).sort());
    expect(prefixed.sort()).toEqual(plain);
    const before = state();
    for (const prefix of ['', `/p/${project.project}`]) {
      for (const route of plain) await (ROUTES[route] as (p: string) => Promise<void>)(prefix);
    }
    expect(state()).toBe(before);
  }, 60_000);
});

describe('the MCP server’s resources act with surfaces.mcp.grants', () => {
  it('reads, diffs and subscribes to nothing outside the grants, for every resource and template it lists', async () => {
    const client = new Client({ name: 'grants-test', version: '1' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
    try {
      const prefix = `arium://${project.project}/`;
      const { resourceTemplates } = await client.listResourceTemplates();
      const { resources } = await client.listResources();
      const before = state();
      const refusedText = async (uri: string) => {
        const error = await client.readResource({ uri }).then(
          () => null,
          (e: Error) => e.message,
        );
        expect(error).toMatch(/DENIED/);
        expect(error).not.toContain(CONTENT);
      };
      // Each template by name, with what it must do; a template added without a line here fails.
      const TEMPLATES: Record<string, () => Promise<void>> = {
        'vfs-file': async () => {
          await refusedText(`${prefix}vfs/private/p.txt`);
          const read = await client.readResource({ uri: `${prefix}vfs/pub/a.txt` });
          expect(read.contents[0]).toMatchObject({ text: 'public two\n' });
          await expect(client.subscribeResource({ uri: `${prefix}vfs/private/p.txt` })).rejects.toThrow(/DENIED/);
          await expect(client.subscribeResource({ uri: `${prefix}vfs/` })).rejects.toThrow(/DENIED/);
        },
        'vfs-diff': async () => {
          for (const [from, to] of [
            ['base', 'live'],
            ['live', 'base'],
          ]) {
            const read = await client.readResource({ uri: `${prefix}diff/${from}/${to}` });
            const text = JSON.stringify(read.contents);
            expect(text).not.toContain(CONTENT);
            expect(text).not.toContain(LATER);
            expect(text).not.toContain(HIDDEN);
            expect(text).not.toContain('/private');
            expect(text).toContain('/pub/a.txt');
          }
        },
      };
      expect(resourceTemplates.map((t) => t.name).sort()).toEqual(Object.keys(TEMPLATES).sort());
      for (const template of resourceTemplates) await (TEMPLATES[template.name] as () => Promise<void>)();
      // Each listed resource, by kind: the snapshot log, or a file (which the listing only names when readable).
      for (const resource of resources) {
        expect(JSON.stringify(resource)).not.toContain(HIDDEN);
        const kinds: Record<string, boolean> = {
          snapshots: resource.uri === `${prefix}snapshots`,
          file: resource.uri.startsWith(`${prefix}vfs/`),
          // The declarations of the tools this surface may call: no file content, no hidden name.
          types: resource.uri === `${prefix}code/types`,
        };
        expect(Object.values(kinds).filter(Boolean)).toHaveLength(1);
        const read = await client.readResource({ uri: resource.uri });
        expect(JSON.stringify(read)).not.toContain(CONTENT);
        expect(JSON.stringify(read)).not.toContain(HIDDEN);
      }
      expect(state()).toBe(before);
    } finally {
      await client.close();
    }
  }, 60_000);
});
