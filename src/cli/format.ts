import type { ToolResult } from '../index.js';
import type { Paint } from './io.js';

/** A result as people read it: the data, or the error with its stage, code and details. */
export function formatResult(result: ToolResult, c: Paint): string {
  const meta = c.dim(`${result.meta.tool} · ${result.meta.duration_ms.toFixed(2)} ms · run ${result.meta.run_id.slice(0, 8)}`);
  if (result.ok) return `${c.green('ok')} ${meta}\n${formatData(result.data)}`;
  const e = result.error;
  const lines = [`${c.red('error')} ${c.bold(e.code)} at ${e.stage} ${meta}`, `  ${e.message}`];
  if (e.details) lines.push(c.dim(indent(JSON.stringify(e.details, null, 2), '  ')));
  if (e.stack) lines.push(c.dim(indent(e.stack, '  ')));
  if (e.retryable) lines.push(c.yellow('  (retryable)'));
  return lines.join('\n');
}

export function formatData(data: unknown): string {
  if (typeof data === 'string') return data;
  return JSON.stringify(data, null, 2);
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

/** Left-aligned columns. */
export function table(rows: string[][], widths?: number[]): string {
  const w = widths ?? rows.reduce<number[]>((acc, row) => row.map((cell, i) => Math.max(acc[i] ?? 0, visible(cell).length)), []);
  return rows
    .map((row) => row.map((cell, i) => (i === row.length - 1 ? cell : cell + ' '.repeat((w[i] ?? 0) - visible(cell).length))).join('  '))
    .join('\n');
}

function visible(s: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: strips ANSI colour codes to measure width
  return s.replace(/\u001b\[\d+m/g, '');
}
