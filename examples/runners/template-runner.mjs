// A runner from outside the package, written only against Arium's public API: tools whose entry is a
// text template (`.tmpl`). `{{name}}` is replaced by the input's `name`; `{{file:/path}}` by a VFS
// file, read through the call's permission-checked view; a template whose first line is
// `=> /path` writes its result to that VFS file instead of returning it.
//
//   import { createEngine } from 'arium';
//   import { templateRunner } from './template-runner.mjs';
//   const engine = await createEngine({ runners: [templateRunner] });
import { readFile } from 'node:fs/promises';
import { ToolFailure } from 'arium';

const PLACEHOLDER = /\{\{\s*(file:)?([^}\s]+)\s*\}\}/g;

class TemplateRunner {
  name = 'tmpl-runner';
  // Rendering never waits on anything the engine could cut short: no wall-clock deadline is needed.
  interruptible = false;
  #cache = new Map();
  #calls = 0;

  constructor(options) {
    this.maxBytes = options.maxBytes;
  }

  async run(ctx) {
    this.#calls++;
    const template = await this.#template(ctx.tool);
    const [first, ...rest] = template.split('\n');
    const fill = (text) =>
      text.replace(PLACEHOLDER, (_, file, name) => {
        if (file) return ctx.vfs.read(name).toString('utf8');
        const value = ctx.input[name];
        if (value === undefined) throw new ToolFailure('execution', 'TOOL_ERROR', `the template uses {{${name}}}, which the input does not give`);
        return String(value);
      });
    const target = first.startsWith('=> ') ? fill(first.slice(3).trim()) : null;
    const body = fill(target === null ? template : rest.join('\n'));
    if (Buffer.byteLength(body) > this.maxBytes) {
      throw new ToolFailure('execution', 'LIMIT_EXCEEDED', `the rendered text is over ${this.maxBytes} bytes`, { details: { limit: this.maxBytes } });
    }
    ctx.log('info', `rendered ${ctx.tool.spec.entry}`);
    if (target === null) return { text: body };
    ctx.vfs.write(target, body);
    return { path: target, bytes: Buffer.byteLength(body) };
  }

  async #template(tool) {
    const hit = this.#cache.get(tool.hash);
    if (hit !== undefined) return hit;
    const text = await readFile(tool.entryPath, 'utf8');
    this.#cache.set(tool.hash, text);
    return text;
  }

  forget(tool) {
    this.#cache.delete(tool.hash);
  }

  async status() {
    return { available: true, calls: this.#calls, cached: this.#cache.size };
  }

  async close() {
    this.#cache.clear();
  }
}

/** The definition the engine takes: one object, no change to Arium itself. */
export const templateRunner = {
  name: 'tmpl-runner',
  summary: 'text templates (.tmpl) filled from the input and VFS files',
  extensions: ['.tmpl'],
  permission: 'exec.tmpl',
  grantedByDefault: true,
  config: { template_max_bytes: { type: 'integer', minimum: 1, description: 'largest rendered text (default 65536)' } },
  probe: async () => [{ name: 'templates', ok: true, detail: 'nothing to install' }],
  example: {
    'greet.json': {
      id: 'text.greet',
      description: 'Greets someone (a template tool)',
      runner: 'tmpl-runner',
      entry: 'greet.tmpl',
      schema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] },
      permissions: ['exec.tmpl'],
    },
    'greet.tmpl': 'Hello, {{name}}!',
  },
  create: ({ config }) => new TemplateRunner({ maxBytes: config.template_max_bytes ?? 65536 }),
};
