import { type Builtin, defineBuiltin, objectSchema, PATH } from '../define.js';
import { type ExecInput, SAFE_ENV } from './service.js';

const NO_NUL = '^[^\\u0000]*$';

/**
 * `system.exec`: runs an allowlisted program in bubblewrap over a working copy of the VFS (see
 * service.ts). Declares `sys.exec`, which no caller holds by default, and the VFS permissions of what it
 * shows the program and brings back.
 */
export const systemExec: Builtin = defineBuiltin(
  {
    id: 'system.exec',
    name: 'Run a program',
    description:
      'Runs an allowlisted program (argv, no shell) in a sandbox without network over a copy of the VFS folder cwd; files it writes there come back into the VFS.',
    schema: objectSchema(
      {
        argv: {
          type: 'array',
          minItems: 1,
          maxItems: 4096,
          items: { type: 'string', maxLength: 131_072, pattern: NO_NUL },
          description: 'the program (a name or path on the exec allowlist) and its arguments; no shell parses them',
        },
        cwd: { ...PATH, default: '/', description: 'VFS folder the program runs in (at /vfs<cwd>); it may write below it' },
        read: {
          type: 'array',
          maxItems: 64,
          items: PATH,
          uniqueItems: true,
          description: 'more VFS paths the program may read (read-only, at /vfs<path>)',
        },
        stdin: { type: 'string', description: 'text given to the program on its standard input' },
        env: {
          type: 'object',
          propertyNames: { enum: [...SAFE_ENV] },
          additionalProperties: { type: 'string', maxLength: 4096, pattern: NO_NUL },
          description: `environment variables to add, among: ${SAFE_ENV.join(', ')}`,
        },
        check: { type: 'boolean', default: false, description: 'fail (TOOL_ERROR, nothing written) when the program exits non-zero' },
        diff: { type: 'boolean', default: true, description: 'include a unified diff of each changed text file' },
      },
      ['argv'],
    ),
    permissions: ['sys.exec', 'vfs.read', 'vfs.write'],
  },
  (input, ctx, host) => host.exec.run(input as unknown as ExecInput, ctx),
  { async: true },
);
