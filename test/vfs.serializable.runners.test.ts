import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine, ToolResultEvent } from '../src/index.js';
import { definition, openEngine, recordEvents, type TempProject, tempProject } from './support/project.js';

/**
 * Calls running at once through the real sandboxes: each must act as if it had run alone. The tools
 * read, work for a few milliseconds (so runs overlap), then write what they computed from what they
 * read: without serializable commits, updates get lost (six appenders once left two lines of six).
 */

const JS = {
  'appender.js': `export default async function run(input, ctx) {
  const prev = (await ctx.vfs.exists('/log.txt')) ? await ctx.vfs.read('/log.txt') : '';
  const until = Date.now() + input.work_ms;
  while (Date.now() < until) {}
  await ctx.vfs.write('/log.txt', prev + input.line + '\\n');
  return { before: prev.split('\\n').length - 1 };
}
`,
  'pair-writer.js': `export default async function run(input, ctx) {
  await ctx.vfs.write('/pair/a.txt', String(input.k));
  const until = Date.now() + 2;
  while (Date.now() < until) {}
  await ctx.vfs.write('/pair/b.txt', String(input.k));
  return null;
}
`,
  'pair-reader.js': `export default async function run(input, ctx) {
  const seen = [];
  for (let i = 0; i < 5; i++) {
    const a = await ctx.vfs.read('/pair/a.txt');
    let until = Date.now() + 2;
    while (Date.now() < until) {}
    seen.push([a, await ctx.vfs.read('/pair/b.txt')]);
    until = Date.now() + 2;
    while (Date.now() < until) {}
  }
  return seen;
}
`,
  'replacer.js': `export default async function run(input, ctx) {
  await ctx.vfs.write(input.path, input.content);
  const until = Date.now() + input.work_ms;
  while (Date.now() < until) {}
  return null;
}
`,
  'counter.js': `export default async function run(input, ctx) {
  const { entries } = await ctx.vfs.list('/items');
  const until = Date.now() + 3;
  while (Date.now() < until) {}
  await ctx.vfs.write('/items/c-' + input.id + '.txt', String(entries.length));
  return { counted: entries.length };
}
`,
};

const PY = {
  'appender.py': `import time

def run(input, ctx):
    prev = ctx.vfs.read("/log.txt") if ctx.vfs.exists("/log.txt") else ""
    end = time.monotonic() + input["work_ms"] / 1000
    while time.monotonic() < end:
        pass
    ctx.vfs.write("/log.txt", prev + input["line"] + "\\n")
    return {"before": prev.count("\\n")}
`,
  'pair_reader.py': `import time

def busy(ms):
    end = time.monotonic() + ms / 1000
    while time.monotonic() < end:
        pass

def run(input, ctx):
    seen = []
    for _ in range(5):
        a = ctx.vfs.read("/pair/a.txt")
        busy(2)
        seen.append([a, ctx.vfs.read("/pair/b.txt")])
        busy(2)
    return seen
`,
  'replacer.py': `import time

def run(input, ctx):
    ctx.vfs.write(input["path"], input["content"])
    end = time.monotonic() + input["work_ms"] / 1000
    while time.monotonic() < end:
        pass
`,
  'counter.py': `import time

def run(input, ctx):
    n = len(ctx.vfs.list("/items")["entries"])
    end = time.monotonic() + 0.003
    while time.monotonic() < end:
        pass
    ctx.vfs.write("/items/c-%s.txt" % input["id"], str(n))
    return {"counted": n}
`,
};

const RW_JS = ['exec.js', 'vfs.read', 'vfs.write'];
const RW_PY = ['exec.py', 'vfs.read', 'vfs.write'];

function tools(): Record<string, string> {
  const defs: Record<string, string> = {};
  const add = (id: string, runner: string, entry: string, permissions: string[]) => {
    defs[`${id}.json`] = definition({ id, runner, entry, permissions });
  };
  add('js.appender', 'js-runner', 'appender.js', RW_JS);
  add('js.pair-writer', 'js-runner', 'pair-writer.js', RW_JS);
  add('js.pair-reader', 'js-runner', 'pair-reader.js', ['exec.js', 'vfs.read']);
  add('js.counter', 'js-runner', 'counter.js', RW_JS);
  add('js.replacer', 'js-runner', 'replacer.js', ['exec.js', 'vfs.write']);
  add('py.appender', 'py-runner', 'appender.py', RW_PY);
  add('py.pair-reader', 'py-runner', 'pair_reader.py', ['exec.py', 'vfs.read']);
  add('py.counter', 'py-runner', 'counter.py', RW_PY);
  add('py.replacer', 'py-runner', 'replacer.py', ['exec.py', 'vfs.write']);
  return { ...defs, ...JS, ...PY };
}

function lines(engine: Engine, path: string): string[] {
  return engine.vfs
    .read(path)
    .toString()
    .split('\n')
    .filter((l) => l !== '');
}

describe('serializable calls through the real runners', () => {
  let project: TempProject;
  let engine: Engine;

  beforeAll(async () => {
    project = tempProject(tools(), 'arium-serial-');
    engine = await openEngine(project);
  });
  afterAll(async () => {
    await engine?.close();
    project?.remove();
  });

  /** Appends `count` lines at once through `call`, then checks that every line is there exactly once. */
  async function appendAtOnce(count: number, call: (line: string) => Promise<{ ok: boolean }>): Promise<void> {
    engine.vfs.write('/log.txt', 'start\n');
    const events = recordEvents(engine);
    const wanted = Array.from({ length: count }, (_, i) => `line ${i}`);
    const results = await Promise.all(wanted.map((line) => call(line)));
    expect(results.filter((r) => !r.ok)).toEqual([]);
    expect(lines(engine, '/log.txt').sort()).toEqual(['start', ...wanted].sort());
    const attempts = events.filter((e): e is ToolResultEvent => e.type === 'ToolResultEvent').map((e) => e.attempts);
    expect(attempts).toHaveLength(count);
    expect(attempts.every((n) => n === 1 || n === 2)).toBe(true);
    expect((await engine.status()).transactions).toBe(0);
  }

  it.each([2, 6, 32])('%i JS appenders at once: every line lands exactly once', async (n) => {
    await appendAtOnce(n, (line) => engine.call('js.appender', { line, work_ms: 3 }));
  });

  it.each([2, 6, 32])('%i Python appenders at once: every line lands exactly once', async (n) => {
    await appendAtOnce(n, (line) => engine.call('py.appender', { line, work_ms: 3 }));
  });

  it.each([2, 6, 32])('%i builtin appends (fs.write) at once: every line lands exactly once', async (n) => {
    await appendAtOnce(n, (line) => engine.call('fs.write', { path: '/log.txt', content: `${line}\n`, append: true }));
  });

  it('JS, Python and builtin appenders mixed: every line lands exactly once', async () => {
    await appendAtOnce(24, (line) => {
      const i = Number(line.split(' ')[1]);
      if (i % 3 === 0) return engine.call('js.appender', { line, work_ms: 2 });
      if (i % 3 === 1) return engine.call('py.appender', { line, work_ms: 2 });
      return engine.call('fs.write', { path: '/log.txt', content: `${line}\n`, append: true });
    });
  });

  it.each(['js.pair-reader', 'py.pair-reader'])(
    'read-only calls (%s) see the tree as it was when they began and never run twice, while writers commit',
    async (reader) => {
      engine.vfs.write('/pair/a.txt', '0');
      engine.vfs.write('/pair/b.txt', '0');
      const events = recordEvents(engine);
      let reading = true;
      const all = Promise.all(Array.from({ length: 8 }, () => engine.call(reader, {}))).finally(() => {
        reading = false;
      });
      // Writers keep committing until every reader is done (each reader reads for about 20 ms), a
      // writer at a time.
      const writers: Array<{ ok: boolean }> = [];
      for (let k = 1; reading && k <= 200; k++) writers.push(await engine.call('js.pair-writer', { k }));
      const results = await all;
      expect(writers.filter((r) => !r.ok)).toEqual([]);
      expect(writers.length).toBeGreaterThan(1);
      expect(results.filter((r) => !r.ok)).toEqual([]);
      for (const result of results) {
        const seen = (result.ok ? result.data : []) as Array<[string, string]>;
        expect(seen).toHaveLength(5);
        // Every read of a call gives the same answer: one consistent tree, whatever committed meanwhile.
        expect(seen.filter(([a, b]) => a !== seen[0]?.[0] || b !== seen[0]?.[0])).toEqual([]);
      }
      const readerRuns = events.filter((e): e is ToolResultEvent => e.type === 'ToolResultEvent' && e.tool === reader).map((e) => e.attempts);
      expect(readerRuns).toEqual(Array(8).fill(1));
      expect(engine.vfs.read('/pair/a.txt').toString()).toBe(engine.vfs.read('/pair/b.txt').toString());
    },
  );

  it.each(['js.replacer', 'py.replacer'])(
    'tools (%s) replacing files that fs.write replaces meanwhile never run twice: the later commit wins',
    async (replacer) => {
      for (let f = 0; f < 4; f++) engine.vfs.write(`/blind/${f}.txt`, 'start');
      const events = recordEvents(engine);
      let running = true;
      const all = Promise.all(
        Array.from({ length: 8 }, (_, i) => engine.call(replacer, { path: `/blind/${i % 4}.txt`, content: `tool ${i}`, work_ms: 20 })),
      ).finally(() => {
        running = false;
      });
      // Writes to the same files keep committing while the tools run (each works about 20 ms after its
      // write): without reading a file, replacing it depends on nothing another write changes.
      const writers: Array<{ ok: boolean }> = [];
      for (let k = 0; running && k < 400; k++) writers.push(await engine.call('fs.write', { path: `/blind/${k % 4}.txt`, content: `fs ${k}` }));
      const results = await all;
      expect(results.filter((r) => !r.ok)).toEqual([]);
      expect(writers.filter((r) => !r.ok)).toEqual([]);
      expect(writers.length).toBeGreaterThan(4);
      const runs = events.filter((e): e is ToolResultEvent => e.type === 'ToolResultEvent' && e.tool === replacer).map((e) => e.attempts);
      expect(runs).toEqual(Array(8).fill(1));
      for (let f = 0; f < 4; f++) expect(engine.vfs.read(`/blind/${f}.txt`).toString()).toMatch(/^(tool|fs) \d+$/);
      engine.vfs.delete('/blind', { recursive: true });
    },
  );

  it.each(['js.counter', 'py.counter'])('a listing-based tool (%s) stays correct while other calls add files', async (counter) => {
    engine.vfs.mkdir('/items');
    const calls: Array<Promise<{ ok: boolean; data?: unknown }>> = [];
    for (let i = 0; i < 16; i++) {
      calls.push(engine.call('fs.write', { path: `/items/a-${i}.txt`, content: 'added' }));
      calls.push(engine.call(counter, { id: i }));
    }
    const results = await Promise.all(calls);
    expect(results.filter((r) => !r.ok)).toEqual([]);
    // Every call adds one file, so in any serial order each counter sees a different number of files
    // (how many calls came before it): two counters that saw the same listing would mean one of them
    // acted on a folder that had already changed.
    const counted = results.filter((_, i) => i % 2 === 1).map((r) => (r.data as { counted: number }).counted);
    expect(new Set(counted).size).toBe(16);
    expect(Math.max(...counted)).toBeLessThan(32);
    expect(engine.vfs.list('/items').entries).toHaveLength(32);
    for (let i = 0; i < 16; i++) expect(engine.vfs.read(`/items/c-${i}.txt`).toString()).toBe(String(counted[i]));
    engine.vfs.delete('/items', { recursive: true });
  });
});

describe('serializable calls on a durable project', () => {
  it('appenders of every runner at once: every line lands exactly once, and is still there after a restart', async () => {
    const project = tempProject(tools(), 'arium-serial-');
    try {
      let engine = await openEngine(project, { persist: true });
      engine.vfs.write('/log.txt', 'start\n');
      const wanted = Array.from({ length: 24 }, (_, i) => `line ${i}`);
      const results = await Promise.all(
        wanted.map((line, i) => {
          if (i % 3 === 0) return engine.call('js.appender', { line, work_ms: 2 });
          if (i % 3 === 1) return engine.call('py.appender', { line, work_ms: 2 });
          return engine.call('fs.write', { path: '/log.txt', content: `${line}\n`, append: true });
        }),
      );
      expect(results.filter((r) => !r.ok)).toEqual([]);
      expect(lines(engine, '/log.txt').sort()).toEqual(['start', ...wanted].sort());
      await engine.close();
      engine = await openEngine(project, { persist: true });
      expect(lines(engine, '/log.txt').sort()).toEqual(['start', ...wanted].sort());
      await engine.close();
    } finally {
      project.remove();
    }
  });
});
