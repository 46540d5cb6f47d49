import { type ErrorCode, type ErrorInfo, type Stage, ToolFailure } from '../errors.js';
import { CODE_MODE_LIMITS } from '../limits.js';
import type { ToolCaller } from '../runner.js';
import { suggest } from '../suggest.js';
import { jsPath, toolId } from './names.js';

/** A failed tool call as the program gets it: its result's error without the tool's own stack. */
export interface ProgramError {
  code: ErrorCode;
  message: string;
  stage: Stage;
  retryable: boolean;
  tool: string;
  details?: Record<string, unknown>;
}

/** What a program's tool call comes to: the tool's output, or its error. */
export type ProgramAnswer = { ok: true; value: unknown } | { ok: false; error: ProgramError };

function programError(error: ErrorInfo, message = error.message): ProgramError {
  const { code, stage, retryable, tool, details } = error;
  return { code, message, stage, retryable, tool, ...(details !== undefined ? { details } : {}) };
}

/** The bounds of one program's tool calls (CODE_MODE_LIMITS by default). */
export interface ProgramBounds {
  max_calls: number;
  max_concurrent: number;
}

/**
 * The host side of one code-mode program's `tools`: maps each call's property path to a tool id
 * (names.ts), hands it to the code.run call's `ToolCaller`, and answers with the inner call's output or
 * error. It holds the program's bounds: calls in all (past it the program ends, which it cannot catch)
 * and calls at once (the rest wait their turn).
 */
export class ProgramCalls {
  readonly #caller: ToolCaller;
  readonly #atomic: boolean;
  readonly #bounds: ProgramBounds;
  #made = 0;
  #running = 0;
  readonly #waiting: Array<() => void> = [];
  #callable: string[] | null = null;

  constructor(caller: ToolCaller, atomic: boolean, bounds: ProgramBounds = CODE_MODE_LIMITS) {
    this.#caller = caller;
    this.#atomic = atomic;
    this.#bounds = bounds;
  }

  /** Tool calls the program has made so far. */
  get made(): number {
    return this.#made;
  }

  /** Serves one call: `path` is the property path under `tools`, its parts joined by U+0000; `input` is JSON text. */
  readonly serve = async (path: string, input: string): Promise<ProgramAnswer> => {
    if (this.#made >= this.#bounds.max_calls) {
      throw new ToolFailure(
        'execution',
        'TOOL_ERROR',
        `The program made more than ${this.#bounds.max_calls} tool calls, the most one code.run program may make; do more per call or split the work into several programs`,
        { details: { limit: 'max_calls', max: this.#bounds.max_calls } },
      );
    }
    this.#made++;
    const parts = path.split('\u0000');
    const shown = `tools.${parts.join('.')}`;
    let id: string;
    try {
      id = toolId(parts);
    } catch (error) {
      return this.#refused('UNKNOWN_TOOL', `${shown} names no tool: ${(error as Error).message}.${this.#hint(parts.join('.').toLowerCase())}`);
    }
    let value: unknown;
    try {
      value = JSON.parse(input);
    } catch {
      return this.#refused('INVALID_INPUT', `The input of ${shown} is not JSON`);
    }
    await this.#turn();
    try {
      const result = await this.#caller.call(id, value, this.#atomic);
      if (result.ok) return { ok: true, value: result.data };
      if (result.error.code === 'UNKNOWN_TOOL') {
        return { ok: false, error: programError(result.error, `${shown} names no tool (no tool has the id "${id}").${this.#hint(id)}`) };
      }
      return { ok: false, error: programError(result.error) };
    } finally {
      // The place goes straight to the next call waiting, so that no new one takes it in between.
      const next = this.#waiting.shift();
      if (next) next();
      else this.#running--;
    }
  };

  /** Waits until fewer than `max_concurrent` of the program's calls run (or one hands its place over). */
  async #turn(): Promise<void> {
    if (this.#running < this.#bounds.max_concurrent) {
      this.#running++;
      return;
    }
    await new Promise<void>((resolve) => this.#waiting.push(resolve));
  }

  /** " Did you mean tools.a.bC (a.b-c)?", among the tools the program may call; empty when none is close. */
  #hint(id: string): string {
    this.#callable ??= this.#caller.callable().map((tool) => tool.spec.id);
    const close = suggest(id, this.#callable);
    return close.length > 0 ? ` Did you mean ${close.map((c) => `tools.${jsPath(c).join('.')} (${c})`).join(' or ')}?` : '';
  }

  #refused(code: 'UNKNOWN_TOOL' | 'INVALID_INPUT', message: string): ProgramAnswer {
    return { ok: false, error: { code, message, stage: 'validation', retryable: false, tool: 'code.run' } };
  }
}
