// The JS runner's containment, limits and tool-contract suites, every attack in them, run with the
// tools on a remote worker over a real nats-server: the worker hosts the same sandbox, and the VFS
// checks stay with the engine.
import { runOnRemoteWorker } from './support/target.js';

await runOnRemoteWorker();
await import('./js-runner.security.test.js');
await import('./js-runner.limits.test.js');
await import('./js-runner.contract.test.js');
