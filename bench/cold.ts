import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { median } from './stats.js';

/**
 * Cold starts, as whole processes: the wall time from spawning a fresh Node process to its exit (the
 * CLI) or to its first answer (a host importing Arium), min / median / max over interleaved rounds,
 * beside what the same machine needs to start Node at all (`node -e 0`) and to start the real Python
 * interpreter, and beside isolated-vm and QuickJS answering the same function in a fresh process.
 *
 * - `arium call fs.read` on a durable project holding the file (what every CLI command pays), one with
 *   a JS and a Python tool (their definitions are loaded and their schemas compiled) and one without;
 * - first JS answer: import Arium, open a project with one JS tool, call it (bench/cold-child.ts);
 * - first Python answer: the same with one Python tool, `python3` resolved from PATH (the default) and
 *   named by its real path in arium.json;
 * - first JS answer in the project that has a Python tool too (its code check is waited for).
 * Each answer is checked.
 */
const ROUNDS = 10;
const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');
const child = join(here, 'cold-child.js');

interface Sample {
  wall_ms: number;
  answer_ms?: number;
}

function run(cmd: string, args: string[], check: (stdout: string) => boolean): Sample {
  const t0 = performance.now();
  const r = spawnSync(cmd, args, { encoding: 'utf8', env: { ...process.env, NO_COLOR: '1' } });
  const wall = performance.now() - t0;
  if (r.status !== 0 || !check(r.stdout)) throw new Error(`${cmd} ${args.join(' ')} failed (${r.status}): ${r.stdout} ${r.stderr}`);
  const line = r.stdout.split('\n').find((l) => l.startsWith('{"answer_ms"'));
  return line ? { wall_ms: wall, answer_ms: (JSON.parse(line) as { answer_ms: number }).answer_ms } : { wall_ms: wall };
}

function summary(samples: Sample[]): Record<string, number> {
  const stats = (values: number[]) => ({ min: Math.min(...values), median: median(values), max: Math.max(...values) });
  const round = (n: number) => Math.round(n * 10) / 10;
  const wall = stats(samples.map((s) => s.wall_ms));
  const out: Record<string, number> = { wall_min_ms: round(wall.min), wall_median_ms: round(wall.median), wall_max_ms: round(wall.max) };
  const answers = samples.map((s) => s.answer_ms).filter((a): a is number => a !== undefined);
  if (answers.length > 0) {
    const a = stats(answers);
    Object.assign(out, { answer_min_ms: round(a.min), answer_median_ms: round(a.median), answer_max_ms: round(a.max) });
  }
  return out;
}

export async function benchCold(): Promise<Record<string, unknown>> {
  const workspace = mkdtempSync(join(tmpdir(), 'arium-bench-cold-'));
  const tools = join(workspace, 'cold', 'tools');
  mkdirSync(tools, { recursive: true });
  // One project per language as well, so that a first JS answer does not wait for the Python tool's
  // code check (an engine warming up checks every tool's code before it is ready).
  const jsTools = join(workspace, 'cold-js', 'tools');
  const pyTools = join(workspace, 'cold-py', 'tools');
  mkdirSync(jsTools, { recursive: true });
  mkdirSync(pyTools, { recursive: true });
  mkdirSync(join(workspace, 'empty', 'tools'), { recursive: true });
  const schema = { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] };
  writeFileSync(
    join(tools, 'cold-js.json'),
    JSON.stringify({ id: 'cold.js', description: 'reverse', runner: 'js-runner', entry: 'cold.js', schema, permissions: ['exec.js'] }),
  );
  writeFileSync(join(tools, 'cold.js'), "export default function run(input) { return { text: [...input.text].reverse().join('') }; }\n");
  writeFileSync(
    join(tools, 'cold-py.json'),
    JSON.stringify({ id: 'cold.py', description: 'reverse', runner: 'py-runner', entry: 'cold_py.py', schema, permissions: ['exec.py'] }),
  );
  writeFileSync(join(tools, 'cold_py.py'), "def run(input, ctx):\n    return {'text': input['text'][::-1]}\n");
  for (const name of ['cold-js.json', 'cold.js']) writeFileSync(join(jsTools, name), readFileSync(join(tools, name)));
  for (const name of ['cold-py.json', 'cold_py.py']) writeFileSync(join(pyTools, name), readFileSync(join(tools, name)));
  // The same Python project naming the interpreter by its real path in arium.json: no `python3` to
  // resolve first (here a pyenv shim, a chain of shell scripts).
  const pyDirect = join(workspace, 'cold-py-direct', 'tools');
  mkdirSync(pyDirect, { recursive: true });
  for (const name of ['cold-py.json', 'cold_py.py']) writeFileSync(join(pyDirect, name), readFileSync(join(tools, name)));
  const arium = join(root, 'bin', 'arium.js');
  const cli = ['--workspace', workspace, '--project', 'cold'];
  const python = execFileSync('python3', ['-c', 'import sys; print(sys.executable)'], { encoding: 'utf8' }).trim();
  writeFileSync(join(workspace, 'cold-py-direct', 'arium.json'), JSON.stringify({ python }));
  try {
    const empty = ['--workspace', workspace, '--project', 'empty'];
    for (const project of [cli, empty])
      run(process.execPath, [arium, ...project, 'call', 'fs.write', JSON.stringify({ path: '/a.txt', content: 'cold\n' })], () => true);
    const reversed = (out: string) => out.includes('"text":"olleh"');
    const kinds: Array<[string, () => Sample]> = [
      ['node_e0', () => run(process.execPath, ['-e', '0'], () => true)],
      ['python_pass', () => run(python, ['-c', 'pass'], () => true)],
      ['cli_call_fs_read', () => run(process.execPath, [arium, ...cli, 'call', 'fs.read', '{"path":"/a.txt"}'], (out) => out.includes('cold'))],
      [
        'cli_call_fs_read_no_tools',
        () => run(process.execPath, [arium, ...empty, 'call', 'fs.read', '{"path":"/a.txt"}'], (out) => out.includes('cold')),
      ],
      ['first_js_answer', () => run(process.execPath, ['--no-node-snapshot', child, 'js', workspace, 'cold-js'], reversed)],
      ['first_python_answer', () => run(process.execPath, [child, 'python', workspace, 'cold-py'], reversed)],
      ['first_python_answer_interpreter_named', () => run(process.execPath, [child, 'python', workspace, 'cold-py-direct'], reversed)],
      ['first_js_answer_beside_python', () => run(process.execPath, ['--no-node-snapshot', child, 'js', workspace, 'cold'], reversed)],
      ['isolated_vm_alone', () => run(process.execPath, ['--no-node-snapshot', child, 'ivm'], reversed)],
      ['quickjs_alone', () => run(process.execPath, [child, 'quickjs'], reversed)],
    ];
    for (const [, once] of kinds) once(); // warm the page cache and the compile caches
    const samples = new Map<string, Sample[]>(kinds.map(([name]) => [name, []]));
    for (let round = 0; round < ROUNDS; round++) {
      for (const [name, once] of kinds) samples.get(name)?.push(once());
    }
    const out: Record<string, unknown> = { rounds: ROUNDS, python };
    for (const [name] of kinds) out[name] = summary(samples.get(name) ?? []);
    const floor = median((samples.get('node_e0') ?? []).map((s) => s.wall_ms));
    out.cli_call_fs_read_over_node_start_ms = Math.round((median((samples.get('cli_call_fs_read') ?? []).map((s) => s.wall_ms)) - floor) * 10) / 10;
    return out;
  } finally {
    rmSync(workspace, { recursive: true, force: true });
  }
}
