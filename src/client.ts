// `arium/client`: the library's way to a workspace's daemon, without loading the engine. A process
// that only talks to a daemon imports this; `arium` exports the same names besides the engine's.

export type { ConnectOptions, ProjectClient } from './daemon/connect.js';
export { connect } from './daemon/connect.js';
export type { DaemonLink } from './daemon/link.js';
export { DaemonError } from './daemon/link.js';
export type { ErrorCode, ErrorInfo, Stage } from './errors.js';
export { isRetryable, ToolFailure } from './errors.js';
export type { EngineEvent, EngineEventMap } from './events.js';
export type { Awaitable, ProjectCallOptions, ProjectDiffOptions, ProjectEvents, ProjectHandle, ToolDescription } from './project-api.js';
export type { ErrResult, OkResult, ResultMeta, ToolResult } from './result.js';
