// The public API. Each export is named on purpose: adding a line here is an API decision, and
// test/index.exports.test.ts pins the list.

export type { ProjectConfig } from './config.js';
export { PROJECT_CONFIG_SCHEMA } from './config.js';
export type { CallOptions } from './dispatcher.js';
export type { Engine, EngineOptions, EngineStatus } from './engine.js';
export { createEngine, EngineConfigError } from './engine.js';
export type { ErrorCode, ErrorInfo, Stage } from './errors.js';
export { ERROR_CODES, isRetryable, ToolFailure } from './errors.js';
export type {
  EngineEvent,
  EngineEventMap,
  RegistryChangeEvent,
  RegistryProblem,
  SecurityEvent,
  ToolErrorEvent,
  ToolInvocationEvent,
  ToolResultEvent,
  VfsChangeSummary,
} from './events.js';
export type { ExportedTools, ExportOptions, Vendor } from './export.js';
export { callExported, exportTools, resolveCall, VENDORS, vendorName } from './export.js';
export type { Gateway, GatewayOptions } from './http/gateway.js';
export { createGateway } from './http/gateway.js';
export type { CallLimits, Policy, RegistryLimits, VfsQuota } from './limits.js';
export { DEFAULT_POLICY, DEFAULT_REGISTRY_LIMITS, DEFAULT_VFS_QUOTA } from './limits.js';
export type { SurfaceProfile } from './mcp/profile.js';
export type { AriumMcpServer, McpServerOptions } from './mcp/server.js';
export { createMcpServer } from './mcp/server.js';
export type { PermissionName } from './permissions.js';
export { DEFAULT_GRANTS, PERMISSION_NAMES } from './permissions.js';
export { TOOL_META_SCHEMA } from './registry/meta-schema.js';
export type { ErrResult, LogLine, OkResult, ResultMeta, ToolResult } from './result.js';
export type { RunContext, Runner, RunnerStatus } from './runner.js';
export { ProjectLockedError } from './store/lock.js';
export type { RunnerName, ToolInfo, ToolSpec } from './tool.js';
export { RUNNER_NAMES } from './tool.js';
export type { ToolVfs } from './tool-vfs.js';
export type { GcReport } from './vfs/gc.js';
export type { DiffOptions, DiffResult, HostVfs, RestoreResult } from './vfs/history.js';
export type { RecoveryReport, SnapshotInfo } from './vfs/state.js';
export { StateCorruptError } from './vfs/state.js';
export type { TransferReport } from './vfs/transfer.js';
export type { ChangeStatus, FileChange } from './vfs/tree-diff.js';
export type { VfsEntry, VfsStat } from './vfs/vfs.js';
export { Vfs } from './vfs/vfs.js';
