import { startSandbox } from '../../shared/worker/sandbox.mjs';
import { CallRun } from './call.mjs';
import { HostGate } from './host-gate.mjs';
import { ModuleLoader } from './loader.mjs';
import { PersistentContexts } from './persistent.mjs';
import { IsolatePool } from './pool.mjs';
import { setupSource } from './setup-script.mjs';

/**
 * The JS sandbox process: ES modules in isolated-vm isolates, one isolate and a fresh context per call.
 * The process itself (start-up, the engine's messages, the bulk pipe, probes) is the shared sandbox's
 * (runners/shared/worker/sandbox.mjs); this is what it runs.
 */

startSandbox(({ ivm, config, post, postBulk, calls, finished }) => {
  let draining = false;
  const compiler = new ivm.Isolate({ memoryLimit: 512 });
  const loader = new ModuleLoader(ivm, compiler, config.typescriptDir);
  const logCap = config.logCap ?? 256 * 1024;
  const pool = new IsolatePool(ivm, setupSource(), {
    maxIsolates: config.maxIsolates ?? 16,
    rotation: config.rotation,
    longCallMs: config.longCallMs,
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
  const deps = { ivm, pool, persistent, loader, gate, post, postBulk, logCap, onFinished: finished };
  return {
    call: (msg) => new CallRun(msg, deps),
    prepare(msg) {
      if (draining) return;
      pool.warm(msg.memoryMb);
      loader.graph(msg.tool.entry, msg.tool.root).catch(() => {
        // Reported by the call itself, with the tool's own message.
      });
    },
    forget(msg) {
      loader.forget(msg.entry);
      if (typeof msg.tool === 'string') persistent.forget(msg.tool);
    },
    stats: () => ({ pool: pool.stats(), persistent: persistent.stats(), host: gate.stats() }),
  };
});
