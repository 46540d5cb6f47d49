import type { NatsConnection, NodeConnectionOptions } from '@nats-io/transport-node';
import { type NatsSettings, RemoteConfigError } from './settings.js';

/** No NATS server answered at the address (refused, timed out, no route); unlike refused credentials, worth trying again. */
export class NatsUnreachable extends RemoteConfigError {
  override readonly name = 'NatsUnreachable';
}

/** The NATS client module, loaded only by an engine or worker that uses it (it costs every other start ~30 ms). */
export type NatsModule = typeof import('@nats-io/transport-node');

let loaded: Promise<NatsModule> | null = null;

export function natsModule(): Promise<NatsModule> {
  loaded ??= import('@nats-io/transport-node');
  return loaded;
}

/**
 * Connects with the settings' credentials and TLS. The client reconnects by itself for ever (a worker
 * or engine outlives a server restart), every `reconnectMs`; pings every few seconds notice a server
 * that went away without closing the socket. A refused login is an error that says so.
 */
export async function connectNats(settings: NatsSettings, name: string, reconnectMs = 250): Promise<NatsConnection> {
  const nats = await natsModule();
  const options: NodeConnectionOptions = {
    servers: settings.servers,
    name,
    reconnect: true,
    maxReconnectAttempts: -1,
    reconnectTimeWait: reconnectMs,
    reconnectJitter: 50,
    pingInterval: 5_000,
    maxPingOut: 2,
    timeout: 5_000,
  };
  const auth = settings.auth;
  if (auth && 'user' in auth) Object.assign(options, { user: auth.user, pass: auth.pass });
  else if (auth && 'token' in auth) options.token = auth.token;
  else if (auth && 'nkeySeed' in auth) options.authenticator = nats.nkeyAuthenticator(auth.nkeySeed);
  if (settings.tls) {
    options.tls = {
      ...(settings.tls.ca_file ? { caFile: settings.tls.ca_file } : {}),
      ...(settings.tls.cert_file ? { certFile: settings.tls.cert_file } : {}),
      ...(settings.tls.key_file ? { keyFile: settings.tls.key_file } : {}),
    };
  }
  try {
    return await nats.connect(options);
  } catch (error) {
    const text = String((error as Error)?.message ?? error);
    const where = settings.servers.join(', ');
    if (/authoriz|authentic/i.test(text) || (error as Error)?.name === 'AuthorizationError') {
      throw new RemoteConfigError(`The NATS server at ${where} refused the credentials (${text}); check the user/password, token or nkey`);
    }
    // A server that answers but whose certificate is not trusted (or that wants TLS, or does not) is
    // set up differently from this side: trying again changes nothing.
    const tlsError = /certificate|self[- ]signed|TLS|SSL|handshake|wrong version number/i.test(text + String((error as Error)?.cause ?? ''));
    if (tlsError) {
      throw new RemoteConfigError(
        `TLS with the NATS server at ${where} failed (${text}); check remote.tls (ca_file, cert_file, key_file) against the server's TLS settings`,
        { cause: error },
      );
    }
    throw new NatsUnreachable(`Could not connect to the NATS server at ${where}: ${text}`, { cause: error });
  }
}
