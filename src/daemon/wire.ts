/**
 * What a daemon's clients and its gateway agree on besides the routes. Built-ins only: thin clients load it.
 */

/** Names the client (`cli`, `connect:<name>`): the caller of its calls, over the daemon's socket only. */
export const CLIENT_HEADER = 'x-arium-client';

/**
 * Asked for with `Accept`, a run's answer is the engine's own result (`{ ok, data | error, meta }`, with
 * the logs, the runner and the error's tool) instead of the gateway's envelope, so that `connect()`
 * gives its callers what `engine.call` gives.
 */
export const TOOL_RESULT_TYPE = 'application/vnd.arium.result+json';
