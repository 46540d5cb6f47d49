import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { bool, UsageError } from '../args.js';
import type { Context } from '../context.js';
import { EXIT } from '../io.js';

export const INIT_FLAGS = { force: {} } as const;

const PROJECT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** Example tools, one per sandboxed runner, written by `arium init`. */
const FILES: Readonly<Record<string, string>> = {
  'tools/text-upper.json': `${JSON.stringify(
    {
      $schema: '../../../schema/tool.schema.json',
      id: 'text.upper',
      name: 'Upper-case text',
      description: 'Returns the text in upper case (a JavaScript tool)',
      runner: 'js-runner',
      entry: 'upper.js',
      schema: { type: 'object', properties: { text: { type: 'string', maxLength: 100000 } }, required: ['text'], additionalProperties: false },
      output_schema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
      permissions: ['exec.js'],
      limits: { timeout_ms: 2000 },
    },
    null,
    2,
  )}\n`,
  'tools/upper.js': `// A JavaScript tool: runs in an isolated-vm isolate, with no Node APIs.
export default function run(input) {
  return { text: input.text.toUpperCase() };
}
`,
  'tools/text-words.json': `${JSON.stringify(
    {
      $schema: '../../../schema/tool.schema.json',
      id: 'text.words',
      name: 'Count words',
      description: 'Counts the words of a text (a Python tool)',
      runner: 'py-runner',
      entry: 'words.py',
      schema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'], additionalProperties: false },
      permissions: ['exec.py'],
      limits: { timeout_ms: 5000, memory_mb: 128 },
    },
    null,
    2,
  )}\n`,
  'tools/words.py': `# A Python tool: runs in a resource-limited, isolated subprocess.
def run(input, ctx):
    words = input["text"].split()
    return {"words": len(words)}
`,
  'arium.json': `${JSON.stringify({ $schema: '../../schema/project.schema.json', grants: ['vfs.read', 'vfs.write', 'exec.js', 'exec.py'] }, null, 2)}\n`,
};

export async function initCommand(ctx: Context): Promise<number> {
  const [name = ctx.project, ...extra] = ctx.parsed.positionals;
  if (extra.length > 0) throw new UsageError(`arium init takes one project name (got ${[name, ...extra].join(' ')})`);
  if (!PROJECT_NAME.test(name) || name.includes('..')) {
    throw new UsageError(`Invalid project name "${name}": use letters, digits, ".", "_" and "-", starting with a letter or digit`);
  }
  const dir = join(ctx.workspace, name);
  if (existsSync(dir) && readdirSync(dir).length > 0 && !bool(ctx.parsed, 'force')) {
    throw new UsageError(`${dir} already exists and is not empty; choose another name or pass --force to add the example files`);
  }
  mkdirSync(join(dir, 'tools'), { recursive: true });
  const written: string[] = [];
  for (const [file, content] of Object.entries(FILES)) {
    const path = join(dir, file);
    if (existsSync(path) && !bool(ctx.parsed, 'force')) continue;
    writeFileSync(path, content);
    written.push(file);
  }
  if (ctx.json) ctx.emit({ project: name, path: dir, files: written });
  else {
    ctx.out(`${ctx.c.green('created')} project ${ctx.c.bold(name)} in ${dir}`);
    for (const f of written) ctx.out(`  ${f}`);
    ctx.out(ctx.c.dim(`next: arium tools --project ${name}`));
  }
  return EXIT.ok;
}
