import type { Engine } from 'arium';
import type { AgentRun } from './agent-run.mjs';

export type { AgentRun };

/** Asks the model, runs its tool calls through `engine`, feeds the results back, until it answers. */
export function runAgent(options: {
  prompt: string;
  engine: Engine;
  apiKey: string;
  baseUrl?: string;
  model?: string;
  maxSteps?: number;
  log?: (line: string) => void;
}): Promise<AgentRun>;
