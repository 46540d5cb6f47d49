import type { RunnerDefinition } from '../../src/runner.js';
import { BuiltinRunner } from './index.js';

/** The engine's own tools (VFS primitives, hashing, the shell), run in its process; no project defines tools for it. */
export const builtinRunner: RunnerDefinition = {
  name: 'builtin',
  summary: "the engine's own tools (fs.*, vfs.*, system.*, shell.run), run in the engine's process (shell.run's scripts in a worker thread)",
  extensions: [],
  permission: null,
  definable: false,
  create: () => new BuiltinRunner(),
};
