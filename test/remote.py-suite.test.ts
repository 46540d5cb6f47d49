// The Python runner's suite (the tool contract, protocol integrity, limits, sys.exec, containment and
// the sandbox's isolation) run with the tools on remote workers over a real nats-server.
import { runOnRemoteWorker } from './support/target.js';

await runOnRemoteWorker();
await import('./py-runner.test.js');
