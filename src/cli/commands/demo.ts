import type { EngineEvent, ToolResult } from '../../index.js';
import { type Context, withEngine } from '../context.js';
import { colourPatch, formatResult } from '../format.js';
import { EXIT } from '../io.js';

/**
 * The main job, scripted: a short agent-like session on the demo project that shows each contract —
 * results, diffs, structured errors, permissions, the sandboxed runners, snapshots — and prints every
 * event as it happens.
 */
export async function demoCommand(ctx: Context): Promise<number> {
  const { c } = ctx;
  return withEngine(ctx, async (engine) => {
    const events: EngineEvent[] = [];
    engine.events.on('event', (e) => {
      events.push(e);
      if (ctx.json) return;
      const extra =
        e.type === 'ToolErrorEvent'
          ? ` ${e.error.code}`
          : e.type === 'SecurityEvent'
            ? ` ${e.action} ${e.permission ?? ''} ${e.operation ?? ''}`
            : e.type === 'ToolResultEvent' && e.vfs
              ? ` wrote ${e.vfs.written.length}, deleted ${e.vfs.deleted.length}`
              : '';
      ctx.out(c.dim(`   ↳ event ${e.type}${'tool' in e ? ` ${e.tool}` : ''}${extra}`));
    });
    const steps: Array<{ step: string; result: ToolResult }> = [];
    const step = async (title: string, id: string, input: unknown, options: { grants?: string[] } = {}) => {
      if (!ctx.json)
        ctx.out(
          `\n${c.bold(`▶ ${title}`)}  ${c.dim(`${id} ${JSON.stringify(input)}${options.grants ? ` grants=${options.grants.join(',')}` : ''}`)}`,
        );
      const result = await engine.call(id, input, { caller: 'demo', trace_id: 'demo', ...options });
      steps.push({ step: title, result });
      if (!ctx.json) {
        const diff = result.ok ? (result.data as { diff?: unknown }).diff : undefined;
        if (typeof diff === 'string') {
          ctx.out(`${c.green('ok')} ${c.dim(`${result.meta.duration_ms.toFixed(2)} ms`)} — the unified diff fs.write returned:`);
          ctx.out(colourPatch(diff.trimEnd(), c));
        } else {
          ctx.out(formatResult(result, c));
        }
      }
      return result;
    };

    if (engine.vfs.exists('/notes')) engine.vfs.delete('/notes', { recursive: true });
    await step('Take a snapshot of the VFS before the session', 'vfs.snapshot', { label: 'demo-start', message: 'before the demo session' });
    await step('Write a file', 'fs.write', { path: '/notes/todo.md', content: '# Todo\n- write the engine\n- test it\n' });
    await step('Read it back', 'fs.read', { path: '/notes/todo.md' });
    await step('Rewrite it: the result carries the diff', 'fs.write', {
      path: '/notes/todo.md',
      content: '# Todo\n- write the engine\n- test it\n- ship it\n',
    });
    await step('List the folder', 'fs.list', { path: '/notes', recursive: true });
    await step('Hash the file', 'system.hash', { path: '/notes/todo.md', algorithm: 'sha256' });
    await step(
      'A caller granted only vfs.read tries to write (denied, one SecurityEvent)',
      'fs.write',
      { path: '/notes/x', content: 'x' },
      { grants: ['vfs.read'] },
    );
    await step('An invalid input (every violation, with JSON pointers)', 'fs.read', { pth: '/notes/todo.md', encoding: 'latin1' });
    await step('A path that tries to leave the VFS (an intrusion)', 'fs.read', { path: '/../../etc/passwd' });
    await step('A tool that does not exist', 'fs.reed', { path: '/notes/todo.md' });

    for (const tool of engine.tools().filter((t) => t.runner !== 'builtin')) {
      const example = tool.examples?.[0];
      if (!example) continue;
      const result = await step(`Project tool ${tool.id} (${tool.runner})`, tool.id, example);
      if (!result.ok && result.error.code === 'UNAVAILABLE' && !ctx.json)
        ctx.out(c.yellow(`   the ${tool.runner} is not available here: ${result.error.message}`));
    }

    await step('What changed since the snapshot?', 'vfs.diff', { from: 'demo-start', to: 'live', stat_only: true });
    const counts = new Map<string, number>();
    for (const e of events) counts.set(e.type, (counts.get(e.type) ?? 0) + 1);
    if (ctx.json) ctx.emit({ steps, events });
    else {
      ctx.out(`\n${c.bold('Events')}: ${[...counts].map(([t, n]) => `${n} ${t}`).join(', ')}`);
      ctx.out(c.dim(`The VFS persists in ${engine.projectDir}/.arium: try arium log, arium diff demo-start, arium tools.`));
    }
    return EXIT.ok;
  });
}
