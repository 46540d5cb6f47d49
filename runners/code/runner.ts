import { ProgramCalls } from '../../src/code-mode/program.js';
import { ToolFailure } from '../../src/errors.js';
import type { RunContext, Runner, RunnerStatus } from '../../src/runner.js';
import type { Tool } from '../../src/tool.js';
import { JsRunner, type JsRunnerOptions } from '../js/js-runner.js';
import { CODE_RUN_TOOL } from './tool.js';

/**
 * Runs code.run: the program in the JS sandbox (a JsRunner of its own, started on the first program),
 * contained as a JS tool is, under the code.run call's timeout and memory limit; each tool it calls
 * comes back here and goes through the dispatcher as a call of its own (`ctx.calls`).
 */
export class CodeRunner implements Runner {
  readonly name = 'code' as const;
  readonly interruptible = true;
  readonly capabilities = ['calls'] as const;
  #js: JsRunner | null = null;
  readonly #options: JsRunnerOptions;

  /** `options`: the JS sandbox's, for the programs (default: JsRunner's). */
  constructor(options: JsRunnerOptions = {}) {
    this.#options = options;
  }

  tools(): Tool[] {
    return [CODE_RUN_TOOL];
  }

  async run(ctx: RunContext): Promise<unknown> {
    if (!ctx.calls) throw new ToolFailure('execution', 'MISCONFIGURED', 'code.run needs an engine that gives its runner a way to call tools');
    const { code, atomic } = ctx.input as { code: string; atomic?: boolean };
    const calls = new ProgramCalls(ctx.calls, atomic === true);
    this.#js ??= new JsRunner(this.#options);
    try {
      return await this.#js.program(ctx, code, calls.serve);
    } finally {
      ctx.meta.calls = calls.made;
    }
  }

  async status(): Promise<RunnerStatus> {
    return this.#js ? this.#js.status() : { available: true, sandbox: 'the JS sandbox starts with the first program' };
  }

  async close(): Promise<void> {
    await this.#js?.close();
  }
}
