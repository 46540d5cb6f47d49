import type { EngineEvent, ErrorInfo, ToolResult } from '../../index.js';
import type { Paint } from './io.js';

/** A result as people read it: the data, or the error with its stage, code and details; then the tool's logs. */
export function formatResult(result: ToolResult, c: Paint): string {
  const meta = c.dim(`${result.meta.tool} · ${result.meta.duration_ms.toFixed(2)} ms · run ${result.meta.run_id.slice(0, 8)}`);
  const lines = result.ok ? [`${c.green('ok')} ${meta}`, formatData(result.data, c)] : [`${c.red('error')} ${meta}`, formatError(result.error, c)];
  for (const log of result.meta.logs ?? []) lines.push(c.dim(`  [${log.level}] ${log.message}`));
  return lines.join('\n');
}

export function formatError(e: ErrorInfo, c: Paint): string {
  const lines = [`  ${c.bold(e.code)} at ${e.stage}${e.retryable ? c.yellow(' (retryable)') : ''}: ${e.message}`];
  const { violations, ...rest } = e.details ?? {};
  // Validation errors are a list of JSON pointers and messages: one line each reads better than JSON.
  if (Array.isArray(violations)) {
    for (const v of violations as Array<{ pointer?: string; message?: string }>) lines.push(`    ${c.cyan(v.pointer || '/')} ${v.message ?? ''}`);
  }
  if (Object.keys(rest).length > 0) {
    const flat = JSON.stringify(rest);
    lines.push(c.dim(indent(flat.length <= 100 ? flat : JSON.stringify(rest, null, 2), '  ')));
  }
  if (e.stack) lines.push(c.dim(indent(e.stack, '  ')));
  return lines.join('\n');
}

/** Data pretty-printed; a unified diff in it (fs.write's `diff`) is shown as a coloured patch instead of a JSON string. */
export function formatData(data: unknown, c: Paint): string {
  if (typeof data === 'string') return data;
  if (data !== null && typeof data === 'object' && !Array.isArray(data) && typeof (data as { diff?: unknown }).diff === 'string') {
    const { diff, ...rest } = data as { diff: string };
    return `${JSON.stringify(rest, null, 2)}\n${colourPatch(diff.trimEnd(), c)}`;
  }
  return JSON.stringify(data, null, 2) ?? 'undefined';
}

/** One line per event, for the demo and `arium events`. */
export function formatEvent(e: EngineEvent, c: Paint): string {
  const time = c.dim(e.at.slice(11, 23));
  switch (e.type) {
    case 'ToolInvocationEvent':
      return `${time} ${c.cyan('invocation')} ${e.tool}${e.caller ? c.dim(` by ${e.caller}`) : ''} ${c.dim(clip(JSON.stringify(e.input) ?? '', 80))}`;
    case 'ToolResultEvent': {
      const changes = e.vfs ? ` ${c.dim(vfsSummary(e.vfs))}` : '';
      return `${time} ${c.green('result    ')} ${e.tool} ${c.dim(`${e.duration_ms.toFixed(2)} ms, ${e.output_bytes} bytes`)}${changes}`;
    }
    case 'ToolErrorEvent':
      return `${time} ${c.red('error     ')} ${e.tool} ${e.error.code} at ${e.error.stage}`;
    case 'SecurityEvent': {
      const what =
        e.action === 'denied'
          ? `needs ${e.permission ?? '?'}`
          : e.action === 'widened' || e.action === 'widening_refused'
            ? `${e.operation ?? 'reload'} adds ${(e.added_permissions ?? []).join(', ')}`
            : (e.operation ?? e.reason);
      return `${time} ${c.magenta('security  ')} ${e.tool} ${e.action}: ${what}`;
    }
    case 'RegistryChangeEvent':
    case 'SkillsChangeEvent': {
      const parts = [`+${e.added.length}`, `~${e.updated.length}`, `-${e.removed.length}`, `${e.problems.length} problems`];
      return `${time} ${c.yellow(e.type === 'SkillsChangeEvent' ? 'skills    ' : 'registry  ')} ${parts.join(' ')}`;
    }
    case 'ApprovalRequested':
      return `${time} ${c.yellow('approval? ')} ${e.tool} run ${e.run_id}${e.caller ? c.dim(` asked by ${e.caller}`) : ''} ${c.dim(clip(JSON.stringify(e.input) ?? '', 80))}`;
    case 'ApprovalResolved':
      return `${time} ${c.yellow('approval  ')} ${e.tool} run ${e.run_id} ${e.outcome}${e.by ? ` by ${e.by}` : ''}${e.reason ? c.dim(`: ${clip(e.reason, 80)}`) : ''}`;
  }
}

function vfsSummary(v: { written: string[]; deleted: string[]; created_dirs: string[]; moved: unknown[] }): string {
  const parts: string[] = [];
  if (v.written.length) parts.push(`wrote ${v.written.join(', ')}`);
  if (v.deleted.length) parts.push(`deleted ${v.deleted.join(', ')}`);
  if (v.created_dirs.length) parts.push(`mkdir ${v.created_dirs.join(', ')}`);
  if (v.moved.length) parts.push(`moved ${v.moved.length}`);
  return parts.length ? `(${clip(parts.join('; '), 100)})` : '';
}

export function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

export function indent(text: string, prefix: string): string {
  return text
    .split('\n')
    .map((l) => prefix + l)
    .join('\n');
}

/** Colours a unified patch: additions green, removals red, hunk headers cyan. */
export function colourPatch(patch: string, c: Paint): string {
  return patch
    .split('\n')
    .map((line) => {
      if (line.startsWith('+++') || line.startsWith('---')) return c.bold(line);
      if (line.startsWith('+')) return c.green(line);
      if (line.startsWith('-')) return c.red(line);
      if (line.startsWith('@@')) return c.cyan(line);
      return line;
    })
    .join('\n');
}

/** Left-aligned columns; the last column is not padded. */
export function table(rows: string[][]): string {
  const w = rows.reduce<number[]>((acc, row) => row.map((cell, i) => Math.max(acc[i] ?? 0, visible(cell).length)), []);
  return rows
    .map((row) => row.map((cell, i) => (i === row.length - 1 ? cell : cell + ' '.repeat((w[i] ?? 0) - visible(cell).length))).join('  '))
    .join('\n');
}

function visible(s: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: strips ANSI colour codes to measure width
  return s.replace(/\u001b\[\d+m/g, '');
}

/** How a worker isolates calls, in a few words per runner (e.g. `py-runner bubblewrap, js-runner isolated-vm`); '' until it has said. */
export function sandboxSummary(worker: { sandboxes?: Record<string, Record<string, unknown>> }): string {
  return Object.entries(worker.sandboxes ?? {})
    .map(([name, sandbox]) => `${name} ${sandbox.available === false ? 'unavailable' : String(sandbox.isolation ?? '?').split(':')[0]}`)
    .join(', ');
}
