import { openSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Socket } from 'node:net';
import { CallRun } from './call.mjs';
import { HostGate } from './host-gate.mjs';
import { ModuleLoader } from './loader.mjs';
import { PersistentContexts } from './persistent.mjs';
import { IsolatePool } from './pool.mjs';
import { setupSource } from './setup-script.mjs';

/**
 * The JS sandbox process. The engine forks it (runners/js/sandbox-process.ts) with
 * `--no-node-snapshot`, which isolated-vm needs on Node 20+, and talks to it over the IPC channel.
 * Tool code never runs in this process's own isolate, only in isolated-vm isolates it owns; this
 * process exists so that a V8 failure that aborts a process (isolated-vm issues #107, #527) takes down
 * this one and not the engine.
 *
 * Messages in: prepare, call, reply, abort, forget, shutdown. Out: ready | unavailable, vfs, done,
 * draining. Shapes are documented in runners/js/protocol.ts.
 */

const config = JSON.parse(process.argv[2] ?? '{}');
const post = (message) => {
  if (process.connected) process.send(message);
};
/**
 * The bulk pipe: large write contents go to the engine here as raw bytes (a 4-byte little-endian
 * length, then the bytes), before the `vfs` message that says `blob: length`. The engine matches the
 * two in order. Without it (an engine that did not open fd 4) they travel as base64 in the message.
 */
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
/** SIGKILL, not exit(): exit() waits for every isolate thread, and one parked by a V8 OOM never returns. */
const die = () => process.kill(process.pid, 'SIGKILL');

const require = createRequire(import.meta.url);
let ivm = null;
try {
  ivm = require(config.ivmDir ?? 'isolated-vm');
} catch (error) {
  // No isolates exist yet, so a normal exit is safe; the callback waits until the message is written.
  process.send({ t: 'unavailable', reason: String(error?.message ?? error).split('\n')[0] }, () => process.exit(1));
}
if (ivm) serve(ivm);

/** What this process may do outside its job: the engine's tests check the permission model is in force. */
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
  let draining = false;
  const compiler = new ivm.Isolate({ memoryLimit: 512 });
  const loader = new ModuleLoader(ivm, compiler, config.typescriptDir);
  const logCap = config.logCap ?? 256 * 1024;
  const pool = new IsolatePool(ivm, setupSource(), {
    maxIsolates: config.maxIsolates ?? 16,
    logCap,
    onCatastrophe: (slot, message) => {
      // isolated-vm parked the isolate's thread for good and V8's state is no longer trusted. The
      // engine hears it before the call's result, so the call that follows goes to a fresh process;
      // the engine shuts this one down once the calls it already sent here are done.
      pool.abandon(slot);
      if (!draining) {
        draining = true;
        post({ t: 'draining', reason: String(message) });
      }
      for (const run of calls.values()) if (run.slot === slot) run.catastrophe();
    },
  });
  const persistent = new PersistentContexts(pool);
  const gate = new HostGate();
  const deps = {
    ivm,
    pool,
    persistent,
    loader,
    gate,
    post,
    postBulk,
    logCap,
    onFinished: (run) => calls.delete(run.id),
  };

  process.on('message', (/** @type {import('../protocol.js').ToWorker} */ msg) => {
    switch (msg?.t) {
      case 'call': {
        const run = new CallRun(msg, deps);
        calls.set(msg.id, run);
        run.start().catch((error) => run.stop('INTERNAL', `The sandbox failed while running the tool: ${error?.message ?? error}`));
        break;
      }
      case 'reply':
        calls.get(msg.id)?.onReply(msg);
        break;
      case 'abort':
        calls.get(msg.id)?.stop(msg.code ?? 'CANCELLED', msg.message ?? 'The call was cancelled');
        break;
      case 'prepare':
        if (draining) break;
        pool.warm(msg.memoryMb);
        loader.graph(msg.tool.entry, msg.tool.root).catch(() => {
          // Reported by the call itself, with the tool's own message.
        });
        break;
      case 'forget':
        loader.forget(msg.entry);
        if (typeof msg.tool === 'string') persistent.forget(msg.tool);
        break;
      case 'stats':
        post({
          t: 'stats',
          id: msg.id,
          pool: pool.stats(),
          persistent: persistent.stats(),
          host: gate.stats(),
          calls: calls.size,
          rss: process.memoryUsage.rss(),
          cpu: process.cpuUsage(),
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
  // The engine is gone: nothing left to serve.
  process.on('disconnect', die);
  post({ t: 'ready', node: process.version, isolatedVm: require(`${config.ivmDir ?? 'isolated-vm'}/package.json`).version });
}
