import { describe, expect, it } from 'vitest';
import { runnerCatalog } from '../runners/index.js';
import { toolMetaSchema } from '../src/registry/meta-schema.js';
import type { RunnerDefinition } from '../src/runner.js';
import { compileSchema } from '../src/validation.js';

// A runner's own tool definition fields (`toolFields`): one owner per field, allowed on its tools only.

const base: RunnerDefinition = {
  name: 'sh-runner',
  summary: 'shell tools',
  extensions: ['.sh'],
  permission: 'exec.sh',
  create: () => {
    throw new Error('not created here');
  },
};

describe('tool definition fields a runner declares', () => {
  it.each([
    [{ args: { type: 'array' } }, 'declares the tool definition field "args", which runner "wasm-runner" declares; choose another name'],
    [{ entry: { type: 'string' } }, 'declares the tool definition field "entry", which every tool has; choose another name'],
    [{ Bad: { type: 'string' } }, '"toolFields" maps lower-case tool definition fields to JSON Schemas ("Bad" does not)'],
  ])('refuses %j with a message that says why', (toolFields, message) => {
    expect(() => runnerCatalog([{ ...base, toolFields }])).toThrow(message);
  });

  it("are in the meta-schema for the declaring runner's tools only", () => {
    const catalog = runnerCatalog([{ ...base, toolFields: { shell: { type: 'string', enum: ['bash', 'sh'] } } }]);
    const check = compileSchema(toolMetaSchema(catalog));
    const tool = (runner: string, extra: Record<string, unknown>) => ({
      id: 't',
      description: 'd',
      runner,
      entry: 'a.sh',
      schema: { type: 'object' },
      ...extra,
    });
    expect(check(tool('sh-runner', { shell: 'bash' }))).toBeNull();
    expect(check(tool('sh-runner', { shell: 'zsh' }))).not.toBeNull();
    expect(check(tool('js-runner', { shell: 'bash' }))).not.toBeNull();
    expect(check(tool('wasm-runner', { args: ['-v'], env: { A: '1' } }))).toBeNull();
    expect(check(tool('sh-runner', { args: ['-v'] }))).not.toBeNull();
  });
});
