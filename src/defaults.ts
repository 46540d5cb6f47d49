// What the package puts in an engine unless told otherwise: the default runners and the remote
// transport. The one module of src/ that knows them: the engine, the CLI and the installer get the
// catalog here, and load the transport and the worker through the loaders here. (install.ts still
// calls the JS and Python runners' installers by name.)

export { DEFAULT_CATALOG, DEFAULT_RUNNERS, runnerCatalog } from '../runners/index.js';
export type { RemoteStatus } from '../runners/remote/client.js';

/** The remote transport, loaded only by an engine whose arium.json sets `remote`: the NATS client costs the others its import. */
export const loadRemote = () => import('../runners/remote/setup.js');

/** An engine's open remote transport. */
export type RemoteTransport = Awaited<ReturnType<Awaited<ReturnType<typeof loadRemote>>['openRemote']>>;

/** What `arium worker` runs, loaded only by that command: the NATS client and the worker cost every other command their import. */
export async function loadWorker() {
  const settings = await import('../runners/remote/settings.js');
  const worker = await import('../runners/remote/worker.js');
  const connect = await import('../runners/remote/connect.js');
  return {
    checkSettings: settings.checkSettings,
    resolveAuth: settings.resolveAuth,
    RemoteConfigError: settings.RemoteConfigError,
    startWorker: worker.startWorker,
    HOSTABLE_RUNNERS: worker.HOSTABLE_RUNNERS,
    hostableList: worker.hostableList,
    NatsUnreachable: connect.NatsUnreachable,
  };
}
