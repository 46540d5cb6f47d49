import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Runner suites start processes and isolates: forks keep them apart from the other suites.
    pool: 'forks',
    testTimeout: 20_000,
    hookTimeout: 30_000,
  },
});
