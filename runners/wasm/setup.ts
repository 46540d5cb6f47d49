import { posix } from 'node:path';
import type { Tool } from '../../src/tool.js';

/** What a module is started with (the `setup` of its calls): its argv, its environment, and the VFS folders it may open. */
export interface WasmSetup {
  args: string[];
  env: string[];
  preopens: string[];
}

/**
 * What a module starts with, from its definition only: argv is the entry's file name, the environment
 * names the tool, and the preopened folders are those its `vfs.read` / `vfs.write` permissions reach (the literal part
 * of each scope; every operation is still checked against the scopes themselves).
 */
export function wasmSetup(tool: Tool): WasmSetup {
  const preopens = new Set<string>();
  for (const permission of tool.declared) {
    if (permission.name !== 'vfs.read' && permission.name !== 'vfs.write') continue;
    if (permission.scope === null) {
      preopens.add('/');
      continue;
    }
    const literal = permission.prefix === permission.scope ? posix.dirname(permission.prefix) : permission.prefix.replace(/\/[^/]*$/, '');
    preopens.add(literal === '' ? '/' : posix.normalize(literal));
  }
  return {
    args: [posix.basename(tool.spec.entry ?? 'tool.wasm')],
    env: [`ARIUM_TOOL=${tool.spec.id}`],
    preopens: [...preopens].sort(),
  };
}
