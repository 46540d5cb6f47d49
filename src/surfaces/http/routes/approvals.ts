import type { FastifyInstance } from 'fastify';
import { ToolFailure } from '../../../errors.js';
import { ERROR_RESPONSES } from '../replies.js';
import { servedOf } from './context.js';

/** The calls waiting for a person, and the answers to them. */

const APPROVAL_BODY_SCHEMA = {
  type: 'object',
  required: ['decision', 'by'],
  additionalProperties: false,
  properties: {
    decision: { enum: ['approve', 'deny'] },
    by: { type: 'string', minLength: 1, maxLength: 200, description: 'Who answers, for the events and the audit log' },
    reason: { type: 'string', maxLength: 2000, description: 'Why (shown in the denied call’s error)' },
  },
} as const;

export function approvalRoutes(scope: FastifyInstance): void {
  scope.get(
    '/v1/approvals',
    { schema: { summary: 'Calls waiting for a person’s approval (oldest first) that this gateway’s profile may see' } },
    async (request) => {
      const { engine, access } = servedOf(request);
      return { approvals: engine.approvals().filter((p) => access.seesCall(p.tool)) };
    },
  );

  scope.post(
    '/v1/approvals/:run_id',
    {
      schema: {
        summary: 'Approve or deny a waiting call',
        params: { type: 'object', properties: { run_id: { type: 'string', maxLength: 200 } } },
        body: APPROVAL_BODY_SCHEMA,
        response: { 200: { type: 'object', additionalProperties: true }, ...ERROR_RESPONSES },
      },
    },
    async (request) => {
      const { run_id: runId } = request.params as { run_id: string };
      const body = request.body as { decision: 'approve' | 'deny'; by: string; reason?: string };
      const { engine, access } = servedOf(request);
      const waiting = engine.approvals().find((p) => p.run_id === runId);
      // An approval this gateway may not see is as unknown here as one that does not exist.
      if (waiting && !access.seesCall(waiting.tool)) {
        throw new ToolFailure('validation', 'NOT_FOUND', `No approval is pending for run ${runId}; GET /v1/approvals lists them`, {
          details: { run_id: runId },
        });
      }
      const answer = { by: body.by, ...(body.reason !== undefined ? { reason: body.reason } : {}) };
      return body.decision === 'approve' ? engine.approve(runId, answer) : engine.deny(runId, answer);
    },
  );
}
