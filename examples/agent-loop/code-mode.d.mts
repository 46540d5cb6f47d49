import type { Engine, ToolInfo } from 'arium';
import type OpenAI from 'openai';
import type { AgentRun } from './agent-run.mjs';

export type { AgentRun };

/** The system prompt of code mode: how to write a program, and the tools `tools` holds. */
export function codeModePrompt(tools: readonly ToolInfo[]): string;

/** The OpenAI loop with code.run as the model's one tool. */
export function runAgent(options: {
  prompt: string;
  engine: Engine;
  client: OpenAI;
  model?: string;
  maxSteps?: number;
  log?: (line: string) => void;
}): Promise<AgentRun>;
