// Run by test/py-runner.unprivileged.test.ts as an unprivileged user (setpriv): the Python sandbox
// as an engine that is not root builds it (user namespaces, capabilities dropped instead of a uid).
// Prints one JSON document: for each isolation tier asked for, what the hostile tool found.

import { PythonRunner } from '../../dist/runners/python/index.js';
import { createEngine } from '../../dist/src/index.js';

const [workspace, python, ...modes] = process.argv.slice(2);
const out = {};
for (const mode of modes) {
  const engine = await createEngine({
    workspace,
    project: 'p',
    persist: false,
    watch: false,
    runners: [new PythonRunner({ isolation: mode, python })],
  });
  const call = async (input) => {
    const result = await engine.call('py.attack', input);
    return result.ok ? result.data : { error: result.error };
  };
  try {
    out[mode] = {
      echo: (await engine.call('py.echo', { hello: 1 })).ok,
      identity: await call({ attack: 'identity' }),
      network: await call({ attack: 'network' }),
      files: await call({ attack: 'host-files', paths: ['/etc/passwd', workspace] }),
      programs: await call({ attack: 'run-programs' }),
      stdlib: await (async (result) => (result.ok ? result.data : { error: result.error }))(await engine.call('py.stdlib', {})),
      view: mode === 'rlimits' ? null : await call({ attack: 'programs-in-view' }),
      // With namespaces only: with rlimits these folders are the host's.
      persistence:
        mode === 'rlimits'
          ? null
          : {
              left: (await call({ attack: 'leave-files', name: 'left-behind' })).left,
              found: (await call({ attack: 'find-files', name: 'left-behind' })).found,
            },
      status: (await engine.status()).runners['py-runner'],
    };
  } finally {
    await engine.close();
  }
}
console.log(JSON.stringify(out));
