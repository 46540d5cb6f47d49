import type { Msg, NatsConnection } from '@nats-io/transport-node';

/** Thrown by `DroppingRequests.request` when the connection dropped while it waited. */
export class ConnectionDropped extends Error {
  override readonly name = 'ConnectionDropped';
}

/**
 * A NATS client's requests, failed as soon as its connection drops. A request in flight when the
 * server goes away is lost with it, and nats.js waits out the whole timeout for an answer that cannot
 * come: 30 s for a worker's fetch of a tool, during which every call sharing that fetch waited too
 * (measured by the soak benchmark across a NATS restart). Failing it at once lets the call fail
 * `UNAVAILABLE` (the engine has failed its side of it already) and lets calls that shared the fetch do
 * it again through their own inboxes.
 */
export class DroppingRequests {
  readonly #nc: NatsConnection;
  #dropped: Promise<typeof DROPPED>;
  #drop: () => void = () => {};

  constructor(nc: NatsConnection) {
    this.#nc = nc;
    this.#dropped = this.#next();
    void (async () => {
      for await (const status of nc.status()) {
        if (status.type === 'disconnect') {
          const drop = this.#drop;
          this.#dropped = this.#next();
          drop();
        }
      }
    })();
  }

  #next(): Promise<typeof DROPPED> {
    return new Promise((resolve) => {
      this.#drop = () => resolve(DROPPED);
    });
  }

  /** `nc.request`, rejected with `ConnectionDropped` when the connection drops before the answer. */
  async request(subject: string, data: Uint8Array, timeout: number): Promise<Msg> {
    const answer = await Promise.race([this.#nc.request(subject, data, { timeout }), this.#dropped]);
    if (answer === DROPPED) throw new ConnectionDropped('the connection to the NATS server dropped before the engine answered');
    return answer;
  }
}

const DROPPED = Symbol('dropped');
