import { openSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Socket } from 'node:net';

/**
 * What every isolated-vm sandbox process does the same, whatever it runs: a runner's worker
 * (runners/<name>/worker/main.mjs) calls `startSandbox` with how it serves calls, and this does the rest.
 * The engine forks the worker (runners/shared/sandbox-process.ts) with `--no-node-snapshot`, which
 * isolated-vm needs on Node 20+, no environment, and the permission model where Node has it, and talks
 * to it over the IPC channel. Tool code never runs in this process's own isolate, only in isolated-vm
 * isolates it owns; the process exists so that a V8 failure that aborts a process (isolated-vm issues
 * #107, #527) takes down this one and not the engine.
 *
 * Messages in: call, reply, abort, prepare, forget, stats, probe, shutdown. Out: ready | unavailable,
 * vfs, log, done, draining, stats, probe. Shapes are in runners/shared/sandbox-protocol.ts.
 */

/**
 * @typedef {object} SandboxHost What a runner's worker gets to build its server from.
 * @property {any} ivm The isolated-vm module.
 * @property {Record<string, any>} config The worker's configuration (argv[2]), as the runner gave it.
 * @property {(message: object) => void} post Sends a message to the engine.
 * @property {((bytes: Uint8Array) => void) | null} postBulk Sends bytes on the bulk pipe (null without one).
 * @property {Map<number, any>} calls The calls running, by id.
 * @property {(run: { id: number }) => void} finished A call has sent its `done`: it leaves `calls`.
 */

/**
 * @typedef {object} SandboxServer How a runner's worker serves what the engine sends.
 * @property {(msg: any) => { start(): Promise<void>, onReply(msg: any): void, stop(code: string, message: string): void }} call
 *   A call's run (not started yet).
 * @property {(msg: any) => void} prepare Warms what a tool's first call needs.
 * @property {(msg: any) => void} forget Drops what was kept for an entry.
 * @property {() => Record<string, unknown>} stats The worker's own facts for `stats` (its pool, its host traffic).
 */

/**
 * Starts the sandbox: loads isolated-vm (or says why it cannot, and exits), then serves the engine's
 * messages with the server `serve` builds.
 * @param {(host: SandboxHost) => SandboxServer} serve
 */
export function startSandbox(serve) {
  const config = JSON.parse(process.argv[2] ?? '{}');
  const require = createRequire(import.meta.url);
  let ivm = null;
  try {
    ivm = require(config.ivmDir ?? 'isolated-vm');
  } catch (error) {
    // No isolates exist yet, so a normal exit is safe; the callback waits until the message is written.
    process.send({ t: 'unavailable', reason: String(error?.message ?? error).split('\n')[0] }, () => process.exit(1));
    return;
  }
  const calls = new Map();
  const server = serve({ ivm, config, post, postBulk: bulkPipe(config), calls, finished: (run) => calls.delete(run.id) });
  const label = config.label ?? 'isolated-vm';

  process.on('message', (/** @type {import('../sandbox-protocol.js').ToWorker} */ msg) => {
    switch (msg?.t) {
      case 'call': {
        const run = server.call(msg);
        calls.set(msg.id, run);
        run.start().catch((error) => run.stop('INTERNAL', `The ${label} sandbox failed while running the tool: ${error?.message ?? error}`));
        break;
      }
      case 'reply':
        calls.get(msg.id)?.onReply(msg);
        break;
      case 'abort':
        calls.get(msg.id)?.stop(msg.code ?? 'CANCELLED', msg.message ?? 'The call was cancelled');
        break;
      case 'prepare':
        server.prepare(msg);
        break;
      case 'forget':
        server.forget(msg);
        break;
      case 'stats':
        post({ t: 'stats', id: msg.id, ...server.stats(), calls: calls.size, rss: process.memoryUsage.rss(), cpu: process.cpuUsage() });
        break;
      case 'probe':
        post({ t: 'probe', id: msg.id, ...probe(require) });
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

function post(message) {
  if (process.connected) process.send(message);
}

/** SIGKILL, not exit(): exit() waits for every isolate thread, and one parked by a V8 OOM never returns. */
function die() {
  process.kill(process.pid, 'SIGKILL');
}

/**
 * The bulk pipe: large write contents go to the engine here as raw bytes (a 4-byte little-endian
 * length, then the bytes), before the `vfs` message that says `blob: length`. The engine matches the
 * two in order. Without it (an engine that did not open fd 4) they travel as base64 in the message.
 */
function bulkPipe(config) {
  if (config.bulkFd !== 4) return null;
  const bulk = new Socket({ fd: 4, readable: false, writable: true });
  bulk.on('error', () => {});
  return (bytes) => {
    const header = Buffer.allocUnsafe(4);
    header.writeUInt32LE(bytes.length, 0);
    bulk.cork();
    bulk.write(header);
    bulk.write(bytes);
    bulk.uncork();
  };
}

/** What this process may do outside its job: the engine's tests check the permission model is in force. */
function probe(require) {
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
