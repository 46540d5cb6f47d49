import type { RunnerDefinition } from '../../src/runner.js';
import { BuiltinRunner } from './index.js';

/** The engine's own tools (VFS primitives, hashing), run in its process; no project defines tools for it. */
export const builtinRunner: RunnerDefinition = {
  name: 'builtin',
  summary: "the engine's own tools (fs.*, vfs.*, system.*), run in the engine's process",
  extensions: [],
  permission: null,
  definable: false,
  create: () => new BuiltinRunner(),
};
