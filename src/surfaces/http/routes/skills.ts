import type { FastifyInstance } from 'fastify';
import { offersSkill } from '../../mcp/prompts.js';
import { errorEnvelope } from '../envelope.js';
import { ERROR_RESPONSES, send } from '../replies.js';
import { servedOf } from './context.js';

/**
 * The project's skills (`skills/<name>/SKILL.md`): listed, and each read with its body. A skill that
 * uses a tool this gateway's profile does not offer is not shown, as the tool is not.
 */
export function skillRoutes(scope: FastifyInstance): void {
  scope.get(
    '/v1/skills',
    {
      schema: {
        summary: 'The skills this gateway offers (those whose tools it offers), and the skill files that did not load',
        response: { 200: { type: 'object', properties: { skills: { type: 'array' }, problems: { type: 'array' } } } },
      },
    },
    async (request) => {
      const { engine, visible } = servedOf(request);
      return {
        skills: engine.skills().filter((s) => offersSkill(s, visible)),
        problems: engine.problems().filter((p) => p.file.startsWith('skills/')),
      };
    },
  );

  scope.get(
    '/v1/skills/:name',
    {
      schema: {
        summary: 'One skill, with its body (the instructions, {{argument}} placeholders as written)',
        params: { type: 'object', properties: { name: { type: 'string' } } },
        response: { 200: { type: 'object', additionalProperties: true }, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const { name } = request.params as { name: string };
      const { engine, visible } = servedOf(request);
      const skill = engine.skill(name);
      if (!skill || !offersSkill(skill, visible)) {
        return send(
          reply,
          404,
          errorEnvelope('NOT_FOUND', `No skill "${name}" is offered here; GET /v1/skills lists them`, { details: { skill: name } }),
        );
      }
      return skill;
    },
  );
}
