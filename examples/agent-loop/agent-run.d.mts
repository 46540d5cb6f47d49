/** What either agent loop returns: the model's answer, how many steps it took, and the conversation. */
export interface AgentRun {
  answer: string;
  steps: number;
  messages: unknown[];
}
