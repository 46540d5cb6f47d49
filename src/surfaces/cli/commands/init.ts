import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DEFAULT_CATALOG } from '../../../defaults.js';
import type { RunnerTemplate } from '../../../runner.js';
import { bool, maxPositionals, str, UsageError } from '../args.js';
import { type CommandSpec, HostError } from '../command.js';
import type { Context } from '../context.js';
import { EXIT } from '../io.js';

// The engine accepts the same names (engine.ts); checked here first so the error speaks of `init`.
const PROJECT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** The folder of the arium package (holding schema/), found from this file in src/ or in dist/src/. */
function packageRoot(): string | null {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest) && (JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name === 'arium') return dir;
    dir = dirname(dir);
  }
  return null;
}

/** `$schema` as a path relative to the file, so editors find the published schema wherever the workspace is. */
function schemaRef(fromDir: string, schemaFile: string): Record<string, string> {
  const root = packageRoot();
  if (!root) return {};
  return {
    $schema: relative(fromDir, join(root, 'schema', schemaFile))
      .split(sep)
      .join('/'),
  };
}

const json = (value: unknown) => `${JSON.stringify(value, null, 2)}\n`;

type DefinitionFormat = 'json' | 'yaml';

/**
 * A definition in YAML: the same data, its schema named for editors in the comment the YAML language
 * server reads (a `$schema` key would do as well, but is noise in YAML).
 */
async function yamlDefinition(tools: string, content: object): Promise<string> {
  const { stringify } = await import('yaml');
  const ref = schemaRef(tools, 'tool.schema.json').$schema;
  return `${ref ? `# yaml-language-server: $schema=${ref}\n` : ''}${stringify(content, { version: '1.2' })}`;
}

/** The example tool of each runner that has one (a project cannot define `builtin` tools), and an arium.json granting what they need. */
async function exampleFiles(projectDir: string, format: DefinitionFormat): Promise<Map<string, string>> {
  const tools = join(projectDir, 'tools');
  const files = new Map<string, string>();
  const grants = ['vfs.read', 'vfs.write'];
  for (const definition of DEFAULT_CATALOG.list()) {
    if (!definition.example) continue;
    if (definition.permission) grants.push(definition.permission);
    for (const [file, content] of Object.entries(definition.example)) {
      if (typeof content === 'string') files.set(`tools/${file}`, content);
      else if (format === 'yaml') files.set(`tools/${file.replace(/\.json$/, '.yaml')}`, await yamlDefinition(tools, content));
      else files.set(`tools/${file}`, json({ ...schemaRef(tools, 'tool.schema.json'), ...content }));
    }
  }
  // The audit log is on, so `arium events` shows what agents did; it rotates at 16 MiB, keeping 4 files.
  files.set('arium.json', json({ ...schemaRef(projectDir, 'project.schema.json'), grants, audit_log: true }));
  return files;
}

/** Every `--template` a runner offers, by name, with the runner's permission. */
function templates(): Map<string, { template: RunnerTemplate; permission: string | null }> {
  const found = new Map<string, { template: RunnerTemplate; permission: string | null }>();
  for (const definition of DEFAULT_CATALOG.list()) {
    for (const [name, template] of Object.entries(definition.templates ?? {})) found.set(name, { template, permission: definition.permission });
  }
  return found;
}

/** The files of a template project: its tool's sources and definition, and an arium.json granting what it needs. */
function templateFiles(projectDir: string, template: RunnerTemplate, permission: string | null): Map<string, string> {
  const tools = join(projectDir, 'tools');
  const files = new Map<string, string>();
  for (const [file, content] of Object.entries(template.files)) {
    files.set(`tools/${file}`, typeof content === 'string' ? content : json({ ...schemaRef(tools, 'tool.schema.json'), ...content }));
  }
  const grants = ['vfs.read', 'vfs.write', ...(permission ? [permission] : [])];
  files.set('arium.json', json({ ...schemaRef(projectDir, 'project.schema.json'), grants, audit_log: true }));
  return files;
}

/** Runs a template's build in the tools folder: what a person runs again after each edit. */
async function build(template: RunnerTemplate, toolsDir: string): Promise<{ ok: boolean; command: string; error?: string }> {
  const command = template.build.join(' ');
  const { execa } = await import('execa');
  const [file, ...args] = template.build as [string, ...string[]];
  const r = await execa(file, args, { cwd: toolsDir, reject: false, timeout: 300_000, killSignal: 'SIGKILL', stdin: 'ignore', encoding: 'utf8' });
  if (r.exitCode === 0) return { ok: true, command };
  const missing = (r as { code?: string }).code === 'ENOENT';
  const why = missing
    ? `${file} is not installed`
    : String(r.stderr || r.shortMessage)
        .trim()
        .split('\n')
        .slice(0, 5)
        .join('\n');
  return { ok: false, command, error: `${why}. Install: ${template.install}` };
}

function projectName(ctx: Context): string {
  maxPositionals(ctx.parsed, 1, initSpec.usage);
  const [positional] = ctx.parsed.positionals;
  if (positional !== undefined && ctx.projectGiven && positional !== ctx.project) {
    throw new UsageError(`Two project names: "${positional}" and --project ${ctx.project}; give one`);
  }
  const name = positional ?? ctx.project;
  if (!PROJECT_NAME.test(name) || name.includes('..')) {
    throw new UsageError(
      `Invalid project name "${name}": use 1 to 64 letters, digits, ".", "_" and "-", starting with a letter or digit (a name, not a path)`,
    );
  }
  return name;
}

function definitionFormat(ctx: Context): DefinitionFormat {
  const format = str(ctx.parsed, 'format') ?? 'json';
  if (format !== 'json' && format !== 'yaml') throw new UsageError(`--format ${format}: the tool definitions are written as json or yaml`);
  return format;
}

async function run(ctx: Context): Promise<number> {
  const name = projectName(ctx);
  const format = definitionFormat(ctx);
  const force = bool(ctx.parsed, 'force');
  const templateName = str(ctx.parsed, 'template');
  const offered = templates();
  const chosen = templateName === undefined ? null : offered.get(templateName);
  if (chosen === undefined) {
    throw new UsageError(`Unknown template "${templateName}"; templates: ${[...offered.keys()].join(', ')}`);
  }
  const dir = join(ctx.workspace, name);
  if (existsSync(dir)) {
    if (!statSync(dir).isDirectory()) throw new HostError(`${dir} exists and is not a folder; remove it or choose another project name`);
    if (readdirSync(dir).length > 0 && !force) {
      throw new UsageError(
        `Project "${name}" already exists at ${dir} and is not empty; choose another name, or pass --force to rewrite the example files`,
      );
    }
  }
  const created: string[] = [];
  const overwritten: string[] = [];
  try {
    mkdirSync(join(dir, 'tools'), { recursive: true });
    const files = chosen ? templateFiles(dir, chosen.template, chosen.permission) : await exampleFiles(dir, format);
    for (const [file, content] of files) {
      const path = join(dir, file);
      mkdirSync(dirname(path), { recursive: true });
      (existsSync(path) ? overwritten : created).push(file);
      writeFileSync(path, content);
    }
  } catch (error) {
    throw new HostError(`Cannot create the project in ${dir}: ${(error as Error).message}`);
  }
  const built = chosen ? await build(chosen.template, join(dir, 'tools')) : null;
  if (ctx.json) ctx.emit({ project: name, path: dir, created, overwritten, ...(built ? { build: built } : {}) });
  else {
    const { c } = ctx;
    ctx.out(`${c.green('created')} project ${c.bold(name)} in ${dir}`);
    for (const f of created) ctx.out(`  + ${f}`);
    for (const f of overwritten) ctx.out(`  ${c.yellow('~')} ${f} ${c.dim('(overwritten: --force)')}`);
    const opts = `${ctx.workspace === join(ctx.io.cwd, 'workspace') ? '' : ` --workspace ${ctx.workspace}`} --project ${name}`;
    if (built) {
      const id = Object.values(chosen?.template.files ?? {}).find((f) => typeof f === 'object')?.id;
      if (built.ok) ctx.out(`${c.green('built')} ${built.command} ${c.dim('(in tools/; run it again after each edit)')}`);
      else ctx.out(`${c.yellow('not built')}: ${built.command} failed: ${built.error}`);
      ctx.out(c.dim(`next: arium call ${String(id)} '{"numbers":[1,2,3.5]}'${opts}`));
    } else ctx.out(c.dim(`next: arium tools${opts}   ·   arium call text.upper '{"text":"hi"}'${opts}`));
  }
  // A template whose build failed made a project whose tool cannot load yet: the command says so.
  return built && !built.ok ? EXIT.engine : EXIT.ok;
}

/** The templates the runners offer, for the help: "c|rust". */
const TEMPLATE_NAMES = [...templates().keys()].join('|');

export const initSpec: CommandSpec = {
  name: 'init',
  usage: `arium init [project] [--format json|yaml] [--template ${TEMPLATE_NAMES}] [--force]`,
  summary: 'create a project folder with example tools (a JavaScript and a Python tool)',
  details: `Creates <workspace>/<project>/ with tools/ (text-upper.json + upper.js for the js-runner,
text-words.json + words.py for the py-runner) and an arium.json granting what they need, with the
audit log on (arium events shows every call). --format yaml writes the definitions as
text-upper.yaml and text-words.yaml instead: the same data in YAML.
The project name defaults to --project, then "demo". An existing, non-empty project is refused
unless --force, which rewrites the example files and leaves every other file alone.
--template ${TEMPLATE_NAMES} creates a tool from source instead (tools/src/, the definition, and what
its runner's build command makes); init runs its build command once and prints it:
${[...templates().entries()].map(([name, { template }]) => `  ${name}: ${template.summary}`).join('\n')}`,
  flags: {
    force: { help: 'rewrite the example files in an existing project' },
    format: { value: true, arg: '<json|yaml>', help: 'write the example tool definitions as JSON (default) or YAML' },
    template: { value: true, arg: '<name>', help: `a tool built from source instead of the examples: ${TEMPLATE_NAMES.replaceAll('|', ', ')}` },
  },
  run,
};
