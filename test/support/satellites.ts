// Satellites in processes of their own, for the tests that kill one mid-call: the TypeScript SDK
// bundled once with esbuild (plain Node runs it), and the Python SDK's fixture.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
let bundled: Promise<string> | null = null;

/** A script `node <it> <url> <deployment> <node_id>` serving fixtures/satellites/echo.mjs as a satellite. */
function bundle(): Promise<string> {
  bundled ??= (async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'arium-satellite-')), 'satellite.mjs');
    await build({
      stdin: {
        contents: [
          `import { satellite } from ${JSON.stringify(join(ROOT, 'src/satellite/index.ts'))};`,
          `import * as mod from ${JSON.stringify(join(ROOT, 'fixtures/satellites/echo.mjs'))};`,
          'const [url, deployment, node_id] = process.argv.slice(2);',
          'await satellite({ servers: url, deployment, node_id, tools: mod.tools, version: mod.version, heartbeat_ms: 100 });',
          "process.stdout.write('ready\\n');",
        ].join('\n'),
        resolveDir: ROOT,
        loader: 'ts',
      },
      bundle: true,
      platform: 'node',
      format: 'esm',
      target: 'node20',
      outfile: out,
      logLevel: 'error',
      banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
    });
    return out;
  })();
  return bundled;
}

export interface SatelliteProcess {
  readonly child: ChildProcess;
  /** Kills it at once (SIGKILL): no leaving heartbeat, no answer to the calls it runs. */
  kill(): Promise<void>;
}

async function started(child: ChildProcess, what: string): Promise<SatelliteProcess> {
  let err = '';
  child.stderr?.on('data', (d) => (err += d));
  await new Promise<void>((ready, failed) => {
    child.stdout?.on('data', (d: Buffer) => {
      if (d.toString().includes('ready')) ready();
    });
    child.once('exit', (code) => failed(new Error(`${what} exited (${code}) before it was ready: ${err}`)));
  });
  return {
    child,
    kill: () =>
      new Promise<void>((done) => {
        if (child.exitCode !== null || child.signalCode !== null) return done();
        child.once('exit', () => done());
        child.kill('SIGKILL');
      }),
  };
}

/** A TypeScript satellite (echo, sleep) in its own Node process. */
export async function tsSatellite(url: string, deployment: string, node: string): Promise<SatelliteProcess> {
  const script = await bundle();
  return started(spawn(process.execPath, [script, url, deployment, node], { stdio: ['ignore', 'pipe', 'pipe'] }), `satellite ${node}`);
}

/** The Python satellite of fixtures/satellites/py_tools.py (pyecho, pysleep, pyfail), on the SDK of sdk/python. */
export async function pySatellite(url: string, deployment: string, node: string): Promise<SatelliteProcess> {
  const child = spawn('python3', ['-u', '-c', PY_START, url, deployment, node], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, PYTHONPATH: `${join(ROOT, 'sdk/python')}:${join(ROOT, 'fixtures/satellites')}` },
  });
  return started(child, `python satellite ${node}`);
}

// Runs the fixture's satellite and prints "ready" once it has announced itself.
const PY_START = `
import asyncio, sys
import py_tools
from arium_satellite import Satellite
async def main():
    url, deployment, node = sys.argv[1:4]
    s = Satellite(url, [py_tools.pyecho, py_tools.pysleep, py_tools.pyfail], deployment=deployment, node_id=node,
                  heartbeat_ms=100, version="py-1")
    await s.start()
    print("ready", flush=True)
    await s._nc.closed.wait()
asyncio.run(main())
`;
