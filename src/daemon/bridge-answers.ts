/**
 * What the MCP bridge answers the client itself, when the daemon cannot: a request a stopped daemon
 * took with it, and a request the daemon refused over HTTP before any JSON-RPC was spoken.
 */
import type { JSONRPCMessage, RequestId } from '@modelcontextprotocol/sdk/types.js';

/** JSON-RPC's "server error" range: the SDK's ConnectionClosed, for a request the stopped engine took with it. */
export const CONNECTION_CLOSED = -32000;

/** The error that settles a request a stopped engine took with it. */
function stoppedMessage(method: string): string {
  const what = method === 'tools/call' ? 'call' : `${method} request`;
  return (
    `The Arium engine stopped while this ${what} was in flight (its daemon exited or closed the connection): ` +
    'whether it ran and committed is unknown. It is retryable: check what it changes, then send it again; ' +
    'the next request starts a new engine.'
  );
}

export function stoppedAnswer(id: RequestId, method: string): JSONRPCMessage {
  const error = {
    code: 'UNAVAILABLE',
    stage: 'transport',
    message: stoppedMessage(method),
    retryable: true,
    details: { committed: 'unknown' },
  };
  // A tool's failure is a result with isError, as every other failed call is, so the model sees it.
  if (method === 'tools/call') {
    return {
      jsonrpc: '2.0',
      id,
      result: { isError: true, content: [{ type: 'text', text: JSON.stringify({ error }) }], structuredContent: { error } },
    };
  }
  return { jsonrpc: '2.0', id, error: { code: CONNECTION_CLOSED, message: error.message, data: error } };
}

/** What a refused HTTP request said: the JSON-RPC error's or the gateway envelope's message, else the text. */
export function refusalText(error: Error): string {
  const text = error.message.replace(/^Streamable HTTP error: (Error POSTing to endpoint: )?/, '');
  try {
    const body = JSON.parse(text.slice(text.indexOf('{'))) as { error?: { message?: string; code?: string } };
    if (body.error?.message) return `${body.error.code ? `${body.error.code}: ` : ''}${body.error.message}`;
  } catch {}
  return text;
}
