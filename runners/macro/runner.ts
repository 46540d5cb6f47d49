import { type ErrorInfo, ToolFailure } from '../../src/errors.js';
import type { RunContext, Runner, RunnerStatus } from '../../src/runner.js';
import type { StepSpec } from '../../src/tool.js';
import { fill, holds, type MacroDocument, TemplateError } from './template.js';

/**
 * Runs a macro: its steps one after the other, each a full call of another tool in the macro call's
 * transaction (`ctx.steps`), so the same input and VFS make the same calls in the same order, and a
 * failing step leaves nothing behind. A failure takes the step's code; `details` names the step.
 */
export class MacroRunner implements Runner {
  readonly name = 'macro' as const;
  // The deadline of a macro covers all its steps; the executor enforces it only for interruptible runners.
  readonly interruptible = true;
  readonly capabilities = ['steps'] as const;

  async run(ctx: RunContext): Promise<unknown> {
    const call = ctx.steps;
    if (!call)
      throw new ToolFailure('execution', 'MISCONFIGURED', `${ctx.tool.spec.id} is a macro, but this engine gave its runner no way to call steps`);
    const steps: readonly StepSpec[] = ctx.tool.spec.steps ?? [];
    const doc: MacroDocument = { input: ctx.input, steps: [] };
    for (const [index, step] of steps.entries()) {
      if (ctx.signal.aborted) throw new ToolFailure('execution', 'CANCELLED', `The call of ${ctx.tool.spec.id} ended before step ${index}`);
      if (step.when !== undefined && !holds(step.when, doc)) {
        doc.steps.push({ output: null });
        continue;
      }
      let input: unknown;
      try {
        input = fill(step.input ?? {}, doc, `/steps/${index}/input`);
      } catch (error) {
        if (!(error instanceof TemplateError)) throw error;
        throw stepFailure(ctx.tool.spec.id, index, step.tool, {
          type: 'ToolError',
          tool: step.tool,
          stage: 'validation',
          code: 'INVALID_INPUT',
          message: error.message,
          retryable: false,
          details: { pointer: error.pointer, at: error.at },
        });
      }
      const result = await call({ index, tool: step.tool, input });
      if (!result.ok) throw stepFailure(ctx.tool.spec.id, index, step.tool, result.error);
      doc.steps.push({ output: result.data });
    }
    if (ctx.tool.spec.output === undefined) return doc.steps.at(-1)?.output ?? null;
    try {
      return fill(ctx.tool.spec.output, doc, '/output');
    } catch (error) {
      if (!(error instanceof TemplateError)) throw error;
      throw new ToolFailure('execution', 'INVALID_OUTPUT', `Output template of ${ctx.tool.spec.id}: ${error.message}`, {
        details: { pointer: error.pointer, at: error.at },
      });
    }
  }

  async status(): Promise<RunnerStatus> {
    return { available: true };
  }

  async close(): Promise<void> {}
}

/** The macro's failure for a failed step: the step's stage and code, and the step's own error in `details`. */
function stepFailure(macro: string, index: number, tool: string, error: ErrorInfo): ToolFailure {
  return new ToolFailure(error.stage, error.code, `Step ${index} (${tool}) of ${macro} failed: ${error.message}`, {
    details: { step: index, tool, error },
  });
}
