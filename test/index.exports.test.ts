import { describe, expect, it } from 'vitest';
import * as api from '../src/index.js';

describe('public API', () => {
  it('exports exactly the documented runtime names', () => {
    // Adding or removing a name here is an API decision: update README's Library API with it.
    expect(Object.keys(api).sort()).toEqual(
      [
        'DEFAULT_APPROVALS',
        'DEFAULT_GRANTS',
        'DEFAULT_POLICY',
        'DEFAULT_REGISTRY_LIMITS',
        'DEFAULT_RUNNERS',
        'DEFAULT_VFS_QUOTA',
        'ERROR_CODES',
        'FileStateStore',
        'JetStreamStore',
        'StoreFencedError',
        'MemoryStateStore',
        'EngineConfigError',
        'PERMISSION_NAMES',
        'PROJECT_CONFIG_SCHEMA',
        'ProjectLockedError',
        'StateCorruptError',
        'RUNNER_NAMES',
        'SKILL_LIMITS',
        'SkillArgumentError',
        'TOOL_META_SCHEMA',
        'ToolFailure',
        'VENDORS',
        'Vfs',
        'callExported',
        'connect',
        'createEngine',
        'DaemonError',
        'createGateway',
        'exportTools',
        'installProject',
        'isRetryable',
        'jsPath',
        'resolveCall',
        'toolId',
        'vendorName',
      ].sort(),
    );
  });
});
