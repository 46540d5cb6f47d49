import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEngine, type Engine, installProject } from '../src/index.js';
import { dataOf } from './support/js-engine.js';
import { definition, nextEvent, openEngine, type TempProject, tempProject } from './support/project.js';

// A package's module state between calls. A fresh-context tool's package is evaluated in each call's own
// context (ahead of the call, in a warm context no other call uses: runners/js/worker/pool.mjs), so what
// one call does to the package's exports, their prototypes or the intrinsics is gone for the next call.
// A persistent tool keeps it, as documented. Real package (semver, CommonJS) from npm's cache or registry.

const MUTATES = `import semver from 'semver';
export default async function run(input) {
  const seen = {
    exportMarker: semver.marker ?? null,
    protoMarker: semver.SemVer.prototype.marker ?? null,
    arrayMarker: [].marker ?? null,
    valid: semver.valid('1.2.3'),
  };
  semver.marker = input.tag;
  semver.SemVer.prototype.marker = input.tag;
  Array.prototype.marker = input.tag;
  semver.valid = () => 'hijacked by ' + input.tag;
  return seen;
}
`;

let project: TempProject;
let engine: Engine;

beforeAll(async () => {
  project = tempProject({
    'mutates.js': MUTATES,
    'fresh.json': definition({ id: 'fresh', entry: 'mutates.js' }),
    'kept.json': definition({ id: 'kept', entry: 'mutates.js', context: 'persistent' }),
    'loud.js':
      "import semver from 'semver';\nconsole.log('loading', semver.major('2.0.0'));\nexport default async function run(input) { console.log('running', input.n); return input; }\n",
    'loud.json': definition({ id: 'loud', entry: 'loud.js' }),
  });
  writeFileSync(join(project.dir, 'package.json'), JSON.stringify({ name: 'p-tools', private: true, dependencies: { semver: '7.7.2' } }));
  await installProject({ workspace: project.workspace, project: 'p' });
  engine = await createEngine({ workspace: project.workspace, project: 'p', persist: false, watch: false });
}, 120_000);

afterAll(async () => {
  await engine?.close();
  project?.remove();
});

const clean = { exportMarker: null, protoMarker: null, arrayMarker: null, valid: '1.2.3' };

describe("a package's module state", () => {
  it('does not pass from one call of a fresh-context tool to the next, sequential or concurrent', async () => {
    // Enough calls for contexts evaluated ahead, linked ahead and made at call time alike.
    for (let i = 0; i < 12; i++) expect(dataOf(await engine.call('fresh', { tag: `call ${i}` }))).toEqual(clean);
    const together = await Promise.all(Array.from({ length: 6 }, (_, i) => engine.call('fresh', { tag: `concurrent ${i}` })));
    for (const result of together) expect(dataOf(result)).toEqual(clean);
  });

  it('passes between the calls of a persistent tool, which asks for it', async () => {
    expect(dataOf(await engine.call('kept', { tag: 'first' }))).toEqual(clean);
    expect(dataOf(await engine.call('kept', { tag: 'second' }))).toEqual({
      exportMarker: 'first',
      protoMarker: 'first',
      arrayMarker: 'first',
      valid: 'hijacked by first',
    });
  });
});

describe('a persistent tool with a package, its definition reloaded', () => {
  it('starts over with the package evaluated again', async () => {
    const own = await openEngine(project, { watch: true });
    try {
      expect(dataOf(await own.call('kept', { tag: 'before' }))).toEqual(clean);
      expect(dataOf(await own.call('kept', { tag: 'again' })).exportMarker).toBe('before');
      const reloaded = nextEvent(own, 'registry', (e) => e.updated.includes('kept'), 15_000);
      project.write('kept.json', definition({ id: 'kept', entry: 'mutates.js', context: 'persistent', description: 'reloaded' }));
      await reloaded;
      expect(dataOf(await own.call('kept', { tag: 'after' }))).toEqual(clean);
    } finally {
      await own.close();
    }
  });
});

describe('a module evaluated ahead of its call', () => {
  it("gives the call the lines its top level logged, once, before the call's own", async () => {
    for (let n = 0; n < 8; n++) {
      const result = await engine.call('loud', { n });
      expect(dataOf(result)).toEqual({ n });
      expect((result.meta.logs ?? []).map((line) => line.message)).toEqual(['loading 2', `running ${n}`]);
    }
  });
});
