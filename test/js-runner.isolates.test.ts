import { afterEach, describe, expect, it } from 'vitest';
import { JsRunner } from '../runners/js/js-runner.js';
import type { Engine } from '../src/index.js';
import { dataOf } from './support/js-engine.js';
import { definition, openEngine, type TempProject, tempProject } from './support/project.js';

/** The isolates of a JS sandbox process (runners/js/worker/pool.mjs), in real sandbox processes. */

let project: TempProject | null = null;
let engine: Engine | null = null;

afterEach(async () => {
  await engine?.close();
  project?.remove();
  engine = null;
  project = null;
});

const SPIN = `export default async function run(input) {
  const end = Date.now() + input.ms;
  while (Date.now() < end) {}
  return { spun: input.ms };
}
`;
const QUICK = 'export default async function run(input) { return { n: input.n }; }\n';

async function jsProject(runner: JsRunner): Promise<Engine> {
  project = tempProject({
    'spin.js': SPIN,
    'spin.json': definition({ id: 'spin', entry: 'spin.js', limits: { timeout_ms: 20_000 } }),
    'quick.js': QUICK,
    'quick.json': definition({ id: 'quick', entry: 'quick.js' }),
  });
  engine = await openEngine(project, { runners: [runner] });
  return engine;
}

describe('the isolates of a JS sandbox process', () => {
  it('answers while a tool computes on an isolate whose warm context was being made', async () => {
    const e = await jsProject(new JsRunner({ processes: 1, maxIsolates: 1 }));
    dataOf(await e.call('spin', { ms: 0 }));
    // The call just ended: its isolate is making the next warm context when the spinning call takes
    // it. The sandbox's main thread must not wait on that isolate to finish the context meanwhile.
    const ends: string[] = [];
    const spin = e.call('spin', { ms: 3000 }).then((r) => {
      ends.push('spin');
      return r;
    });
    await e.status();
    ends.push('status');
    dataOf(await spin);
    expect(ends).toEqual(['status', 'spin']);
  });
});
