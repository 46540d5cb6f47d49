import { afterEach, describe, expect, it } from 'vitest';
import type { Engine, RegistryProblem } from '../src/index.js';
import { definition, nextEvent, openEngine, type TempProject, tempProject } from './support/project.js';

/** Syntax errors in tool code are load problems as soon as the file is loaded or changed, not only when the tool is called. */

let project: TempProject;
let engine: Engine;

afterEach(async () => {
  await engine?.close();
  project?.remove();
});

const py = (id: string, entry: string) => definition({ id, runner: 'py-runner', entry, permissions: ['exec.py'] });
const syntax = (e: Engine) => e.problems().filter((p) => p.message.startsWith('syntax error: '));

describe('syntax errors in tool code', () => {
  it('are reported at load with file, line and column, for JS, TypeScript, an imported file and Python', async () => {
    project = tempProject({
      'bad-js.json': definition({ id: 'bad.js', entry: 'bad.js' }),
      'bad.js': 'export default async function run(input) {\n  return { a: 1, };\n  const x = ;\n}\n',
      'bad-ts.json': definition({ id: 'bad.ts', entry: 'bad.ts' }),
      'bad.ts': 'export default function run(input: unknown): number {\n  return (1 +;\n}\n',
      'imports.json': definition({ id: 'imports.broken', entry: 'imports.js' }),
      'imports.js': "import { f } from './lib/broken.js';\nexport default () => f();\n",
      'lib/broken.ts': 'export const f = () => {\n',
      'bad-py.json': py('bad.py', 'bad_tool.py'),
      'bad_tool.py': 'def run(input, ctx):\n    return {"a": 1\n\nx = 1\n',
      'good.json': definition({ id: 'good', entry: 'good.js' }),
      'good.js': 'export default async (input) => input;\n',
    });
    engine = await openEngine(project);
    const found = new Map(syntax(engine).map((p) => [p.id, p]));
    expect(found.get('bad.js')).toMatchObject({ file: 'tools/bad.js', at: '3:13', message: 'syntax error: Unexpected token' });
    expect(found.get('bad.ts')).toMatchObject({ file: 'tools/bad.ts', at: '2:14' });
    expect(found.get('imports.broken')).toMatchObject({ file: 'tools/lib/broken.ts', at: '2:1' });
    expect(found.get('bad.py')).toMatchObject({ file: 'tools/bad_tool.py', at: expect.stringMatching(/^2:\d+$/) });
    expect(found.get('bad.py')?.message).toMatch(/^syntax error: SyntaxError: /);
    expect(found.has('good')).toBe(false);
    // Still listed: a call says the same thing in full.
    expect(engine.tool('bad.js')).toBeDefined();
    const call = await engine.call('bad.js', {});
    expect(call.ok ? null : call.error.code).toBe('TOOL_ERROR');
  });

  it('are not looked for, and no runner is started, by an engine opened with warmUp: false; a call still reports them', async () => {
    project = tempProject({
      'bad-js.json': definition({ id: 'bad.js', entry: 'bad.js' }),
      'bad.js': 'export default async function run(input) {\n  const x = ;\n}\n',
      'bad-py.json': py('bad.py', 'bad_tool.py'),
      'bad_tool.py': 'def run(input, ctx):\n    return {"a": 1\n',
      'good.json': definition({ id: 'good', entry: 'good.js' }),
      'good.js': 'export default async (input) => ({ echoed: input });\n',
    });
    engine = await openEngine(project, { warmUp: false });
    expect(syntax(engine)).toEqual([]);
    expect(engine.tools().map((t) => t.id)).toEqual(expect.arrayContaining(['bad.js', 'bad.py', 'good']));
    // Nothing was started ahead: the JS sandbox process has no pid until a call needs it.
    const before = await engine.status();
    expect(before.runners['js-runner']?.process_starts).toBe(0);
    const bad = await engine.call('bad.js', {});
    expect(bad.ok ? null : bad.error).toMatchObject({ code: 'TOOL_ERROR' });
    expect(bad.ok ? null : bad.error.message).toMatch(/Unexpected token|SyntaxError/);
    const good = await engine.call('good', { n: 1 });
    expect(good.ok ? good.data : good.error).toEqual({ echoed: { n: 1 } });
    const badPy = await engine.call('bad.py', {});
    expect(badPy.ok ? null : badPy.error).toMatchObject({ code: 'TOOL_ERROR' });
    expect(badPy.ok ? null : badPy.error.message).toContain('SyntaxError');
  });

  it('appear and clear as the code is edited (hot reload)', async () => {
    project = tempProject({
      'js.json': definition({ id: 'edit.js', entry: 'edit.js' }),
      'edit.js': 'export default () => 1;\n',
      'py.json': py('edit.py', 'edit.py'),
      'edit.py': 'def run(input, ctx):\n    return 1\n',
    });
    engine = await openEngine(project, { watch: true });
    expect(syntax(engine)).toEqual([]);
    const broke = nextEvent(
      engine,
      'registry',
      (e) => e.problems.filter((p: RegistryProblem) => p.message.startsWith('syntax error: ')).length === 2,
    );
    project.write('edit.js', 'export default () => {\n');
    project.write('edit.py', 'def run(input, ctx)\n    return 1\n');
    const problems = (await broke).problems.filter((p) => p.message.startsWith('syntax error: '));
    expect(problems.map((p) => p.file).sort()).toEqual(['tools/edit.js', 'tools/edit.py']);
    const fixed = nextEvent(engine, 'registry', (e) => !e.problems.some((p: RegistryProblem) => p.message.startsWith('syntax error: ')));
    project.write('edit.js', 'export default () => 2;\n');
    project.write('edit.py', 'def run(input, ctx):\n    return 2\n');
    await fixed;
    expect(syntax(engine)).toEqual([]);
  });

  it('brackets nested 100,000 deep are a problem, not a crash, in either language', async () => {
    // 200 KB of JavaScript: under the 256 KB a load-time check parses; 400 KB of Python.
    const deep = 100_000;
    project = tempProject({
      'deep-js.json': definition({ id: 'deep.js', entry: 'deep.js' }),
      'deep.js': `export default () => ${'['.repeat(deep)}${']'.repeat(deep)};\n`,
      'deep-py.json': py('deep.py', 'deep.py'),
      'deep.py': `x = ${'('.repeat(2 * deep)}${')'.repeat(2 * deep)}\ndef run(input, ctx):\n    return 1\n`,
    });
    engine = await openEngine(project);
    const found = new Map(syntax(engine).map((p) => [p.id, p]));
    expect(found.get('deep.js')?.message).toMatch(/^syntax error: (could not be parsed|Not enough stack space)/);
    expect(found.get('deep.py')?.message).toMatch(/^syntax error: (SyntaxError|RecursionError|MemoryError)/);
    expect((await engine.call('fs.list', {})).ok).toBe(true);
  });
});
