import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { installJsPackages } from '../runners/js/packages.js';
import { pyRunner } from '../runners/python/definition.js';
import { installPythonEnvironment } from '../runners/python/environment.js';
import { PythonRunner } from '../runners/python/index.js';
import { findInterpreter, interpreterTag } from '../runners/python/interpreter.js';
import { checkProtocol, type ProtocolLog } from '../runners/shared/protocol.js';
import type { Engine, ToolResult } from '../src/index.js';
import { type NatsServer, startNats } from './support/nats.js';
import { copyFixtureProject, definition, openEngine, type TempProject, tempProject } from './support/project.js';
import { remoteEngine, Workers } from './support/remote.js';

/**
 * A project's pinned dependencies on remote workers: JS tools importing npm packages (the engine bundles,
 * the worker runs the bundle) and Python tools of a pinned environment (the engine ships the
 * environment's site-packages, the worker mounts it at /venv). Real packages, real nats-server.
 */

const PACKAGE = 'arium_pin_demo';
const USES_YAML = `import { parse } from 'yaml';
import { shout } from './lib/shout.js';
export default async function run(input) { return { doc: parse(input.text), loud: shout(input.title) }; }
`;

/** Whether the pinned package's bytecode file is one Python takes (else it compiles the source again at each import). */
const BYTECODE = `import importlib.util
import os

import arium_pin_demo


def run(input, ctx):
    source = arium_pin_demo.__file__
    try:
        with open(importlib.util.cache_from_source(source), "rb") as f:
            header = f.read(16)
    except OSError:
        return {"valid": False}
    if int.from_bytes(header[4:8], "little") == 0:
        st = os.stat(source)
        valid = header[8:16] == (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    else:
        with open(source, "rb") as f:
            valid = header[8:16] == importlib.util.source_hash(f.read())
    return {"valid": valid}
`;

let nats: NatsServer;
const workers = new Workers();
let project: TempProject;
let wheels: string;
let engine: Engine | null = null;
/** The engine running the project's tools on this machine, to compare with. */
let local: Engine;

function ok<T>(result: ToolResult): T {
  if (!result.ok) throw new Error(`expected success, got ${JSON.stringify(result.error)}`);
  return result.data as T;
}

beforeAll(async () => {
  nats = await startNats();
  project = copyFixtureProject('python-env');
  chmodSync(project.workspace, 0o755);
  project.write('lib/shout.js', 'export const shout = (s) => s.toUpperCase() + "!";\n');
  project.write('yaml.js', USES_YAML);
  project.write('yaml.json', definition({ id: 'js.yaml', entry: 'yaml.js' }));
  project.write('boom.js', "import { parse } from 'yaml';\nexport default async function run() { parse('a: 1'); throw new Error('boom'); }\n");
  project.write('boom.json', definition({ id: 'js.boom', entry: 'boom.js' }));
  project.write('bytecode.py', BYTECODE);
  project.write('bytecode.json', definition({ id: 'py.bytecode', entry: 'bytecode.py', runner: 'py-runner', permissions: ['exec.py'] }));
  project.write('boom.py', 'import arium_pin_demo\n\n\ndef run(input, ctx):\n    raise ValueError(arium_pin_demo.VERSION)\n');
  project.write('boom-py.json', definition({ id: 'py.boom', entry: 'boom.py', runner: 'py-runner', permissions: ['exec.py'] }));
  const python = (await findInterpreter(undefined, process.cwd())).executable;
  wheels = mkdtempSync(join(tmpdir(), 'arium-wheels-'));
  const wheel = execFileSync(python, [new URL('../fixtures/python-env/wheel/make_wheel.py', import.meta.url).pathname, PACKAGE, '1.0', wheels], {
    encoding: 'utf8',
  }).trim();
  const hash = /--hash=(sha256:[0-9a-f]{64})/.exec(
    execFileSync(python, ['-m', 'pip', 'hash', '--algorithm', 'sha256', wheel], { encoding: 'utf8' }),
  )?.[1];
  writeFileSync(join(project.dir, 'requirements.txt'), `${PACKAGE}==1.0 \\\n    --hash=${hash}\n`);
  writeFileSync(join(project.dir, 'package.json'), JSON.stringify({ name: 'p-tools', private: true, dependencies: { yaml: '2.8.1' } }));
}, 60_000);

afterAll(async () => {
  await local?.close();
  await nats?.stop();
  project?.remove();
  rmSync(wheels, { recursive: true, force: true });
});

afterEach(async () => {
  await engine?.close();
  engine = null;
  await workers.closeAll();
});

const remote = () => remoteEngine(project, nats.url, { runners: ['js-runner', 'py-runner'] });
const stateDir = () => join(project.dir, '.arium');
const json = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));

/** What the tool returns when run by an engine of this machine. */
async function locally(target: TempProject, id: string, input: unknown): Promise<ToolResult> {
  if (target === project) {
    // One local engine for the whole file: it sees tools a test added once it looks again.
    await local.refresh();
    return local.call(id, input);
  }
  const other = await openEngine(target);
  try {
    return await other.call(id, input);
  } finally {
    await other.close();
  }
}

/** Every request for a file's first bytes that crosses the server, by sha256: seen from a connection of its own. */
async function watchFetches(): Promise<{ counts: Map<string, number>; close: () => Promise<void> }> {
  const { connect } = await import('@nats-io/transport-node');
  const observer = await connect({ servers: nats.url });
  const counts = new Map<string, number>();
  observer.subscribe('_INBOX.>', {
    callback: (_error, msg) => {
      try {
        const message = JSON.parse(msg.string()) as { t?: string; sha?: string; offset?: number };
        if (message.t === 'blob' && typeof message.sha === 'string' && message.offset === 0)
          counts.set(message.sha, (counts.get(message.sha) ?? 0) + 1);
      } catch {}
    },
  });
  await observer.flush();
  return { counts, close: () => observer.close() };
}

beforeAll(async () => {
  await installJsPackages({ projectDir: project.dir, stateDir: stateDir(), offline: true });
  await installPythonEnvironment({ projectDir: project.dir, stateDir: stateDir(), pip: { noIndex: true, findLinks: [wheels] } });
  local = await openEngine(project);
}, 120_000);

describe('on one worker', () => {
  /** A worker and a remote engine shared by these tests: the worker's cache and sandboxes stay warm between them. */
  const shared = new Workers();
  let warm: Engine;
  beforeAll(async () => {
    await shared.start(nats.url);
    warm = await remote();
  });
  afterAll(async () => {
    await warm?.close();
    await shared.closeAll();
  });

  describe('a JS tool importing npm packages, on a worker', () => {
    it('returns what it returns locally; the engine bundles it, the worker runs the bundle', async () => {
      const input = { text: 'a: [1, 2]', title: 'hi' };
      const here = await locally(project, 'js.yaml', input);
      await warm.refresh();
      const there = await warm.call('js.yaml', input);
      expect(there).toMatchObject({ ok: true, data: ok(here), meta: { worker: { id: expect.any(String) }, bundle: { bytes: expect.any(Number) } } });
    });

    it('runs the new version on the next call after the tool changes', async () => {
      await warm.refresh();
      expect(ok(await warm.call('js.yaml', { text: 'a: 1', title: 'hi' }))).toMatchObject({ loud: 'HI!' });
      project.write('lib/shout.js', 'export const shout = (s) => s.toUpperCase() + "?!";\n');
      try {
        expect(ok(await warm.call('js.yaml', { text: 'a: 1', title: 'hi' }))).toMatchObject({ loud: 'HI?!' });
      } finally {
        project.write('lib/shout.js', 'export const shout = (s) => s.toUpperCase() + "!";\n');
      }
    });

    it('counts its bundle against memory_mb as locally', async () => {
      project.write('lib/big.js', `export const big = "${'y'.repeat(1_200_000)}";\n`);
      project.write(
        'heavy.js',
        "import { parse } from 'yaml';\nimport { big } from './lib/big.js';\nexport default async function run() { return [parse('a: 1'), big.length]; }\n",
      );
      project.write('heavy.json', definition({ id: 'js.heavy', entry: 'heavy.js', limits: { memory_mb: 8 } }));
      const here = await locally(project, 'js.heavy', {});
      await warm.refresh();
      const there = await warm.call('js.heavy', {});
      expect(here.ok || there.ok).toBe(false);
      if (here.ok || there.ok) return;
      expect(there.error).toEqual(here.error);
      expect(there.error.message).toMatch(/too large for its memory limit of 8 MB/);
    });

    it('whose packages are not installed fails as it does locally, naming arium install', async () => {
      const bare = tempProject({
        'yaml.js': USES_YAML,
        'yaml.json': definition({ id: 'js.yaml', entry: 'yaml.js' }),
        'lib/shout.js': 'export const shout = (s) => s;\n',
      });
      try {
        writeFileSync(join(bare.dir, 'package.json'), JSON.stringify({ name: 'bare', private: true, dependencies: { yaml: '2.8.1' } }));
        const here = await locally(bare, 'js.yaml', { text: 'a: 1', title: 'x' });
        await workers.start(nats.url);
        engine = await remoteEngine(bare, nats.url, { runners: ['js-runner'] });
        const there = await engine.call('js.yaml', { text: 'a: 1', title: 'x' });
        expect(there.ok).toBe(false);
        if (there.ok || here.ok) return;
        expect(there.error).toEqual(here.error);
        expect(there.error).toMatchObject({
          code: 'TOOL_ERROR',
          message: expect.stringContaining('package.json is not installed: run `arium install`'),
        });
      } finally {
        bare.remove();
      }
    });
  });

  describe('a Python tool of a pinned project, on a worker', () => {
    it('imports the pinned package from the environment the engine shipped, as locally', async () => {
      const here = await locally(project, 'env.pinned', { x: 14 });
      await warm.refresh();
      const there = await warm.call('env.pinned', { x: 14 });
      expect(there).toMatchObject({ ok: true, data: ok(here) });
      expect(ok(there)).toMatchObject({ value: 42, version: '1.0' });
    });

    it('imports the environment from bytecode it can use, as locally', async () => {
      expect(ok(await locally(project, 'py.bytecode', {}))).toEqual({ valid: true });
      await warm.refresh();
      expect(ok(await warm.call('py.bytecode', {}))).toEqual({ valid: true });
    });

    it('gets an environment of many files and one larger than a NATS message, as locally', async () => {
      // Added to the installed environment as pip would have.
      const site = execFileSync(
        join(stateDir(), 'python-env', 'bin', 'python3'),
        ['-I', '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
        {
          encoding: 'utf8',
        },
      ).trim();
      for (let i = 0; i < 30; i++) writeFileSync(join(site, `arium_many_${i}.py`), `VALUE = ${i}\n`);
      writeFileSync(join(site, 'arium_large.py'), `DATA = "${'x'.repeat(3 * 1024 * 1024)}"\n`);
      // A wheel's shared libraries can sit in a dot-folder of its package (auditwheel's older `.libs`).
      mkdirSync(join(site, 'arium_dotted', '.libs'), { recursive: true });
      writeFileSync(join(site, 'arium_dotted', '.libs', 'note.txt'), 'beside the code');
      writeFileSync(
        join(site, 'arium_dotted', '__init__.py'),
        'import os\nNOTE = open(os.path.join(os.path.dirname(__file__), ".libs", "note.txt")).read()\n',
      );
      project.write(
        'many.py',
        'import importlib\nimport arium_dotted\nimport arium_large\n\n\ndef run(input, ctx):\n    return {"sum": sum(importlib.import_module("arium_many_%d" % i).VALUE for i in range(30)), "large": len(arium_large.DATA), "note": arium_dotted.NOTE}\n',
      );
      project.write('many.json', definition({ id: 'py.many', entry: 'many.py', runner: 'py-runner', permissions: ['exec.py'] }));
      const here = await locally(project, 'py.many', {});
      expect(ok(here)).toEqual({ sum: 435, large: 3 * 1024 * 1024, note: 'beside the code' });
      // A new engine: the one of the other tests listed the environment before these files were added.
      engine = await remote();
      expect(await engine.call('py.many', {})).toMatchObject({ ok: true, data: ok(here) });
    });

    it('fails MISCONFIGURED, naming arium install, while the engine’s environment is stale', async () => {
      const pins = join(project.dir, 'requirements.txt');
      const before = readFileSync(pins, 'utf8');
      await warm.refresh();
      writeFileSync(pins, `${before}# edited\n`);
      try {
        const there = await warm.call('env.pinned', { x: 1 });
        expect(there).toMatchObject({ ok: false, error: { code: 'MISCONFIGURED', retryable: false, details: { reason: 'pins-changed' } } });
        expect(there.ok || there.error.message).toContain('`arium install`');
        expect(there.meta).not.toHaveProperty('worker');
      } finally {
        writeFileSync(pins, before);
      }
      expect(ok(await warm.call('env.pinned', { x: 1 }))).toMatchObject({ value: 3 });
    });

    it('fails MISCONFIGURED on a worker whose interpreter is not the one the environment was made for', async () => {
      const stamp = join(realpathSync(join(stateDir(), 'python-env')), 'arium-env.json');
      const before = readFileSync(stamp, 'utf8');
      const mine = (JSON.parse(before) as { python_tag: string }).python_tag;
      expect(mine).toMatch(/^cpython-3\.\d+-/);
      await warm.refresh();
      expect(ok(await warm.call('env.pinned', { x: 1 }))).toMatchObject({ value: 3 });
      // As if the engine's environment had been installed with another Python than the worker's.
      writeFileSync(stamp, before.replace(mine, 'cpython-3.99-other-platform'));
      try {
        const there = await warm.call('env.pinned', { x: 1 });
        expect(there).toMatchObject({
          ok: false,
          error: { code: 'MISCONFIGURED', retryable: false, details: { engine_python: 'cpython-3.99-other-platform', worker_python: mine } },
        });
        if (there.ok) return;
        expect(there.error.message).toContain('needs Python cpython-3.99-other-platform');
        expect(there.error.message).toContain(`this worker runs ${mine}`);
        expect(there.error.message).toContain('arium worker --python');
      } finally {
        writeFileSync(stamp, before);
      }
      expect(ok(await warm.call('env.pinned', { x: 2 }))).toMatchObject({ value: 6 });
    });
  });

  describe('a failing tool on a worker', () => {
    it.each(['js.boom', 'py.boom'])('%s: the same error and stack as locally, its files named as on the engine', async (id) => {
      const here = await locally(project, id, {});
      await warm.refresh();
      const there = await warm.call(id, {});
      expect(here.ok || there.ok).toBe(false);
      if (here.ok || there.ok) return;
      expect(there.error).toEqual(here.error);
      expect(there.error.stack).toMatch(id === 'js.boom' ? /tools\/boom\.mjs:/ : /"boom\.py", line 5/);
    });
  });
});

describe('a worker serving several environments', () => {
  it('stops the fork servers of the least recently used beyond four', async () => {
    let runner: PythonRunner | undefined;
    // One fork server per environment (not two): half the start-ups, the same eviction.
    const definitions = [{ ...pyRunner, create: () => (runner = new PythonRunner({ servers: 1 })) }];
    await workers.start(nats.url, { definitions });
    engine = await remote();
    const serving = async () => ((await (runner as PythonRunner).status()).server_pids as number[] | undefined) ?? [];
    const dir = realpathSync(join(stateDir(), 'python-env'));
    const site = join(dir, 'lib', readdirSync(join(dir, 'lib'))[0] as string, 'site-packages');
    let first: number[] = [];
    for (let i = 0; i < 5; i++) {
      // Another environment each time, as an install would make it: new files, a new stamp.
      writeFileSync(join(site, `arium_round_${i}.py`), `ROUND = ${i}\n`);
      const at = new Date(Date.now() + (i + 1) * 1000);
      utimesSync(join(dir, 'arium-env.json'), at, at);
      expect(ok(await engine.call('env.pinned', { x: 1 }))).toMatchObject({ value: 3 });
      if (i === 0) first = await serving();
    }
    expect(first.length).toBeGreaterThan(0);
    expect((await serving()).filter((pid) => first.includes(pid))).toEqual([]);
  });
});

describe('a worker serving two projects', () => {
  it('keeps the Python fork servers of each when their calls alternate', async () => {
    const cache = mkdtempSync(join(tmpdir(), 'arium-worker-cache-'));
    const other = tempProject({
      'plain.py': 'def run(input, ctx):\n    return {"x": input["x"]}\n',
      'plain.json': definition({ id: 'py.plain', entry: 'plain.py', runner: 'py-runner', permissions: ['exec.py'] }),
    });
    let second: Engine | null = null;
    /** The fork servers of this worker: children of this process whose command lines name its cache folder. */
    const servers = () =>
      readdirSync('/proc')
        .filter((pid) => /^\d+$/.test(pid))
        .filter((pid) => {
          try {
            const command = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
            const parent = Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ')[1]);
            return parent === process.pid && command.includes(cache) && command.includes('arium_server.py');
          } catch {
            return false;
          }
        })
        .sort();
    try {
      await workers.start(nats.url, { cacheDir: cache });
      engine = await remote();
      second = await remoteEngine(other, nats.url, { runners: ['py-runner'] });
      const round = async (pinned: Engine, plain: Engine) => {
        expect(ok(await pinned.call('env.pinned', { x: 1 }))).toMatchObject({ value: 3 });
        expect(ok(await plain.call('py.plain', { x: 1 }))).toEqual({ x: 1 });
      };
      await round(engine, second);
      await round(engine, second);
      // Each project's second server starts in the background after its first call.
      await new Promise((resolve) => setTimeout(resolve, 500));
      const before = servers();
      expect(before.length).toBeGreaterThan(1);
      for (let i = 0; i < 4; i++) await round(engine, second);
      expect(servers()).toEqual(before);
    } finally {
      await second?.close();
      other.remove();
      rmSync(cache, { recursive: true, force: true });
    }
  });
});

describe('concurrent first calls', () => {
  it('all succeed, and the worker fetches each file once', async () => {
    const fetches = await watchFetches();
    try {
      await workers.start(nats.url);
      engine = await remote();
      const active = engine;
      const results = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          i % 2 === 0 ? active.call('js.yaml', { text: `n: ${i}`, title: 'x' }) : active.call('env.pinned', { x: i }),
        ),
      );
      for (const [i, result] of results.entries()) expect(ok(result)).toMatchObject(i % 2 === 0 ? { doc: { n: i } } : { value: 3 * i });
      expect(fetches.counts.size).toBeGreaterThan(3);
      expect([...fetches.counts.entries()].filter(([, count]) => count !== 1)).toEqual([]);
    } finally {
      await fetches.close();
    }
  });
});

describe('the protocol', () => {
  it('admits the bundle, the environment and their requests', async () => {
    const log = checkProtocol(true) as ProtocolLog;
    try {
      await workers.start(nats.url);
      engine = await remote();
      expect(await engine.call('js.yaml', { text: 'a: 1', title: 'x' })).toMatchObject({ ok: true });
      expect(await engine.call('env.pinned', { x: 1 })).toMatchObject({ ok: true });
    } finally {
      checkProtocol(false);
    }
    expect(log.violations).toEqual([]);
    for (const kind of ['call', 'tree', 'env', 'blob']) expect(log.seen[`remote.toWorker ${kind}`]).toBeGreaterThan(0);
    for (const kind of ['tree', 'env', 'blob', 'done']) expect(log.seen[`remote.fromWorker ${kind}`]).toBeGreaterThan(0);
  });
});

describe('a compromised worker', () => {
  it('gets the bundle of its call, never the installed packages nor the environment of another call', async () => {
    const { connect } = await import('@nats-io/transport-node');
    const rogue = await connect({ servers: nats.url });
    const sha = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');
    const packageFile = sha(join(stateDir(), 'js-packages', 'node_modules', 'yaml', 'package.json'));
    const answers: Record<string, unknown>[] = [];
    try {
      rogue.subscribe('arium.test.run.js-runner', {
        queue: 'arium.test.workers',
        callback: (_e, msg) => {
          const call = JSON.parse(msg.string()) as { inbox: string; tool: { bundle?: { sha: string } } };
          const ask = async (m: object) => JSON.parse((await rogue.request(call.inbox, json({ worker: 'rogue', ...m }), { timeout: 2000 })).string());
          void (async () => {
            answers.push(await ask({ t: 'blob', sha: call.tool.bundle?.sha, offset: 0 }));
            answers.push(await ask({ t: 'blob', sha: packageFile, offset: 0 }));
            answers.push(await ask({ t: 'env' }));
            rogue.publish(call.inbox, json({ t: 'done', worker: 'rogue', host: 'h', ok: true, data: {}, logs: [], intrusions: [], meta: {} }));
          })();
        },
      });
      await rogue.flush();
      engine = await remote();
      expect(await engine.call('js.yaml', { text: 'a: 1', title: 'x' })).toMatchObject({ ok: true });
      expect(answers[0]).toMatchObject({ t: 'blob', size: expect.any(Number), data: expect.any(String) });
      expect(answers.slice(1)).toEqual([
        { t: 'blob', error: 'no such file in this call' },
        { t: 'env', entries: [] },
      ]);
    } finally {
      await rogue.close();
    }
  });
});

describe('a worker sent a crafted call', () => {
  /** Publishes `tool` as a call to the workers and answers their requests with `answers`; resolves with the worker's done. */
  async function craft(
    runner: string,
    tool: Record<string, unknown>,
    answers: (m: Record<string, unknown>) => unknown,
  ): Promise<Record<string, unknown>> {
    const { connect, createInbox } = await import('@nats-io/transport-node');
    const nc = await connect({ servers: nats.url });
    try {
      const inbox = createInbox();
      const done = new Promise<Record<string, unknown>>((resolve) => {
        nc.subscribe(inbox, {
          callback: (_e, msg) => {
            const m = JSON.parse(msg.string()) as Record<string, unknown>;
            if (m.t === 'done') resolve(m);
            else if (msg.reply) msg.respond(json(answers(m)));
          },
        });
      });
      const call = {
        t: 'call',
        v: 1,
        id: 'crafted',
        runner,
        inbox,
        tool: { spec: { id: 'crafted', runner }, hash: 'h', source: 'tools/crafted.json', entry: 'x.js', tree: '0'.repeat(64), ...tool },
        input: {},
        limits: { timeout_ms: 5000, memory_mb: 64, output_bytes: 65536 },
        run_id: 'r',
        trace_id: 'r',
        keepalive_ms: 1000,
      };
      nc.publish(`arium.test.run.${runner}`, json(call), { reply: inbox });
      return await done;
    } finally {
      await nc.close();
    }
  }

  it.each([
    ['an entry outside the tree', 'js-runner', { entry: '../../../../etc/hostname' }, /unusable entry path/],
    ['a tree hash that is a path', 'py-runner', { tree: 'x/../../../../../../../../../etc', entry: 'hostname' }, /unusable tree hash/],
    ['a bundle named by a path', 'js-runner', { bundle: { name: '../../x.mjs', sha: 'a'.repeat(64), size: 1 } }, /unusable bundle/],
    ['a bundle that is not a module', 'js-runner', { bundle: { name: 'passwd', sha: 'a'.repeat(64), size: 1 } }, /unusable bundle/],
  ])('refuses %s before reading anything', async (_, runner, tool, message) => {
    await workers.start(nats.url);
    const asked: unknown[] = [];
    const done = await craft(runner, tool, (m) => {
      asked.push(m.t);
      return { t: 'tree', entries: [] };
    });
    expect(done).toMatchObject({ ok: false, error: { message: expect.stringMatching(message) } });
    expect(asked.filter((t) => t === 'blob')).toEqual([]);
  });

  it.each([
    ['a path that climbs out', 'lib/python3/site-packages/../../../../../../tmp/owned.py'],
    ['a path outside site-packages', 'bin/python3'],
  ])('refuses an environment file at %s before fetching it', async (_, path) => {
    await workers.start(nats.url);
    const tag = await interpreterTag((await findInterpreter(undefined, process.cwd())).executable);
    const file = Buffer.from('x = 1\n');
    const sha = createHash('sha256').update(file).digest('hex');
    const fetched: unknown[] = [];
    const done = await craft('py-runner', { entry: 'x.py', env: { hash: 'b'.repeat(64), python: tag } }, (m) => {
      if (m.t === 'tree') return { t: 'tree', entries: [['x.py', sha, file.length]] };
      if (m.t === 'env') return { t: 'env', entries: [[path, 'c'.repeat(64), 1]] };
      fetched.push(m.sha);
      return { t: 'blob', size: file.length, data: file.toString('base64') };
    });
    expect(done).toMatchObject({ ok: false, error: { message: expect.stringContaining('environment file with an unusable path') } });
    expect(fetched).not.toContain('c'.repeat(64));
  });
});
