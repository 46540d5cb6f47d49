import { readFileSync } from 'node:fs';

/**
 * The script every fresh context runs before any tool code: memory-guard.js, values.js and prelude.js,
 * each a single expression, wrapped in one strict-mode function. The worker first sets three globals on the fresh
 * context (the host callbacks and the context's settings); the script takes them off the global object
 * before anything else runs, installs the prelude, and evaluates to the context's entry function (see
 * prelude.js). Both files are read once per worker.
 */
export function setupSource() {
  const read = (name) =>
    readFileSync(new URL(name, import.meta.url), 'utf8')
      .trimEnd()
      .replace(/;$/, '');
  return [
    '(function () {',
    "'use strict';",
    'const G = globalThis;',
    `const host = [G.${HOST_GLOBALS.send}, G.${HOST_GLOBALS.done}, G.${HOST_GLOBALS.config}];`,
    `delete G.${HOST_GLOBALS.send}; delete G.${HOST_GLOBALS.done}; delete G.${HOST_GLOBALS.config};`,
    `const guardMemory = ${read('./memory-guard.js')};`,
    `const values = ${read('./values.js')};`,
    `const install = (${read('./prelude.js')})(values);`,
    "const config = host[2].split(',').map(Number);",
    'return install(host[0], host[1], config[0], config[1], config[2], guardMemory);',
    '})();',
  ].join('\n');
}

/** Globals the worker sets on a fresh context for the setup script, which deletes them at once. */
export const HOST_GLOBALS = Object.freeze({ send: '__ariumSend', done: '__ariumDone', config: '__ariumConfig' });

/** The name isolate stacks show for the setup code; frames carrying it are cut from tool stacks. */
export const SETUP_FILENAME = 'arium:sandbox';
