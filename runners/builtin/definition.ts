import type { Check, RunnerDefinition } from '../../src/runner.js';
import { ExecService } from './exec/service.js';
import { EXEC_CONFIG_SCHEMA, type ExecConfig, execSettings } from './exec/settings.js';
import { BuiltinRunner } from './index.js';

/** The engine's own tools (VFS primitives, hashing, the shell, system.exec), run in its process; no project defines tools for it. */
export const builtinRunner: RunnerDefinition = {
  name: 'builtin',
  summary:
    "the engine's own tools (fs.*, vfs.*, system.*, shell.run), run in the engine's process (shell.run's scripts in a worker thread, system.exec's programs in bubblewrap)",
  extensions: [],
  permission: null,
  definable: false,
  config: { exec: EXEC_CONFIG_SCHEMA },
  probe: async ({ config, projectDir }) => [await checkExec(config.exec as ExecConfig | undefined, projectDir)],
  create: ({ config, projectDir }) => new BuiltinRunner(undefined, execSettings(config.exec as ExecConfig | undefined, projectDir)),
};

/** `arium doctor`: whether system.exec can run here, and what its allowlist resolves to. */
async function checkExec(config: ExecConfig | undefined, projectDir: string): Promise<Check> {
  const settings = execSettings(config, projectDir);
  const problem = await new ExecService(settings).problem();
  if (problem) return { name: 'system.exec', ok: false, detail: problem.message, fix: problem.fix };
  const programs = settings.programs.map((p) => `${p.listed} → ${p.path ?? `missing (${p.problem})`}`);
  const missing = settings.programs.filter((p) => p.path === null);
  return {
    name: 'system.exec',
    ok: missing.length === 0,
    detail: `can run (bubblewrap works); allowlist: ${programs.length > 0 ? programs.join(', ') : 'empty (no program may run)'}`,
    ...(missing.length > 0 ? { fix: `install ${missing.map((p) => p.listed).join(', ')} or fix "exec.allow" in arium.json` } : {}),
  };
}
