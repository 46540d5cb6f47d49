import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { delimiter, join } from 'node:path';
import { defineConfig } from 'vitest/config';

// The remote-runner suites start a real nats-server (Debian's, in /usr/sbin). Where it is missing they
// are left out, saying so, as the browser and bubblewrap suites skip; under CI they run and fail.
const hasNats = [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/usr/local/sbin'].some(
  (dir) => dir && existsSync(join(dir, 'nats-server')),
);
if (!hasNats && !process.env.CI) console.warn('test/remote.*: skipped, nats-server is not installed (apt-get install nats-server)');

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    exclude: hasNats || process.env.CI ? [] : ['test/remote.*.test.ts'],
    // Runner suites start processes and isolates: forks keep them apart from the other suites.
    pool: 'forks',
    // Vitest's default is one file at a time on two cores (cores − 1). Most suites wait on processes,
    // servers and timers more than they compute, so two at a time there took the whole run from 700 s
    // to 450 s on this project's 2-core machine, with the same results.
    maxWorkers: Math.max(2, availableParallelism() - 1),
    testTimeout: 20_000,
    hookTimeout: 30_000,
  },
});
