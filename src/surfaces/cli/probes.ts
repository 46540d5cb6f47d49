import type { Check } from '../../probe.js';

export type { Check } from '../../probe.js';

export function checkNode(version = process.versions.node): Check {
  const [major = 0, minor = 0] = version.split('.').map(Number);
  // package.json "engines": >=20.5 (the permission model flags the JS runner uses).
  const ok = major > 20 || (major === 20 && minor >= 5);
  return {
    name: 'node',
    ok,
    detail: `v${version}${ok ? ' (≥ 20.5)' : ' (too old)'}`,
    ...(ok ? {} : { fix: 'install Node 20.5 or later (https://nodejs.org)' }),
  };
}
