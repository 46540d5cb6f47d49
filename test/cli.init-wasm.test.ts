import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseJson, runCli, tempWorkspace } from './cli.helpers.js';
import { toolchain } from './support/wasm.js';

// `arium init --template c|rust`: a WebAssembly tool from source, built by init with the toolchain it
// names, that loads and answers a call.

let ws: ReturnType<typeof tempWorkspace>;
beforeEach(() => {
  ws = tempWorkspace();
});
afterEach(() => ws.cleanup());

const cli = (args: string[]) => runCli(ws.root, args);

describe('arium init --template', () => {
  it.runIf(toolchain('c'))('c: writes the source and definition, builds the module, and the tool answers', async () => {
    const made = parseJson(await cli(['init', 'wc', '--template', 'c', '--workspace', 'ws', '--json']));
    expect(made.build).toEqual({ ok: true, command: 'clang --target=wasm32-wasi -O2 src/sum.c -o math-sum-c.wasm' });
    expect(existsSync(join(ws.workspace, 'wc', 'tools', 'src', 'sum.c'))).toBe(true);
    const tools = parseJson(await cli(['tools', '--workspace', 'ws', '--project', 'wc', '--json']));
    expect(tools.problems).toEqual([]);
    const call = parseJson(await cli(['call', 'math.sum-c', '{"numbers":[1,2,3.5]}', '--workspace', 'ws', '--project', 'wc', '--json']));
    expect(call.data).toEqual({ sum: 6.5 });
  });

  it.runIf(toolchain('rust'))('rust: builds with rustc for wasm32-wasi, and the tool answers', async () => {
    // Debian's rustc first: a rustup toolchain earlier on PATH may not have the wasm32-wasi target.
    const path = process.env.PATH;
    process.env.PATH = `/usr/bin:${path}`;
    try {
      const made = parseJson(await cli(['init', 'wr', '--template', 'rust', '--workspace', 'ws', '--json']));
      expect(made.build).toMatchObject({ ok: true });
    } finally {
      process.env.PATH = path;
    }
    const call = parseJson(await cli(['call', 'math.sum-rust', '{"numbers":[0.5,0.5]}', '--workspace', 'ws', '--project', 'wr', '--json']));
    expect(call.data).toEqual({ sum: 1 });
  });

  it('names the templates when given an unknown one', async () => {
    const run = await cli(['init', 'x', '--template', 'cobol', '--workspace', 'ws']);
    expect(run.code).toBe(2);
    expect(run.err).toContain('Unknown template "cobol"; templates: c, rust');
  });
});
