import { openSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Socket } from 'node:net';
import { WasmCall } from './call.mjs';
import { ModuleCache, ModuleProblem } from './modules.mjs';
import { WasmPool } from './pool.mjs';

/**
 * The wasm sandbox process: the JS runner's sandbox process (runners/js/sandbox-process.ts forks it the
 * same way, `--no-node-snapshot`, the permission model, no environment) serving WebAssembly modules in
 * isolated-vm isolates instead of JS modules. It speaks the JS sandbox's protocol (runners/js/protocol.ts):
 * in prepare, call (with a `wasm` block: args, env, preopens), reply, abort, forget, stats, probe,
 * shutdown; out ready | unavailable, vfs, done.
 */

const config = JSON.parse(process.argv[2] ?? '{}');
const post = (message) => {
  if (process.connected) process.send(message);
};
/** Large writes go to the engine as raw bytes on fd 4 (a 4-byte little-endian length, then the bytes), as in the JS sandbox. */
const bulk = config.bulkFd === 4 ? new Socket({ fd: 4, readable: false, writable: true }) : null;
bulk?.on('error', () => {});
const postBulk = bulk
  ? (bytes) => {
      const header = Buffer.allocUnsafe(4);
      header.writeUInt32LE(bytes.length, 0);
      bulk.cork();
      bulk.write(header);
      bulk.write(bytes);
      bulk.uncork();
    }
  : null;
/** SIGKILL, not exit(): exit() waits for every isolate thread. */
const die = () => process.kill(process.pid, 'SIGKILL');

/** Time the module's isolate spent blocked on the host (VFS, random): what bridging WASI's synchronous calls costs. */
class HostStats {
  calls = 0;
  ms = 0;
  record(calls, ms) {
    this.calls += calls;
    this.ms += ms;
  }
}

const require = createRequire(import.meta.url);
let ivm = null;
try {
  ivm = require(config.ivmDir ?? 'isolated-vm');
} catch (error) {
  process.send({ t: 'unavailable', reason: String(error?.message ?? error).split('\n')[0] }, () => process.exit(1));
}
if (ivm) serve(ivm);

function probe() {
  const attempt = (fn) => {
    try {
      fn();
      return 'allowed';
    } catch (error) {
      return error?.code === 'ERR_ACCESS_DENIED' ? 'denied' : `failed (${error?.code ?? 'error'})`;
    }
  };
  return {
    read_outside: attempt(() => openSync(process.execPath, 'r')),
    child_process: attempt(() => require('node:child_process').spawnSync(process.execPath, ['--version'])),
    env_keys: Object.keys(process.env).length,
  };
}

function serve(ivm) {
  const calls = new Map();
  const pool = new WasmPool(ivm, config.maxIsolates ?? 16);
  const modules = new ModuleCache(ivm);
  const hostStats = new HostStats();
  const deps = {
    ivm,
    pool,
    modules,
    post,
    postBulk,
    hostStats,
    logCap: config.logCap ?? 64 * 1024,
    maxFileBytes: config.maxFileBytes ?? 64 * 1024 * 1024,
    onFinished: (call) => calls.delete(call.id),
  };

  process.on('message', (/** @type {import('../../js/protocol.js').ToWorker} */ msg) => {
    switch (msg?.t) {
      case 'call': {
        const call = new WasmCall(msg, deps);
        calls.set(msg.id, call);
        call.start().catch((error) => call.stop('INTERNAL', `The wasm sandbox failed while running the tool: ${error?.message ?? error}`));
        break;
      }
      case 'reply':
        calls.get(msg.id)?.onReply(msg);
        break;
      case 'abort':
        calls.get(msg.id)?.stop(msg.code ?? 'CANCELLED', msg.message ?? 'The call was cancelled');
        break;
      case 'prepare':
        // Read, check and compile the module now, so that its first call only instantiates it.
        try {
          const module = modules.get(msg.tool.entry);
          pool.precompile(module.hash, module.bytes).catch(() => {});
        } catch (error) {
          if (!(error instanceof ModuleProblem)) throw error;
        }
        break;
      case 'forget': {
        const hash = modules.forget(msg.entry);
        if (hash) pool.forget(hash);
        break;
      }
      case 'stats':
        post({
          t: 'stats',
          id: msg.id,
          pool: pool.stats(),
          host: { calls: hostStats.calls, ms: Math.round(hostStats.ms) },
          calls: calls.size,
          rss: process.memoryUsage.rss(),
        });
        break;
      case 'probe':
        post({ t: 'probe', id: msg.id, ...probe() });
        break;
      case 'shutdown':
        die();
        break;
    }
  });
  process.on('disconnect', die);
  post({ t: 'ready', node: process.version, isolatedVm: require(`${config.ivmDir ?? 'isolated-vm'}/package.json`).version });
}
