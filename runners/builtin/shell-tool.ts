import { defineBuiltin, objectSchema, PATH } from './define.js';
import type { ShellInput } from './shell/run.js';

/** The most a script may set its loop and command counts to (the call's timeout bounds it anyway). */
export const MAX_COUNT = 100_000_000;
/**
 * Loop iterations by default: as many as allowed. just-bash bounds with the same count the work of
 * commands that loop over their input (seq, cut, od, grep's matching, awk's records), so any lower
 * default fails ordinary commands on ordinary files (`seq 1 400000`, `awk` over 300,000 lines); the
 * call's time and memory limits are the guard, and a script that wants a tighter one sets it.
 */
export const DEFAULT_LOOP_ITERATIONS = MAX_COUNT;
/** Commands a script may run by default: a loop that runs commands stops here well before the timeout. */
export const DEFAULT_COMMANDS = 100_000;

export const shellRun = defineBuiltin(
  {
    id: 'shell.run',
    name: 'Run shell script',
    description:
      'Runs a bash script (just-bash: a simulated bash with grep, sed, awk, jq, find, sort, xargs and ~70 other commands) over the VFS; ' +
      'returns exit_code, stdout, stderr and the files it changed with their diffs. No host files, network or processes. ' +
      'Its changes are kept only if the call succeeds.',
    schema: objectSchema(
      {
        script: { type: 'string', minLength: 1, description: 'The bash script, e.g. grep -rn TODO /src | sort' },
        cwd: { ...PATH, default: '/', description: 'The folder the script starts in (a VFS folder)' },
        env: {
          type: 'object',
          propertyNames: { pattern: '^[A-Za-z_][A-Za-z0-9_]*$', maxLength: 256 },
          additionalProperties: { type: 'string' },
          maxProperties: 1000,
          description: 'Environment variables for the script (HOME is /)',
        },
        stdin: { type: 'string', description: 'Standard input of the script' },
        diff: { type: 'boolean', default: true, description: 'Return the unified diff of each changed file' },
        require_success: {
          type: 'boolean',
          default: false,
          description: 'Fail the call (TOOL_ERROR, nothing written) when the script exits with a non-zero status',
        },
        max_loop_iterations: {
          type: 'integer',
          minimum: 1,
          maximum: MAX_COUNT,
          default: DEFAULT_LOOP_ITERATIONS,
          description:
            'Iterations one while/for/until loop may run before the script is stopped; also bounds the work of commands that loop ' +
            '(seq, cut, od, awk records and loops, sed and jq loops). By default the call timeout is the guard',
        },
        max_commands: {
          type: 'integer',
          minimum: 1,
          maximum: MAX_COUNT,
          default: DEFAULT_COMMANDS,
          description: 'Commands the whole script may run before it is stopped',
        },
      },
      ['script'],
    ),
    permissions: ['vfs.read', 'vfs.write'],
  },
  async (input, ctx, host) => {
    const [{ runShell }, pool] = await Promise.all([import('./shell/run.js'), host.shells()]);
    return runShell(input as unknown as ShellInput, ctx, pool);
  },
  { async: true },
);
