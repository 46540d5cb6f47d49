// Over 500 lines: one suite that runs every code block of the README, each kind of block with its
// own runner, so a new block is either run here or listed as not run, with why.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import ts from 'typescript';
import { afterAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { freePort, natsServerPath } from '../bench/nats-server.js';
import { DEFAULT_CATALOG } from '../runners/index.js';
import { loadProjectConfig } from '../src/config.js';
import { createEngine, type Engine } from '../src/index.js';
import { natsProviderKind } from '../src/providers/nats.js';

/**
 * Every fenced block of the README is run or checked here, by what it is: a tool definition is loaded
 * with the code blocks its entry names and called; a tool module is run as a tool; the library example
 * is type-checked under --strict and run; the arium.json example is loaded. A block this file does not
 * know fails the test: a new example must come with its check. Blocks that cannot run in a test say why.
 */
const ROOT = resolve(import.meta.dirname, '..');
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');
const temp = mkdtempSync(join(tmpdir(), 'arium-readme-'));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

interface Block {
  lang: string;
  line: number;
  code: string;
  first: string;
}

function blocks(): Block[] {
  const out: Block[] = [];
  const lines = README.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S*)\s*$/.exec(lines[i] as string);
    if (!open) continue;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i] as string); i++) body.push(lines[i] as string);
    out.push({ lang: open[1] as string, line: start + 1, code: `${body.join('\n')}\n`, first: body[0] ?? '' });
  }
  return out;
}

/** A block's file name, from its first line's comment (`# tools/reverse.py, …`, `// workspace/…/x.js (abridged)`). */
const fileOf = (block: Block) => /^(?:#|\/\/)\s*(?:\S*\/)?([\w.-]+\.(?:py|js|mjs|ts))\b/.exec(block.first)?.[1];

/** How a tool module is called, in order on one VFS: the files to add first, the input, and what it must return. */
type Case = { seed?: Record<string, string>; input: Record<string, unknown>; returns: unknown };
const MODULES: Record<string, Case[]> = {
  'reverse.py': [{ input: { text: 'hello' }, returns: { text: 'olleh' } }],
  // On a VFS without /notes as well as with notes in it.
  'demo-notes-index.js': [
    { input: {}, returns: { notes: 0 } },
    { seed: { '/notes/a.md': '# a', '/notes/sub/b.md': '# b' }, input: {}, returns: { notes: 3 } },
  ],
  'demo_word_freq.py': [
    {
      input: { text: 'a b a c a b' },
      returns: {
        top: [
          ['a', 3],
          ['b', 2],
          ['c', 1],
        ],
      },
    },
  ],
};

/** Blocks that are not run, and why. */
const NOT_RUN: Array<[lang: string, first: RegExp, why: string]> = [
  [
    'sh',
    /^arium init mytools --template c/,
    'needs the wasm32-wasi toolchains; test/cli.init-wasm.test.ts runs arium init --template c and rust and calls the tools they build',
  ],
  [
    'sh',
    /^# \(a\) install, build, and run the main job/,
    'the fresh-machine commands (npm install, the demo, the tests): CI runs exactly these (.ci/run)',
  ],
  [
    'sh',
    /^npm install git\+https:/,
    'installs from the network with a placeholder URL; test/package.install.test.ts installs the packed package instead',
  ],
  ['', /^src\/\s+the engine's core:/, 'a folder listing, not code'],
  [
    'typescript',
    /^import \{ satellite \} from 'arium\/satellite'/,
    'a satellite in a program: test/providers.nats.test.ts runs satellites made by this call',
  ],
  ['py', /^# a satellite in Python/, 'a Python satellite: test/providers.nats.test.ts runs fixtures/satellites/py_tools.py on this SDK'],
  [
    'sh',
    /^# machine A \(10\.0\.0\.5\): a NATS server/,
    'two machines and a NATS server reachable between them; test/remote.*.test.ts run the same setup on loopback',
  ],
  [
    'sh',
    /^# the HTTP worker example:/,
    'a worker on a fixed port and the CLI; test/providers.http.test.ts runs this worker and bundle (checked equal to the README below)',
  ],
];

/** A block showing a file of examples/, named by its first line (`# examples/…`): it is that file, verbatim. */
const exampleFileOf = (block: Block) => /^#\s*(examples\/\S+)$/.exec(block.first)?.[1];

let project = 0;
async function engineWith(files: Record<string, string>, options: Parameters<typeof createEngine>[0] = {}): Promise<Engine> {
  const workspace = join(temp, `ws${project++}`);
  for (const [name, content] of Object.entries(files)) {
    mkdirSync(join(workspace, 'p', 'tools', name, '..'), { recursive: true });
    writeFileSync(join(workspace, 'p', 'tools', name), content);
  }
  mkdirSync(join(workspace, 'p', 'tools'), { recursive: true });
  return createEngine({ workspace, project: 'p', watch: false, persist: false, ...options });
}

async function runModule(block: Block): Promise<void> {
  const file = fileOf(block) as string;
  const cases = MODULES[file];
  if (!cases) throw new Error(`README line ${block.line}: no input is known for the tool module ${file}; add it to MODULES`);
  const python = file.endsWith('.py');
  const definition = {
    id: 'readme.example',
    description: `README example ${file}`,
    runner: python ? 'py-runner' : 'js-runner',
    entry: file,
    schema: { type: 'object' },
    permissions: [python ? 'exec.py' : 'exec.js', 'vfs.read', 'vfs.write'],
  };
  const engine = await engineWith({ 'example.json': JSON.stringify(definition), [file]: block.code });
  try {
    expect(engine.problems()).toEqual([]);
    for (const one of cases) {
      for (const [path, content] of Object.entries(one.seed ?? {})) engine.vfs.write(path, content);
      const result = await engine.call('readme.example', one.input);
      expect(result.ok ? result.data : result.error).toEqual(one.returns);
    }
  } finally {
    await engine.close();
  }
}

async function runDefinition(block: Block, all: Block[]): Promise<void> {
  const definition = JSON.parse(block.code) as { id: string; entry?: string; examples?: unknown[] };
  // A macro has no entry: its steps call builtins, which every engine has.
  const files: Record<string, string> = { 'def.json': block.code };
  if (definition.entry !== undefined) {
    const code = all.find((b) => fileOf(b) === definition.entry);
    if (!code) throw new Error(`README line ${block.line}: the definition's entry ${definition.entry} has no code block (a first line naming it)`);
    files[definition.entry] = code.code;
  }
  const engine = await engineWith(files);
  try {
    expect(engine.problems()).toEqual([]);
    expect(definition.examples?.length).toBeGreaterThan(0);
    for (const example of definition.examples ?? []) {
      const result = await engine.call(definition.id, example);
      expect(result.ok ? null : result.error).toBeNull();
    }
  } finally {
    await engine.close();
  }
}

/** A YAML definition block, named by its first line (`# tools/x.yaml: …`). */
const yamlDefinitionOf = (block: Block) => /^#\s*tools\/([\w.-]+\.ya?ml)\b/.exec(block.first)?.[1];

/** A YAML definition: loaded with its entry's code block and called with its examples, and equal to the JSON block of its id. */
async function runYamlDefinition(block: Block, all: Block[]): Promise<void> {
  const value = parseYaml(block.code) as { id: string; entry?: string; examples?: unknown[] };
  const twin = all.find((b) => b.lang === 'json' && b.code.includes(`"id": "${value.id}"`));
  if (twin) expect(value).toEqual(JSON.parse(twin.code));
  const files: Record<string, string> = { [yamlDefinitionOf(block) as string]: block.code };
  if (value.entry !== undefined) files[value.entry] = (all.find((b) => fileOf(b) === value.entry) as Block).code;
  const engine = await engineWith(files);
  try {
    expect(engine.problems()).toEqual([]);
    for (const example of value.examples ?? []) {
      const result = await engine.call(value.id, example);
      expect(result.ok ? null : result.error).toBeNull();
    }
  } finally {
    await engine.close();
  }
}

/** A SKILL.md block: served by an engine (its tools exist), and rendered with its required arguments. */
async function runSkill(block: Block): Promise<void> {
  const name = /^name: (\S+)$/m.exec(block.code)?.[1] as string;
  const workspace = join(temp, `ws${project++}`);
  mkdirSync(join(workspace, 'p', 'tools'), { recursive: true });
  mkdirSync(join(workspace, 'p', 'skills', name), { recursive: true });
  writeFileSync(join(workspace, 'p', 'skills', name, 'SKILL.md'), block.code);
  const engine = await createEngine({ workspace, project: 'p', watch: false, persist: false });
  try {
    expect(engine.problems()).toEqual([]);
    const skill = engine.skill(name);
    const args = Object.fromEntries((skill?.arguments ?? []).map((a) => [a.name, `<${a.name}>`]));
    expect(engine.renderSkill(name, args)).not.toMatch(/\{\{/);
  } finally {
    await engine.close();
  }
}

/** The result shapes: each example value is what a real call gives, but for what varies (ids, times). */
async function checkResults(block: Block): Promise<void> {
  const values = block.code.split(/\n(?=\{ "ok")/).map((text) => JSON.parse(text));
  const engine = await engineWith({});
  try {
    engine.vfs.write('/a.txt', 'x');
    const ok = await engine.call('fs.read', { path: '/a.txt' });
    engine.vfs.delete('/a.txt');
    const failed = await engine.call('fs.read', { path: '/a.txt' });
    const [okExample, errExample] = values;
    expect(Object.keys(ok).sort()).toEqual(Object.keys(okExample).sort());
    expect(Object.keys(ok.meta)).toEqual(expect.arrayContaining(Object.keys(okExample.meta)));
    expect(failed.ok ? null : failed.error).toEqual(errExample.error);
  } finally {
    await engine.close();
  }
}

/** A project folder whose arium.json is the block. */
function configDir(block: Block): string {
  const dir = join(temp, `config${project++}`, 'p');
  mkdirSync(join(dir, 'tools'), { recursive: true });
  writeFileSync(join(dir, 'arium.json'), block.code);
  return dir;
}

async function checkConfig(block: Block): Promise<void> {
  const dir = join(temp, `config${project++}`);
  mkdirSync(join(dir, 'p', 'tools'), { recursive: true });
  writeFileSync(join(dir, 'p', 'arium.json'), block.code);
  expect(loadProjectConfig(join(dir, 'p'), DEFAULT_CATALOG)).toEqual(JSON.parse(block.code));
  const engine = await createEngine({ workspace: dir, project: 'p', watch: false, persist: false });
  await engine.close();
}

/**
 * The providers example: the project folder has server-everything in its node_modules (this
 * checkout's), GITHUB_TOKEN is set, and the calls the README shows answer what it says.
 */
async function checkProviders(block: Block): Promise<void> {
  const dir = join(temp, `providers${project++}`);
  mkdirSync(join(dir, 'p', 'tools'), { recursive: true });
  writeFileSync(join(dir, 'p', 'arium.json'), block.code);
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'p', 'node_modules'));
  expect(loadProjectConfig(join(dir, 'p'), DEFAULT_CATALOG)).toEqual(JSON.parse(block.code));
  const engine = await createEngine({
    workspace: dir,
    project: 'p',
    watch: false,
    persist: false,
    env: { GITHUB_TOKEN: 'ghp_readme_example_value' },
  });
  try {
    expect(await engine.call('everything.echo', { message: 'hi' })).toMatchObject({
      ok: true,
      data: { content: [{ type: 'text', text: 'Echo: hi' }] },
    });
    const env = await engine.call<{ content: Array<{ text: string }> }>('everything.get-env', {});
    expect(env.ok && JSON.parse(env.data.content[0]?.text as string).GITHUB_TOKEN).toBe('[secret:gh]');
  } finally {
    await engine.close();
  }
}

/**
 * A folder set up as a user's project that depends on arium: node_modules/arium (this checkout),
 * node_modules/.bin/arium (what `npx arium` finds there, offline), and a copy of the demo workspace.
 */
function userFolder(name: string): string {
  const dir = join(temp, name);
  mkdirSync(join(dir, 'node_modules', '.bin'), { recursive: true });
  symlinkSync(ROOT, join(dir, 'node_modules', 'arium'));
  symlinkSync(join(ROOT, 'bin', 'arium.js'), join(dir, 'node_modules', '.bin', 'arium'));
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'user', type: 'module', private: true }));
  cpSync(join(ROOT, 'workspace', 'demo'), join(dir, 'workspace', 'demo'), {
    recursive: true,
    filter: (source) => !source.includes(`${join('demo', '.arium')}`),
  });
  return dir;
}

/**
 * The desktop client config: absolute paths (node, bin/arium.js in the user's node_modules, the
 * workspace, pointed at a copy); the server it names starts from another folder and lists tools.
 */
async function checkMcpConfig(block: Block): Promise<void> {
  const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
  const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');
  const server = (JSON.parse(block.code) as { mcpServers: Record<string, { command: string; args: string[]; env: Record<string, string> }> })
    .mcpServers.arium;
  expect(server?.command).toMatch(/^\/.+\/node$/);
  expect(server?.args[0]).toBe('/path/to/node_modules/arium/bin/arium.js');
  expect(Object.keys(server?.env ?? {})).toEqual(['PATH', 'XDG_RUNTIME_DIR']);
  const dir = userFolder('mcp-config');
  // The bridge starts the workspace's daemon: in a runtime folder of this test, stopped after.
  const runtime = mkdtempSync(join(tmpdir(), 'arium-readme-run-'));
  const place: Record<string, string> = {
    '/path/to/workspace': join(dir, 'workspace'),
    '/path/to/node_modules/arium/bin/arium.js': join(dir, 'node_modules', 'arium', 'bin', 'arium.js'),
  };
  const args = (server?.args ?? []).map((a) => place[a] ?? a);
  const client = new Client({ name: 'readme', version: '1' });
  await client.connect(
    new StdioClientTransport({
      command: process.execPath,
      args,
      cwd: tmpdir(),
      stderr: 'pipe',
      env: { PATH: process.env.PATH ?? '', HOME: dir, XDG_RUNTIME_DIR: runtime },
    }),
  );
  try {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toContain('fs.read');
  } finally {
    await client.close();
    stopDaemon(join(dir, 'workspace'), runtime);
  }
}

/** Stops the daemon a README example started (its record names it), and waits until it is gone. */
function stopDaemon(workspace: string, runtime: string): void {
  execFileSync(process.execPath, ['--no-node-snapshot', join(ROOT, 'bin', 'arium.js'), '--workspace', workspace, 'daemon', 'stop'], {
    env: { PATH: process.env.PATH ?? '', XDG_RUNTIME_DIR: runtime },
    encoding: 'utf8',
  });
}

/** The connect() example: type-checked, then run against the daemon it starts, whose file it wrote is read back. */
/**
 * A code-mode program: run as the README says, through code.run with `atomic`, on a copy of the demo
 * project with two notes; its report counts each note's words and lands as one write.
 */
async function runCodeModeExample(block: Block): Promise<void> {
  const dir = join(temp, `code-mode-${block.line}`);
  cpSync(join(ROOT, 'workspace', 'demo'), join(dir, 'demo'), { recursive: true, filter: (source) => !source.includes(`${join('demo', '.arium')}`) });
  const engine = await createEngine({ workspace: dir, project: 'demo', watch: false, persist: false });
  try {
    for (const [path, content] of [
      ['/notes/a.md', 'tea tea coffee'],
      ['/notes/b.md', 'rain sun rain rain'],
    ])
      expect((await engine.call('fs.write', { path, content })).ok).toBe(true);
    const run = await engine.call('code.run', { code: block.code, atomic: true });
    expect(run).toMatchObject({ ok: true, data: { '/notes/a.md': 3, '/notes/b.md': 4 } });
    const written = await engine.call('fs.read', { path: '/reports/words.json' });
    expect(written.ok && JSON.parse((written.data as { content: string }).content)).toEqual(run.ok && run.data);
  } finally {
    await engine.close();
  }
}

async function runConnectExample(block: Block): Promise<void> {
  const dir = join(temp, `connect-${block.line}`);
  mkdirSync(join(dir, 'node_modules'), { recursive: true });
  symlinkSync(ROOT, join(dir, 'node_modules', 'arium'));
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'user', type: 'module', private: true }));
  writeFileSync(join(dir, 'example.ts'), block.code);
  expect(typeProblems(join(dir, 'example.ts'))).toEqual([]);
  cpSync(join(ROOT, 'workspace', 'demo'), join(dir, 'workspace', 'demo'), {
    recursive: true,
    filter: (source) => !source.includes(`${join('demo', '.arium')}`),
  });
  const runtime = mkdtempSync(join(tmpdir(), 'arium-readme-run-'));
  const js = ts.transpileModule(block.code, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } }).outputText;
  writeFileSync(join(dir, 'example.mjs'), js);
  const env = { PATH: process.env.PATH ?? '', HOME: dir, XDG_RUNTIME_DIR: runtime };
  try {
    execFileSync(process.execPath, [join(dir, 'example.mjs')], { cwd: dir, encoding: 'utf8', env });
    const read = execFileSync(
      process.execPath,
      [
        '--no-node-snapshot',
        join(ROOT, 'bin', 'arium.js'),
        '--workspace',
        join(dir, 'workspace'),
        'call',
        'fs.read',
        '{"path":"/out/a.txt"}',
        '--json',
      ],
      { encoding: 'utf8', env },
    );
    expect(JSON.parse(read)).toMatchObject({ ok: true, data: { content: 'hi\n' } });
  } finally {
    stopDaemon(join(dir, 'workspace'), runtime);
    rmSync(runtime, { recursive: true, force: true });
  }
}

/** What TypeScript, strict, says of a user's file (an ES module resolving packages as Node does). */
function typeProblems(file: string): string[] {
  const program = ts.createProgram([file], {
    strict: true,
    noUncheckedIndexedAccess: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    noEmit: true,
    skipLibCheck: true,
    types: ['node'],
    typeRoots: [join(ROOT, 'node_modules', '@types')],
  });
  return ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
}

const GATEWAY_EXAMPLE = /^# the gateway, from another shell/;

/** The curl example: run by bash in a user's folder while `arium serve` (started as it says) runs there. */
async function runGatewayExample(block: Block): Promise<void> {
  if (spawnSync('curl', ['--version']).status !== 0) {
    // CI installs curl (.ci/run); a machine without it cannot run the example as written.
    if (process.env.CI) throw new Error('CI must run the README gateway example, but curl is not installed');
    console.log('readme.examples: the gateway example is not run: curl is not installed');
    return;
  }
  const dir = userFolder('gateway');
  const env = { PATH: process.env.PATH ?? '', HOME: dir };
  const server = spawn(process.execPath, [join(dir, 'node_modules', '.bin', 'arium'), 'serve'], { cwd: dir, env, stdio: 'ignore' });
  try {
    const addr = join(dir, 'workspace', '.arium', 'arium.addr');
    for (let i = 0; i < 600 && !existsSync(addr); i++) await new Promise((r) => setTimeout(r, 25));
    const out = execFileSync('bash', ['-e', '-c', block.code], { cwd: dir, env, encoding: 'utf8' });
    expect(out.match(/"ok":true/g)).toHaveLength(2);
    expect(out).toContain('"trace_id":"step-1"');
    expect(out).toContain('+hi');
  } finally {
    server.kill('SIGINT');
  }
}

const SATELLITE_EXAMPLE = /^# NATS satellites: a server, a satellite/;

/** The NATS satellites example: run by bash in this checkout (it uses dist/), on a free port, with the nats-server the tests use. */
async function runSatelliteExample(block: Block): Promise<void> {
  const server = natsServerPath();
  if (!server) {
    if (process.env.CI) throw new Error('CI must run the README satellites example, but nats-server is not installed');
    console.log('readme.examples: the satellites example is not run: nats-server is not installed');
    return;
  }
  const port = String(await freePort());
  const code = block.code.replaceAll('4222', port).replace(/^nats-server /m, `${server} `);
  const out = execFileSync('bash', ['-e', '-c', code], { cwd: ROOT, encoding: 'utf8', timeout: 60_000, stdio: ['ignore', 'pipe', 'ignore'] });
  expect(out).toContain("[ 'echo', 'sleep' ]");
  expect(out).toContain("{ ok: true, data: { text: 'hi', node: 'box-1' } }");
  expect(out).toContain("[ [ 'box-1', [ 'echo', 'sleep' ] ] ]");
}

const GATEWAYS_EXAMPLE = /^# Gateways in front of one project: three clustered nats-servers/;

/** The gateways example: run by bash in this checkout (it uses dist/), its fixed ports made free ones, with the nats-server the tests use. */
async function runGatewaysExample(block: Block): Promise<void> {
  const server = natsServerPath();
  if (!server) {
    if (process.env.CI) throw new Error('CI must run the README gateways example, but nats-server is not installed');
    console.log('readme.examples: the gateways example is not run: nats-server is not installed');
    return;
  }
  let code = block.code.replace(/^nats-server /gm, `${server} `);
  for (const fixed of ['4221', '4222', '4223', '6231', '6232', '6233', '8701', '8702']) code = code.replaceAll(fixed, String(await freePort()));
  const out = await bashGroup(code, ROOT, 120_000);
  expect(out).toContain('"ok":true,"tool_id":"fs.write"');
  // Read through B twice: forwarded to A, then after A was killed, from B's own engine.
  expect(out.match(/"path":"\/hello.txt","size":2/g)).toHaveLength(2);
}

/**
 * Runs `code` with bash in a process group of its own and returns what it printed. Whether it ends,
 * fails or runs past `timeoutMs`, the whole group is then killed: an example that starts servers in the
 * background (nats-server, gateways) and stops before its own `kill` line leaves none of them running.
 */
function bashGroup(code: string, cwd: string, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-e', '-c', code], { cwd, detached: true, stdio: ['ignore', 'pipe', 'ignore'] });
    let out = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => {
      out += chunk;
    });
    const killGroup = () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // The group has ended.
      }
    };
    const timer = setTimeout(() => {
      killGroup();
      reject(new Error(`the example ran past ${timeoutMs} ms; it printed:\n${out}`));
    }, timeoutMs);
    child.on('error', reject);
    // bash has ended: what it left in the background goes too, which lets its stdout close.
    child.on('exit', killGroup);
    child.on('close', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(new Error(`the example exited with ${code}; it printed:\n${out}`));
    });
  });
}

/** arium.json's providers: each `nats` provider's settings as the kind parses them. */
function checkNatsProviders(block: Block): void {
  const providers = (JSON.parse(block.code) as { providers: Record<string, Record<string, unknown>> }).providers;
  for (const [name, provider] of Object.entries(providers)) {
    if ('nats' in provider) expect(() => natsProviderKind.parse(provider.nats, `/providers/${name}/nats`)).not.toThrow();
  }
}

const SHELL_EXAMPLE = /^# shell\.run from the CLI/;
const PACKS_EXAMPLE = /^# tool packs from the CLI/;

/** The tool packs example: run by bash in a user's folder holding the demo project and examples/packs. */
async function runPacksExample(block: Block): Promise<void> {
  const dir = userFolder('packs-cli');
  cpSync(join(ROOT, 'examples', 'packs'), join(dir, 'examples', 'packs'), { recursive: true });
  const env = { PATH: process.env.PATH ?? '', HOME: dir, npm_config_offline: 'true', ARIUM_NO_DAEMON: '1' };
  const out = execFileSync('bash', ['-e', '-c', block.code], { cwd: dir, env, encoding: 'utf8' });
  expect(out).toContain('added textkit 1.0.0');
  expect(out).toContain('"text": "HI"');
  expect(out).toContain('updated textkit 1.0.0 → 1.0.0');
  expect(out).toContain('packed mytools 1.0.0');
  expect(out).toContain('removed textkit 1.0.0');
  expect(out).toContain('added example_domain 0.1');
  expect(existsSync(join(dir, 'mytools-1.0.0.tgz'))).toBe(true);
}

/** The shell.run example: run by bash in a user's folder (npx finds this checkout's arium, offline). */
async function runShellExample(block: Block): Promise<void> {
  const dir = userFolder('shell-cli');
  const env = { PATH: process.env.PATH ?? '', HOME: dir, npm_config_offline: 'true' };
  const out = execFileSync('bash', ['-e', '-c', block.code], { cwd: dir, env, encoding: 'utf8' });
  expect(out).toContain('"exit_code": 0');
  expect(out).toContain('/notes/todo.md:1:TODO: ship it');
  expect(out).toContain('"change": "created"');
}

/** The MCP client example: type-checked as a user's own TypeScript, then run against `npx arium mcp` in a user's folder. */
async function runMcpClientExample(block: Block): Promise<void> {
  const dir = userFolder('mcp-client');
  // The SDK resolves from this checkout's node_modules, as it would from the user's own.
  symlinkSync(join(ROOT, 'node_modules', '@modelcontextprotocol'), join(dir, 'node_modules', '@modelcontextprotocol'));
  writeFileSync(join(dir, 'example.ts'), block.code);
  expect(typeProblems(join(dir, 'example.ts'))).toEqual([]);
  const js = ts.transpileModule(block.code, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } }).outputText;
  writeFileSync(join(dir, 'example.mjs'), js);
  const out = execFileSync(process.execPath, [join(dir, 'example.mjs')], {
    cwd: dir,
    encoding: 'utf8',
    env: { PATH: process.env.PATH ?? '', HOME: dir },
  });
  expect(out).toContain('fs.read');
  expect(out).toContain('wrote {"path":"/hello.txt"');
}

/** The library example: type-checked as a user's own TypeScript (strict, importing 'arium'), then run. */
async function runLibraryExample(block: Block): Promise<void> {
  const dir = join(temp, `library-${block.line}`);
  mkdirSync(join(dir, 'node_modules'), { recursive: true });
  symlinkSync(ROOT, join(dir, 'node_modules', 'arium'));
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'user', type: 'module', private: true }));
  writeFileSync(join(dir, 'example.ts'), block.code);
  expect(typeProblems(join(dir, 'example.ts'))).toEqual([]);
  // Run it where it expects to be: a folder with ./workspace/demo, here a copy of the demo project.
  cpSync(join(ROOT, 'workspace', 'demo'), join(dir, 'workspace', 'demo'), {
    recursive: true,
    filter: (source) => !source.includes(`${join('demo', '.arium')}`),
  });
  const js = ts.transpileModule(block.code, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } }).outputText;
  writeFileSync(join(dir, 'example.mjs'), js);
  const out = execFileSync(process.execPath, ['--no-node-snapshot', join(dir, 'example.mjs')], { cwd: dir, encoding: 'utf8' });
  // It printed the diff of its write and the Python runner's availability, and its audit log holds the call.
  expect(out).toContain('+hi');
  expect(out.trim().split('\n').at(-1)).toMatch(/^(true|false)$/);
  expect(readFileSync(join(dir, 'workspace', 'demo', '.arium', 'audit.jsonl'), 'utf8')).toContain('"tool":"fs.write"');
}

describe('every code block of the README', () => {
  const all = blocks();

  it('is one this test knows', () => {
    const unknown = all.filter((block) => {
      if (NOT_RUN.some(([lang, first]) => lang === block.lang && first.test(block.first))) return false;
      if ((block.lang === 'js' || block.lang === 'python') && fileOf(block)) return false;
      if (
        block.lang === 'sh' &&
        (GATEWAY_EXAMPLE.test(block.first) ||
          SHELL_EXAMPLE.test(block.first) ||
          SATELLITE_EXAMPLE.test(block.first) ||
          GATEWAYS_EXAMPLE.test(block.first) ||
          PACKS_EXAMPLE.test(block.first))
      )
        return false;
      if (block.lang === 'json' || block.lang === 'ts') return false;
      if (block.lang === 'yaml' && (exampleFileOf(block) || yamlDefinitionOf(block))) return false;
      if (block.lang === 'markdown' && block.first === '---') return false;
      return true;
    });
    expect(unknown.map((b) => `line ${b.line}: \`\`\`${b.lang} ${b.first}`)).toEqual([]);
  });

  it.each(all.filter((b) => b.lang === 'js' || b.lang === 'python').map((b) => [`line ${b.line} (${fileOf(b)})`, b] as const))(
    'the tool module at %s runs as a tool',
    { timeout: 30_000 },
    async (_name, block) => runModule(block),
  );

  it.each(all.filter((b) => b.lang === 'json').map((b) => [`line ${b.line}`, b] as const))(
    'the JSON at %s is what it says',
    { timeout: 30_000 },
    async (_name, block) => {
      const first = block.code.trimStart();
      if (first.startsWith('{ "ok"')) return checkResults(block);
      const value = JSON.parse(block.code) as Record<string, unknown>;
      if ('runner' in value) return runDefinition(block, all);
      const providers = Object.values((value.providers ?? {}) as Record<string, Record<string, unknown>>);
      // The HTTP worker example's arium.json, which test/providers.http.test.ts runs.
      if (providers.some((p) => 'http' in p))
        return expect(value).toEqual(JSON.parse(readFileSync(join(ROOT, 'examples', 'http-worker', 'arium.json'), 'utf8')));
      if (providers.some((p) => 'nats' in p)) return checkNatsProviders(block);
      if ('providers' in value) return checkProviders(block);
      // Servers on other machines: the schema takes it as written; test/store.jetstream.config.test.ts
      // opens a project with such a section against nats-servers on loopback.
      if ('store' in value) return expect(loadProjectConfig(configDir(block), DEFAULT_CATALOG)).toEqual(value);
      if ('grants' in value || 'policy' in value || 'approvals' in value) return checkConfig(block);
      if ('mcpServers' in value) return checkMcpConfig(block);
      throw new Error(`README line ${block.line}: a JSON block this test does not know how to check`);
    },
  );

  it.each(all.filter((b) => b.lang === 'yaml' && yamlDefinitionOf(b)).map((b) => [`line ${b.line} (${yamlDefinitionOf(b)})`, b] as const))(
    'the YAML definition at %s loads, runs, and is its JSON twin',
    { timeout: 30_000 },
    async (_name, block) => runYamlDefinition(block, all),
  );

  it.each(all.filter((b) => b.lang === 'markdown' && b.first === '---').map((b) => [`line ${b.line}`, b] as const))(
    'the skill at %s loads and renders',
    { timeout: 30_000 },
    async (_name, block) => runSkill(block),
  );

  it.each(all.filter((b) => b.lang === 'yaml' && exampleFileOf(b)).map((b) => [`line ${b.line} (${exampleFileOf(b)})`, b] as const))(
    'the file shown at %s is the one in examples/',
    (_name, block) => {
      expect(block.code).toBe(readFileSync(join(ROOT, exampleFileOf(block) as string), 'utf8'));
    },
  );

  it.each(all.filter((b) => b.lang === 'sh' && GATEWAY_EXAMPLE.test(b.first)).map((b) => [`line ${b.line}`, b] as const))(
    'the gateway example at %s runs against `arium serve`',
    { timeout: 60_000 },
    async (_name, block) => runGatewayExample(block),
  );

  it.each(all.filter((b) => b.lang === 'sh' && GATEWAYS_EXAMPLE.test(b.first)).map((b) => [`line ${b.line}`, b] as const))(
    'the gateways example at %s forwards to the holder and takes over when it is killed',
    { timeout: 150_000 },
    async (_name, block) => runGatewaysExample(block),
  );

  it.each(all.filter((b) => b.lang === 'sh' && SATELLITE_EXAMPLE.test(b.first)).map((b) => [`line ${b.line}`, b] as const))(
    'the NATS satellites example at %s runs against a real nats-server',
    { timeout: 90_000 },
    async (_name, block) => runSatelliteExample(block),
  );

  it.each(all.filter((b) => b.lang === 'sh' && PACKS_EXAMPLE.test(b.first)).map((b) => [`line ${b.line}`, b] as const))(
    'the tool packs example at %s runs through the CLI',
    { timeout: 120_000 },
    async (_name, block) => runPacksExample(block),
  );

  it.each(all.filter((b) => b.lang === 'sh' && SHELL_EXAMPLE.test(b.first)).map((b) => [`line ${b.line}`, b] as const))(
    'the shell.run example at %s runs through the CLI',
    { timeout: 60_000 },
    async (_name, block) => runShellExample(block),
  );

  it.each(all.filter((b) => b.lang === 'ts').map((b) => [`line ${b.line}`, b] as const))(
    'the TypeScript at %s type-checks under --strict and runs',
    { timeout: 60_000 },
    async (_name, block) =>
      block.first.startsWith('// code.run')
        ? runCodeModeExample(block)
        : block.first.startsWith('// mcp-client.ts')
          ? runMcpClientExample(block)
          : block.first.startsWith('import { connect }')
            ? runConnectExample(block)
            : runLibraryExample(block),
  );
});
