import { startSandbox } from '../../shared/worker/sandbox.mjs';
import { WasmCall } from './call.mjs';
import { ModuleCache, ModuleProblem } from './modules.mjs';
import { WasmPool } from './pool.mjs';

/**
 * The wasm sandbox process: WebAssembly modules (WASI preview 1 commands) in isolated-vm isolates. The
 * process itself (start-up, the engine's messages, the bulk pipe, probes) is the shared sandbox's
 * (runners/shared/worker/sandbox.mjs); this is what it runs. A call's `setup` carries the module's
 * args, env and preopens (runners/wasm/setup.ts).
 */

/** Time the module's isolate spent blocked on the host (VFS, random): what bridging WASI's synchronous calls costs. */
class HostStats {
  calls = 0;
  ms = 0;
  record(calls, ms) {
    this.calls += calls;
    this.ms += ms;
  }
}

startSandbox(({ ivm, config, post, postBulk, finished }) => {
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
    onFinished: finished,
  };
  return {
    call: (msg) => new WasmCall(msg, deps),
    prepare(msg) {
      // Read, check and compile the module now, so that its first call only instantiates it.
      try {
        const module = modules.get(msg.tool.entry);
        pool.precompile(module.hash, module.bytes).catch(() => {});
      } catch (error) {
        if (!(error instanceof ModuleProblem)) throw error;
      }
    },
    forget(msg) {
      const hash = modules.forget(msg.entry);
      if (hash) pool.forget(hash);
    },
    stats: () => ({ pool: pool.stats(), host: { calls: hostStats.calls, ms: Math.round(hostStats.ms) } }),
  };
});
