import { resolve } from 'node:path';
import type { RunnerDefinition } from '../../src/runner.js';
import { type PoolsConfig, poolCheck } from '../shared/pool.js';
import { checkBwrap, checkLandlock, checkPython, checkUserNamespaces } from './probe.js';
import { PythonRunner } from './python-runner.js';

/** Python tools, each call in a resource-limited process forked by a namespace-isolated fork server. */
export const pyRunner: RunnerDefinition = {
  name: 'py-runner',
  summary: 'Python tools, each call in a resource-limited, isolated process (bubblewrap or unshare when present)',
  extensions: ['.py'],
  permission: 'exec.py',
  grantedByDefault: true,
  remote: true,
  config: {
    python: {
      type: 'string',
      minLength: 1,
      description: "the interpreter for Python tools (a path, e.g. a virtualenv's bin/python; default python3)",
    },
    strict: { type: 'boolean', description: 'refuse to run Python tools without namespace isolation (default false)' },
    pip: {
      type: 'object',
      additionalProperties: false,
      description: 'where `arium install` gets the wheels pinned in requirements.txt (default: pip’s own configuration)',
      properties: {
        find_links: {
          type: 'array',
          items: { type: 'string', minLength: 1 },
          description: 'folders (relative to the project) or URLs holding wheels (pip --find-links)',
        },
        no_index: { type: 'boolean', description: 'use no package index, only find_links (pip --no-index)' },
        index_url: { type: 'string', minLength: 1, description: 'the package index (pip --index-url)' },
      },
    },
  },
  probe: async ({ config, projectDir }) => {
    // As the runner takes it (findInterpreter): a name on PATH, or a path, relative to the project's folder.
    const given = typeof config.python === 'string' ? config.python : undefined;
    const python = given?.includes('/') ? resolve(projectDir, given) : given;
    const [interpreter, bwrap, namespaces] = await Promise.all([checkPython(python), checkBwrap(), checkUserNamespaces()]);
    const pool = poolCheck('python pool', pythonPool(config), 'fork server', ' per tools folder');
    return [interpreter, bwrap, namespaces, await checkLandlock(interpreter.executable), pool];
  },
  example: {
    'text-words.json': {
      id: 'text.words',
      name: 'Count words',
      description: 'Counts the words of a text (a Python tool)',
      runner: 'py-runner',
      entry: 'words.py',
      schema: { type: 'object', properties: { text: { type: 'string', maxLength: 100000 } }, required: ['text'], additionalProperties: false },
      permissions: ['exec.py'],
      limits: { timeout_ms: 5000, memory_mb: 128 },
      examples: [{ text: 'the quick brown fox' }],
    },
    'words.py': `# A Python tool: runs in a resource-limited, isolated subprocess.
def run(input, ctx):
    words = input["text"].split()
    return {"words": len(words)}
`,
  },
  // Nothing starts here either: the interpreter is found and the fork server started on first use.
  create: ({ config, projectDir }) =>
    new PythonRunner({
      python: typeof config.python === 'string' ? config.python : undefined,
      baseDir: projectDir,
      strict: config.strict === true,
      ...pythonPool(config),
    }),
};

/** The pool options arium.json's `pools.python` (with createEngine's `pools` over it) gives the runner. */
function pythonPool(config: Readonly<Record<string, unknown>>): { servers?: number; idleMs?: number } {
  const python = (config.pools as PoolsConfig | undefined)?.python;
  return {
    ...(python?.servers !== undefined ? { servers: python.servers } : {}),
    ...(python?.idle_ms !== undefined ? { idleMs: python.idle_ms } : {}),
  };
}
