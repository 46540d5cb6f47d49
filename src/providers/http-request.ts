/**
 * One HTTP exchange with a worker, bounded: the answer's body is read up to a byte limit (a declared
 * `content-length` past it is refused before a byte is read), and a connection that breaks at any point
 * is told apart from one never made, since the first may have run the tool and the second did not.
 */
import { type Agent, request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Answer } from './http-envelope.js';

/** The answer was larger than the limit; reading stopped there. */
export class AnswerTooLarge extends Error {
  override readonly name = 'AnswerTooLarge';
  constructor(readonly limit: number) {
    super(`the answer is over ${limit} bytes`);
  }
}

/** The connection failed; `reached` tells whether the request had been sent whole before it did. */
export class ExchangeFailed extends Error {
  override readonly name = 'ExchangeFailed';
  constructor(
    message: string,
    readonly reached: boolean,
    options: { cause: unknown },
  ) {
    super(message, options);
  }
}

export interface Exchange {
  method: 'GET' | 'POST';
  url: URL;
  headers: Record<string, string>;
  body?: string;
  agent: Agent;
  signal: AbortSignal;
  maxBytes: number;
}

function describe(error: unknown): string {
  const code = (error as NodeJS.ErrnoException).code;
  const message = error instanceof Error ? error.message : String(error);
  return code && !message.includes(code) ? `${code}: ${message}` : message;
}

function readBody(res: IncomingMessage, maxBytes: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const declared = Number(res.headers['content-length']);
    if (Number.isFinite(declared) && declared > maxBytes) {
      res.destroy();
      return reject(new AnswerTooLarge(maxBytes));
    }
    const chunks: Buffer[] = [];
    let size = 0;
    res.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBytes) {
        res.destroy();
        reject(new AnswerTooLarge(maxBytes));
        return;
      }
      chunks.push(chunk);
    });
    res.on('end', () => resolve(Buffer.concat(chunks, size)));
    res.on('error', (error) =>
      reject(new ExchangeFailed(`the connection broke while the answer was read (${describe(error)})`, true, { cause: error })),
    );
    // A worker that dies after its headers leaves the body unfinished: 'aborted' or 'close' without 'end'.
    res.on('close', () => {
      if (!res.complete) reject(new ExchangeFailed('the connection closed before the answer was complete', true, { cause: undefined }));
    });
  });
}

/** Sends one request and reads the answer whole; rejects with the signal's reason when it aborts. */
export function exchange(ex: Exchange): Promise<Answer> {
  return new Promise<Answer>((resolve, reject) => {
    const send = ex.url.protocol === 'https:' ? httpsRequest : httpRequest;
    let sent = false;
    const req = send(ex.url, {
      method: ex.method,
      headers: ex.body === undefined ? ex.headers : { ...ex.headers, 'content-length': String(Buffer.byteLength(ex.body)) },
      agent: ex.agent,
      signal: ex.signal,
    });
    req.on('error', (error) => {
      if (ex.signal.aborted) return reject(ex.signal.reason);
      reject(new ExchangeFailed(sent ? `the connection broke before an answer came (${describe(error)})` : describe(error), sent, { cause: error }));
    });
    req.on('finish', () => {
      sent = true;
    });
    req.on('response', (res) => {
      readBody(res, ex.maxBytes).then(
        (body) => resolve({ status: res.statusCode ?? 0, contentType: res.headers['content-type'], body }),
        (error) => reject(ex.signal.aborted ? ex.signal.reason : error),
      );
    });
    req.end(ex.body);
  });
}
