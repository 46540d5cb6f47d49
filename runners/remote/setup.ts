import type { EventBus } from '../../src/events.js';
import type { RemoteConfig } from '../../src/remote-config.js';
import type { Runner } from '../../src/runner.js';
import type { RunnerCatalog } from '../../src/runner-catalog.js';
import { DEFAULT_CATALOG } from '../index.js';
import { RemoteClient } from './client.js';
import { RoutedRunner, toolPattern } from './routing.js';
import { engineSettings, RemoteConfigError } from './settings.js';
import { hostableList } from './worker.js';

/**
 * The engine's remote runners, from arium.json's `remote`: connects to NATS and puts a RoutedRunner
 * in place of each runner some of whose tools run on workers. Loaded only when `remote` is set.
 * `catalog` is the engine's: the runners that can run on a worker are those it says so of.
 */
export async function openRemote(
  config: RemoteConfig,
  runners: Map<string, Runner>,
  bus: EventBus,
  projectDir: string,
  env: Readonly<Record<string, string | undefined>> = process.env,
  catalog: RunnerCatalog = DEFAULT_CATALOG,
): Promise<RemoteClient> {
  const names = config.runners ?? [];
  const hostable = catalog.hostable();
  for (const name of names) {
    if (!hostable.includes(name)) {
      throw new RemoteConfigError(`arium.json remote.runners: "${name}" cannot run remotely; workers host ${hostableList(catalog)}`);
    }
  }
  if (names.length === 0 && (config.tools ?? []).length === 0) {
    throw new RemoteConfigError('arium.json remote: name the runners (remote.runners) or tools (remote.tools) that run on workers');
  }
  const settings = engineSettings(config, env, projectDir);
  const client = await RemoteClient.open(settings, {
    ...(config.keepalive_ms ? { keepaliveMs: config.keepalive_ms } : {}),
    ...(config.accept_ms ? { acceptMs: config.accept_ms } : {}),
  });
  const patterns = (config.tools ?? []).map(toolPattern);
  for (const name of hostable) {
    const local = runners.get(name);
    if (!local || (!names.includes(name) && patterns.length === 0)) continue;
    runners.set(name, new RoutedRunner(local, client, names.includes(name), patterns));
  }
  if (config.events === true) bus.addSink((event) => client.publishEvent(event));
  return client;
}
