import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  ErrorCode,
  GetPromptRequestSchema,
  type GetPromptResult,
  ListPromptsRequestSchema,
  McpError,
  type Prompt,
} from '@modelcontextprotocol/sdk/types.js';
import type { Engine } from '../../engine.js';
import { SkillArgumentError } from '../../skills/render.js';
import type { SkillInfo } from '../../skills/skill.js';

/** Whether a surface shows a skill: only when it offers every tool the skill uses (else the skill would send a model after a tool it cannot call). */
export function offersSkill(skill: SkillInfo, offered: (id: string) => boolean): boolean {
  return skill.tools.every(offered);
}

function prompt(skill: SkillInfo): Prompt {
  return {
    name: skill.name,
    description: skill.description,
    arguments: skill.arguments.map((a) => ({
      name: a.name,
      required: a.required,
      ...(a.description !== undefined ? { description: a.description } : {}),
    })),
  };
}

/**
 * The project's skills as MCP prompts: `prompts/list`, and `prompts/get` with the skill's body, its
 * arguments put in (src/skills/render.ts), as one user message. A skill the profile hides is as
 * unknown as one that does not exist. Returns what stops the list_changed notifications.
 */
export function servePrompts(server: Server, engine: Engine, offered: (id: string) => boolean): () => void {
  const shown = () => engine.skills().filter((s) => offersSkill(s, offered));
  server.setRequestHandler(ListPromptsRequestSchema, () => ({ prompts: shown().map(prompt) }));
  server.setRequestHandler(GetPromptRequestSchema, (request): GetPromptResult => {
    const { name, arguments: args } = request.params;
    const skill = engine.skill(name);
    const text = skill && offersSkill(skill, offered) ? render(engine, name, args ?? {}) : undefined;
    if (skill === undefined || text === undefined) {
      throw new McpError(ErrorCode.InvalidParams, `No prompt "${name}" is offered here; prompts/list lists them`);
    }
    return { description: skill.description, messages: [{ role: 'user', content: { type: 'text', text } }] };
  });
  const onSkills = () => {
    void server.sendPromptListChanged().catch(() => {});
  };
  engine.events.on('skills', onSkills);
  return () => engine.events.off('skills', onSkills);
}

function render(engine: Engine, name: string, args: Record<string, string>): string | undefined {
  try {
    return engine.renderSkill(name, args);
  } catch (error) {
    if (error instanceof SkillArgumentError) throw new McpError(ErrorCode.InvalidParams, error.message);
    throw error;
  }
}
