import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PythonRunner } from '../runners/python/index.js';
import { bwrapProblem, unshareProblem } from '../runners/python/isolation.js';
import type { Engine, ToolResult } from '../src/index.js';
import { copyFixtureProject, definition, openEngine, type TempProject } from './support/project.js';

// Strings JSON allows that a process boundary could stumble on: lone surrogates (not encodable as
// UTF-8), every line break a framing could split on, NUL, and text that imitates a frame of each
// runner's protocol (a Python frame: 4-byte length + JSON; a Node IPC message: a JSON line). Each must
// reach the tool exactly as sent and come back exactly, through both runners, on every Python tier,
// and never stop the process that relays it.

const FAKE_PY_FRAME = `\u0000\u0000\u0000\u001c{"t":"result","output":"{}"}`;
const FAKE_IPC_LINE = '\n{"t":"result","id":1,"ok":true,"output":{}}\n';
const HOSTILE = ['a\ud800b', '\n\r\n\r', '\u2028\u2029\u0085', '\u0000', FAKE_PY_FRAME, FAKE_IPC_LINE, '\udc00x\ud83d\ude00y\ud83d'].join('');
const INPUT = { text: HOSTILE, [HOSTILE]: [HOSTILE, { nested: HOSTILE }], lone: '\ud800' };

function ok<T>(result: ToolResult): T {
  if (!result.ok) throw new Error(`expected success, got ${JSON.stringify(result.error)}`);
  return result.data as T;
}

const ECHO_JS = `export default async function run(input, ctx) {
  console.log(input.text);
  return { input, s: '\\ud800', k: { '\\udc00': ['x\\ud800y\\n\\u2028\\u0000'] } };
}
`;

describe('hostile strings: JS runner', () => {
  let project: TempProject;
  let engine: Engine;

  beforeAll(async () => {
    project = copyFixtureProject('python');
    project.write('echo.js', ECHO_JS);
    project.write('echo-js.json', definition({ id: 'js.echo', entry: 'echo.js' }));
    engine = await openEngine(project);
  });

  afterAll(async () => {
    await engine.close();
    project.remove();
  });

  it('reach the tool and come back exactly, also in its logs, with calls at the same time unharmed', async () => {
    const results = await Promise.all([engine.call('js.echo', INPUT), engine.call('js.echo', { text: 'plain' }), engine.call('js.echo', INPUT)]);
    for (const result of [results[0], results[2]] as ToolResult[]) {
      const data = ok<{ input: unknown; s: string; k: Record<string, string[]> }>(result);
      expect(data.input).toEqual(INPUT);
      expect(data.s).toBe('\ud800');
      expect(data.k).toEqual({ '\udc00': ['x\ud800y\n\u2028\u0000'] });
      expect(result.meta.logs?.map((l) => l.message)).toEqual([HOSTILE]);
    }
    expect(ok<{ input: unknown }>(results[1] as ToolResult).input).toEqual({ text: 'plain' });
  });
});

const modes = [
  ...((await bwrapProblem()) === null ? (['bubblewrap'] as const) : []),
  ...((await unshareProblem()) === null ? (['unshare'] as const) : []),
  'rlimits',
] as const;

describe.each(modes)('hostile strings: Python runner (%s)', (mode) => {
  let project: TempProject;
  let engine: Engine;

  beforeAll(async () => {
    project = copyFixtureProject('python');
    // One fork server: every call below meets the same one, and the one in flight with them.
    engine = await openEngine(project, { runners: [new PythonRunner({ isolation: mode, servers: 1 })] });
  });

  afterAll(async () => {
    await engine.close();
    project.remove();
  });

  it('reach the tool and come back exactly, in input, output and logs, and the server and the call in flight on it carry on', async () => {
    ok(await engine.call('py.echo', {})); // the server is up: the call in flight is not timed from its start
    const inFlight = engine.call('py.attack', { attack: 'hold', seconds: 0.8 });
    const echoed = await engine.call('py.echo', { ...INPUT, print: [HOSTILE], log: [HOSTILE] });
    const data = ok<{ input: Record<string, unknown> }>(echoed);
    expect(data.input).toEqual({ ...INPUT, print: [HOSTILE], log: [HOSTILE] });
    const logged = echoed.meta.logs?.filter((l) => l.level === 'warn').map((l) => l.message);
    expect(logged).toEqual([HOSTILE]);
    // Printed text goes through a pipe as UTF-8: line by line, a lone surrogate shown escaped.
    const printed = echoed.meta.logs?.filter((l) => l.level === 'stdout').map((l) => l.message);
    expect(printed?.join('\n')).toContain('\\ud800');
    expect(ok(await engine.call('py.fail', { kind: 'surrogates' }))).toEqual({ s: '\ud800', k: { '\udc00': ['x\ud800y\n\u2028\u0000'] } });
    expect(ok(await inFlight)).toEqual({ held: true });
    for (let i = 0; i < 3; i++) expect(ok<{ input: unknown }>(await engine.call('py.echo', { i })).input).toEqual({ i });
    expect((await engine.status()).runners['py-runner']).toMatchObject({ server_starts: 1, server_crashes: 0 });
  });
});
