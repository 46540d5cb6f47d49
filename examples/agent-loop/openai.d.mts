import type { Engine } from 'arium';
import type OpenAI from 'openai';
import type { AgentRun } from './agent-run.mjs';

export type { AgentRun };

/** Asks the model, runs its tool calls through `engine`, feeds the results back, until it answers. */
export function runAgent(options: {
  prompt: string;
  engine: Engine;
  client: OpenAI;
  model?: string;
  /** OpenAI strict mode for every tool whose schema it can take. */
  strict?: boolean;
  maxSteps?: number;
  log?: (line: string) => void;
}): Promise<AgentRun>;
