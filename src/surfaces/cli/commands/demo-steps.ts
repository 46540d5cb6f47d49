import { colourPatch } from '../format.js';
import type { Paint } from '../io.js';

/** One call of the demo session, and how to show its data to a person. */
export interface Step {
  title: string;
  tool: string;
  input: unknown;
  /** Narrow the caller's grants for this call. */
  grants?: string[];
  /** The step shows a structured error on purpose. */
  expectError?: boolean;
  /** A project tool: an UNAVAILABLE runner is a note, not an error of the session. */
  optional?: boolean;
  show?: (data: unknown, c: Paint) => string;
}

const TODO_V1 = '# Todo\n- [x] write the engine\n- [ ] test it\n';
const TODO_V2 = '# Todo\n- [x] write the engine\n- [x] test it\n- [ ] ship it\n';

type Obj = Record<string, unknown>;
const obj = (data: unknown): Obj => (data !== null && typeof data === 'object' ? (data as Obj) : {});

/** Any data: a unified diff in it is shown as a patch, the rest as compact JSON lines. */
export function showData(data: unknown, c: Paint): string {
  const o = obj(data);
  if (Array.isArray(o.files) && typeof o.stats === 'object') return showDiff(o, c);
  const { diff, ...rest } = o;
  const head = JSON.stringify(typeof data === 'object' && data !== null && !Array.isArray(data) ? rest : data);
  return typeof diff === 'string' ? `${c.dim(head)}\n${colourPatch(diff.trimEnd(), c)}` : head;
}

function showDiff(d: Obj, c: Paint): string {
  const lines: string[] = [];
  for (const f of d.files as Obj[]) {
    lines.push(`${c.bold(String(f.status))} ${String(f.path)} ${c.green(`+${String(f.lines_added)}`)} ${c.red(`-${String(f.lines_removed)}`)}`);
    if (typeof f.patch === 'string') lines.push(colourPatch(f.patch.trimEnd(), c));
  }
  const s = obj(d.stats);
  lines.push(
    c.dim(`${String(s.files_changed)} file${s.files_changed === 1 ? '' : 's'} changed, +${String(s.lines_added)} -${String(s.lines_removed)} lines`),
  );
  return lines.join('\n');
}

const showWrite = (data: unknown, c: Paint) => {
  const o = obj(data);
  return `${o.created ? 'created' : 'changed'} ${String(o.path)} — the unified diff fs.write returned:\n${colourPatch(String(o.diff ?? '').trimEnd(), c)}`;
};

/** The builtin part of the session: it needs nothing but the engine. */
export const BUILTIN_STEPS: readonly Step[] = [
  {
    title: 'Take a snapshot of the VFS before the session',
    tool: 'vfs.snapshot',
    input: { label: 'demo-start', message: 'before the demo session' },
    show: (data) => {
      const o = obj(data);
      return `snapshot ${String(o.id)} "${String(o.label)}": ${String(o.files)} files, ${String(o.bytes)} bytes`;
    },
  },
  { title: 'Write a file', tool: 'fs.write', input: { path: '/notes/todo.md', content: TODO_V1, diff: true }, show: showWrite },
  {
    title: 'Read it back',
    tool: 'fs.read',
    input: { path: '/notes/todo.md' },
    show: (data, c) => `${c.dim(`${String(obj(data).size)} bytes, ${String(obj(data).encoding)}:`)}\n${String(obj(data).content).trimEnd()}`,
  },
  {
    title: 'Rewrite it: asked for, the result carries the diff',
    tool: 'fs.write',
    input: { path: '/notes/todo.md', content: TODO_V2, diff: true },
    show: showWrite,
  },
  {
    title: 'List the folder',
    tool: 'fs.list',
    input: { path: '/notes', recursive: true },
    show: (data) =>
      (obj(data).entries as Obj[] | undefined)?.map((e) => `${String(e.type).padEnd(4)} ${String(e.path)} ${e.size ?? ''}`.trimEnd()).join('\n') ??
      '',
  },
  {
    title: 'Hash the file',
    tool: 'system.hash',
    input: { path: '/notes/todo.md', algorithm: 'sha256' },
    show: (data) => `${String(obj(data).algorithm)} ${String(obj(data).digest)}`,
  },
  {
    title: 'A caller granted only vfs.read tries to write: denied, with one SecurityEvent',
    tool: 'fs.write',
    input: { path: '/notes/todo.md', content: 'overwritten' },
    grants: ['vfs.read'],
    expectError: true,
  },
  {
    title: 'An invalid input: every violation, with its JSON pointer',
    tool: 'fs.read',
    input: { pth: '/notes/todo.md', encoding: 'latin1' },
    expectError: true,
  },
  { title: 'A path that tries to leave the VFS: an intrusion', tool: 'fs.read', input: { path: '/../../etc/passwd' }, expectError: true },
  { title: 'A tool that does not exist', tool: 'fs.reed', input: { path: '/notes/todo.md' }, expectError: true },
];
