import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConnectionDropped, DroppingRequests } from '../runners/remote/requests.js';
import { type NatsServer, startNats } from './support/nats.js';

/**
 * A worker's requests to the engine across a NATS restart, on a real nats-server: a request whose
 * answer was lost with the server fails when the connection drops, not when its timeout (30 s for a
 * worker's fetch) runs out; requests made after the reconnect are answered.
 */

let nats: NatsServer;
let client: NatsConnection;
let responder: NatsConnection;

beforeAll(async () => {
  nats = await startNats();
  const options = { servers: nats.url, reconnect: true, maxReconnectAttempts: -1, reconnectTimeWait: 100 };
  client = await connect(options);
  responder = await connect(options);
});
afterAll(async () => {
  await client?.close();
  await responder?.close();
  await nats?.stop();
});

describe('a worker’s requests across a NATS restart', () => {
  it('fail with ConnectionDropped as the connection drops, and work again after the reconnect', async () => {
    // One subject that never answers (the request is lost with the server) and one that does.
    responder.subscribe('lost', { callback: () => {} });
    responder.subscribe('echo', {
      callback: (_error, msg) => {
        msg.respond(msg.data);
      },
    });
    await responder.flush();
    const requests = new DroppingRequests(client);
    const started = performance.now();
    const pending = requests.request('lost', new TextEncoder().encode('x'), 120_000).then(
      () => 'answered',
      (error: unknown) => error,
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
    await nats.stop();
    const outcome = await pending;
    expect(outcome).toBeInstanceOf(ConnectionDropped);
    // Far from the request's own timeout: it ended with the connection.
    expect(performance.now() - started).toBeLessThan(60_000);
    await nats.start();
    for (let i = 0; ; i++) {
      try {
        const msg = await requests.request('echo', new TextEncoder().encode('back'), 2_000);
        expect(new TextDecoder().decode(msg.data)).toBe('back');
        break;
      } catch (error) {
        // Until both clients have reconnected and the responder's subscription is back.
        if (i > 50) throw error;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  }, 90_000);
});
