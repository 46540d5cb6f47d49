// The public API. Each export is named on purpose: adding a line here is an API decision, and
// test/index.exports.test.ts pins the list.

import { projectConfigSchema } from './config.js';
import { DEFAULT_CATALOG } from './defaults.js';
import type { InstallOptions, InstallReport } from './install.js';
import { toolMetaSchema } from './registry/meta-schema.js';
import type { Gateway, GatewayOptions } from './surfaces/http/gateway.js';

export type { ApprovalAnswer, ApprovalDecision, PendingApproval } from './approvals/gate.js';
export type { ApprovalCondition, ApprovalRule, ApprovalsConfig, MatchedRule } from './approvals/rules.js';
export { jsPath, toolId } from './code-mode/names.js';
export type { ProjectConfig } from './config.js';
export type { ConnectOptions, ProjectClient } from './daemon/connect.js';
export { connect } from './daemon/connect.js';
export type { DaemonLink } from './daemon/link.js';
export { DaemonError } from './daemon/link.js';
export { DEFAULT_RUNNERS } from './defaults.js';
export type { CallOptions, CallTarget, CapabilityRequest } from './dispatcher.js';
export type { Engine, EngineOptions, EngineStatus } from './engine.js';
export { createEngine, EngineConfigError } from './engine.js';
export type { ErrorCode, ErrorInfo, Stage } from './errors.js';
export { ERROR_CODES, isRetryable, ToolFailure } from './errors.js';
export type {
  ApprovalRequestedEvent,
  ApprovalResolvedEvent,
  EngineEvent,
  EngineEventMap,
  RegistryChangeEvent,
  RegistryProblem,
  SecurityEvent,
  SkillsChangeEvent,
  ToolErrorEvent,
  ToolInvocationEvent,
  ToolResultEvent,
  VfsChangeSummary,
} from './events.js';
export type { CallLimits, GatewayLimits, Policy, RegistryLimits, VfsQuota } from './limits.js';
export { DEFAULT_APPROVALS, DEFAULT_POLICY, DEFAULT_REGISTRY_LIMITS, DEFAULT_VFS_QUOTA, SKILL_LIMITS } from './limits.js';
export type { PermissionName } from './permissions.js';
export { DEFAULT_GRANTS, PERMISSION_NAMES } from './permissions.js';
export type { Awaitable, ProjectCallOptions, ProjectDiffOptions, ProjectEvents, ProjectHandle, ToolDescription } from './project-api.js';
export type { ErrResult, LogLine, OkResult, ResultMeta, ToolResult } from './result.js';
export type { Check, RunContext, Runner, RunnerDefinition, RunnerSetup, RunnerStatus } from './runner.js';
export { SkillArgumentError } from './skills/render.js';
export type { SkillArgument, SkillInfo } from './skills/skill.js';
export { FileStateStore } from './store/file-store.js';
export type { JetStreamStoreOptions } from './store/jetstream-store.js';
export { JetStreamStore, StoreFencedError } from './store/jetstream-store.js';
export { ProjectLockedError } from './store/lock.js';
export { MemoryStateStore } from './store/memory-store.js';
export type { JournalPort, LiveRef, StateStore } from './store/port.js';
export type { ExportedTools, ExportOptions, Vendor } from './surfaces/export.js';
export { callExported, exportTools, resolveCall, VENDORS, vendorName } from './surfaces/export.js';
export type { Gateway, GatewayOptions } from './surfaces/http/gateway.js';
export type { SurfaceProfile } from './surfaces/mcp/profile.js';
export type { AriumMcpServer, McpServerOptions } from './surfaces/mcp/server.js';

/**
 * The HTTP gateway (also `arium/http`). Loaded when first asked for: Fastify and the MCP SDK behind it
 * took more than half of the time to import this module, which every CLI command and every host that
 * only calls tools paid. `createMcpServer` is in `arium/mcp` for the same reason.
 */
export async function createGateway(options: GatewayOptions): Promise<Gateway> {
  const { createGateway: create } = await import('./surfaces/http/gateway.js');
  return create(options);
}

/** Installs a project's pinned dependencies, as `arium install` does (loaded when first asked for). */
export async function installProject(options?: InstallOptions): Promise<InstallReport> {
  const { installProject: install } = await import('./install.js');
  return install(options);
}
export type { InstallOptions, InstallReport } from './install.js';
export type { RunnerName, ToolInfo, ToolSpec } from './tool.js';
export type { ToolVfs } from './tool-vfs.js';
export type { ChangeLogLimits } from './vfs/change-log.js';
export type { GcReport } from './vfs/gc.js';
export type { DiffOptions, DiffResult, HostVfs, RestoreResult, TreeReader } from './vfs/history.js';
export type { RecoveryReport, SnapshotInfo } from './vfs/state.js';
export { StateCorruptError } from './vfs/state.js';
export type { TransferReport } from './vfs/transfer.js';
export type { ChangeStatus, FileChange, TreeDiff } from './vfs/tree-diff.js';
export type { VfsEntry, VfsStat } from './vfs/vfs.js';
export { Vfs } from './vfs/vfs.js';

/** The schema of a tool definition for the default runners (published as `schema/tool.schema.json`). */
export const TOOL_META_SCHEMA = toolMetaSchema(DEFAULT_CATALOG);
/** The schema of arium.json for the default runners (published as `schema/project.schema.json`). */
export const PROJECT_CONFIG_SCHEMA = projectConfigSchema(DEFAULT_CATALOG);
/** The names of the default runners. */
export const RUNNER_NAMES: readonly string[] = Object.freeze(DEFAULT_CATALOG.names());
