import { writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { benchBuiltin } from './builtin.js';

/**
 * `npm run bench`: runs every benchmark in one process, prints the figures and writes them to
 * bench/results.json. BENCHMARKS.md quotes these figures with the command that produced them.
 * Runner benchmarks (bench/js.ts, bench/python.ts) are loaded when present.
 */
type Bench = (flags: ReadonlyMap<string, string>) => Promise<Record<string, unknown>>;

async function optional(module: string, name: string): Promise<Bench | null> {
  try {
    const mod = (await import(module)) as Record<string, Bench>;
    return mod[name] ?? null;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ERR_MODULE_NOT_FOUND') return null;
    throw error;
  }
}

// `name…` picks suites; `--flag value` pairs go to every suite (the soak reads `--calls`, `--seed`).
const only: string[] = [];
const flags = new Map<string, string>();
for (let i = 2; i < process.argv.length; i++) {
  const arg = process.argv[i] as string;
  if (arg.startsWith('--')) flags.set(arg.slice(2), process.argv[++i] ?? '');
  else only.push(arg);
}
/** Suites that run only when named: the soak takes minutes and kills processes on purpose. */
const NAMED_ONLY = new Set(['soak']);
const suites: Array<[string, Bench | null]> = [
  ['builtin', benchBuiltin],
  ['js', await optional('./js.js', 'benchJs')],
  // The persistent-context figures of the `js` suite alone.
  ['js-persistent', await optional('./js-persistent.js', 'benchPersistent')],
  // What a fresh JS context costs to make, and what a startup snapshot of the setup code leaves of it.
  ['js-context', await optional('./js-context.js', 'benchJsContext')],
  ['python', await optional('./python.js', 'benchPython')],
  ['write', await optional('./write.js', 'benchWrite')],
  ['packages', await optional('./packages.js', 'benchPackages')],
  ['cold', await optional('./cold.js', 'benchCold')],
  ['daemon-cli', await optional('./daemon-cli.js', 'benchDaemonCli')],
  ['vfs', await optional('./vfs.js', 'benchVfs')],
  ['diff', await optional('./diff-view.js', 'benchDiffView')],
  ['snapshot-first', await optional('./snapshot-first.js', 'benchSnapshotFirst')],
  ['contention', await optional('./contention.js', 'benchContention')],
  ['mix', await optional('./mix.js', 'benchMix')],
  ['scale', await optional('./scale.js', 'benchScale')],
  ['mcp', await optional('./mcp.js', 'benchMcp')],
  ['mcp-http', await optional('./mcp-http.js', 'benchMcpHttp')],
  ['daemon-start', await optional('./daemon-start.js', 'benchDaemonStart')],
  ['http', await optional('./http.js', 'benchHttp')],
  ['exec', await optional('./exec.js', 'benchExec')],
  ['wasm', await optional('./wasm.js', 'benchWasm')],
  ['shell', await optional('./shell.js', 'benchShell')],
  ['shell-warm', await optional('./shell-warm.js', 'benchShellWarm')],
  ['remote', await optional('./remote.js', 'benchRemote')],
  ['remote-deps', await optional('./remote-deps.js', 'benchRemoteDeps')],
  ['providers-mcp', await optional('./providers-mcp.js', 'benchProvidersMcp')],
  ['providers-http', await optional('./providers-http.js', 'benchProvidersHttp')],
  ['providers-nats', await optional('./providers-nats.js', 'benchProvidersNats')],
  ['code-mode', await optional('./code-mode.js', 'benchCodeMode')],
  ['discovery', await optional('./discovery.js', 'benchDiscovery')],
  ['store-jetstream', await optional('./store-jetstream.js', 'benchStoreJetStream')],
  ['soak', await optional('./soak.js', 'benchSoak')],
];
const results: Record<string, unknown> = {
  date: new Date().toISOString(),
  node: process.version,
  cpu: cpus()[0]?.model ?? 'unknown',
  cores: cpus().length,
};
for (const [name, bench] of suites) {
  if (only.length > 0 ? !only.includes(name) : NAMED_ONLY.has(name)) continue;
  if (!bench) {
    results[name] = 'not available';
    continue;
  }
  process.stderr.write(`bench ${name}…\n`);
  results[name] = await bench(flags);
  process.stderr.write(`${JSON.stringify(results[name], null, 2)}\n`);
}
writeFileSync(new URL('../../bench/results.json', import.meta.url), `${JSON.stringify(results, null, 2)}\n`);
process.stdout.write(`${JSON.stringify(results, null, 2)}\n`);
