/**
 * The soak benchmark's project and mix of calls. Every call that writes puts unique content in one
 * tracked file, `/w/d<k>/f<n>.txt`; the JS, remote JS, Python and shell tools write through their own
 * sandbox's way into the VFS (ctx.vfs, the shell's file system), so an acknowledged write is checked
 * through every runner.
 */

/** What a call is, for the faults that may fail it and the codes it may end with. */
export type CallClass = 'write' | 'read' | 'js' | 'remote' | 'py' | 'shell-write' | 'shell-read' | 'snapshot' | 'restore';

export const WRITING: ReadonlySet<CallClass> = new Set(['write', 'js', 'remote', 'py', 'shell-write', 'snapshot', 'restore']);

export const FOLDERS = 16;
export const FILES_PER_FOLDER = 32;

export function trackedPaths(): string[] {
  const paths: string[] = [];
  for (let d = 0; d < FOLDERS; d++) for (let f = 0; f < FILES_PER_FOLDER; f++) paths.push(`/w/d${d}/f${f}.txt`);
  return paths;
}

const WRITE_JS = `export default async function run(input, ctx) {
  await ctx.vfs.write(input.path, input.content);
  return { wrote: input.content.length };
}
`;

const WRITE_PY = `def run(input, ctx):
    ctx.vfs.write(input["path"], input["content"])
    return {"wrote": len(input["content"])}
`;

const WRITE_SCHEMA = {
  type: 'object',
  required: ['path', 'content'],
  additionalProperties: false,
  properties: { path: { type: 'string' }, content: { type: 'string' } },
};

const definition = (id: string, runner: string, entry: string, exec: string) =>
  JSON.stringify({
    id,
    description: `soak: write one file (${runner})`,
    runner,
    entry,
    schema: WRITE_SCHEMA,
    permissions: [exec, 'vfs.write:/w/**'],
  });

/** The project's tools folder: `js.write` runs in the engine's JS sandbox, `r.write` (the same code) on the remote worker. */
export const TOOLS: Record<string, string> = {
  'write.js': WRITE_JS,
  'js.write.json': definition('js.write', 'js-runner', 'write.js', 'exec.js'),
  'r.write.json': definition('r.write', 'js-runner', 'write.js', 'exec.js'),
  'py_write.py': WRITE_PY,
  'py.write.json': definition('py.write', 'py-runner', 'py_write.py', 'exec.py'),
};

/** arium.json: `r.*` tools go to workers of deployment `bench` over the soak's nats-server. */
export function projectConfig(natsUrl: string): string {
  return JSON.stringify({ remote: { nats: natsUrl, deployment: 'bench', tools: ['r.*'], keepalive_ms: 500 } }, null, 2);
}

/** Weights of each kind of call in the mix (they need not sum to anything). */
export const MIX: ReadonlyArray<[CallClass, number]> = [
  ['write', 26],
  ['read', 24],
  ['js', 10],
  ['remote', 8],
  ['py', 8],
  ['shell-write', 6],
  ['shell-read', 4],
  ['snapshot', 1],
  ['restore', 0.3],
];

export interface Planned {
  tool: string;
  input: Record<string, unknown>;
}

/** The call for a class, writing `content` to `path` when it writes a tracked file. */
export function plan(cls: CallClass, path: string, content: string, random: () => number): Planned {
  switch (cls) {
    case 'write':
      return { tool: 'fs.write', input: { path, content } };
    case 'js':
      return { tool: 'js.write', input: { path, content } };
    case 'remote':
      return { tool: 'r.write', input: { path, content } };
    case 'py':
      return { tool: 'py.write', input: { path, content } };
    case 'shell-write':
      // The content is [A-Za-z0-9-] only: no quoting needed.
      return { tool: 'shell.run', input: { script: `printf '%s' ${content} > ${path}` } };
    case 'shell-read': {
      const folder = `/w/d${Math.floor(random() * FOLDERS)}`;
      return { tool: 'shell.run', input: { script: `cat ${folder}/*.txt 2>/dev/null | wc -c; ls ${folder} | wc -l` } };
    }
    case 'read': {
      const r = random();
      if (r < 0.7) return { tool: 'fs.read', input: { path } };
      if (r < 0.85) return { tool: 'fs.list', input: { path: path.slice(0, path.lastIndexOf('/')) } };
      return { tool: 'fs.stat', input: { path } };
    }
    case 'snapshot':
      return { tool: 'vfs.snapshot', input: {} };
    case 'restore':
      return { tool: 'vfs.restore', input: {} };
  }
}

/** A small seeded generator (mulberry32), so a run's mix and paths can be repeated. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
