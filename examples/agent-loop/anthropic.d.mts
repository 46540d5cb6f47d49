import type Anthropic from '@anthropic-ai/sdk';
import type { Engine } from 'arium';

export interface AgentRun {
  answer: string;
  steps: number;
  messages: unknown[];
}

/** Asks the model, runs its tool calls through `engine`, feeds the results back, until it answers. */
export function runAgent(options: {
  prompt: string;
  engine: Engine;
  client: Anthropic;
  model?: string;
  maxSteps?: number;
  log?: (line: string) => void;
}): Promise<AgentRun>;
