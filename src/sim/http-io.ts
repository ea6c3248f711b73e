/**
 * The simulator's HTTP plumbing on Node's `http`: bodies read within the size limit, JSON and
 * vLLM error responses written (or another API's, through an {@link ErrorDialect}), and the client
 * followed, so that a handler notices when it leaves and a stream waits while it is not reading.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { errorBody, streamErrorEvent, vllmError, type VllmError } from './errors.js';
import { RequestError } from './request-checks.js';

export const SSE_HEADERS = { 'content-type': 'text/event-stream; charset=utf-8' };
const JSON_TYPE = 'application/json';

export function sendJson(res: ServerResponse, status: number, body: string, headers: Record<string, string> = {}): void {
  if (res.headersSent || res.destroyed) return;
  res.writeHead(status, { ...headers, 'content-type': JSON_TYPE, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

export function sendError(res: ServerResponse, err: VllmError): void {
  sendJson(res, err.status, errorBody(err), err.headers);
}

/** How a route writes an error: as a JSON response, and as the event that ends a stream already under way. */
export interface ErrorDialect {
  send(res: ServerResponse, err: VllmError): void;
  streamEnd(err: VllmError): string;
}

/** vLLM's OpenAI-style errors (most routes). */
export const VLLM_ERRORS: ErrorDialect = { send: sendError, streamEnd: streamErrorEvent };

/** An AbortSignal that fires when the client goes away before the response finished. */
export function abortOnClose(res: ServerResponse): AbortSignal {
  const controller = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) controller.abort();
  });
  return controller.signal;
}

/**
 * Until a stream's client has taken what was written (its 'drain'), or the request is aborted. Like
 * vLLM behind uvicorn, whose send waits while the transport is paused, generation does not run ahead
 * of a client that is not reading.
 */
export function drained(res: ServerResponse, signal: AbortSignal): Promise<void> {
  if (!res.writableNeedDrain || signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      signal.removeEventListener('abort', done);
      resolve();
    };
    res.once('drain', done);
    signal.addEventListener('abort', done, { once: true });
  });
}

export function untilAborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener('abort', () => resolve(), { once: true });
  });
}

export const newId = (): string => randomUUID().replaceAll('-', '');
export const unixNow = (): number => Math.floor(Date.now() / 1000);

/** The raw request body; a 413 past `maxBodyBytes`. */
export async function readBody(req: IncomingMessage, maxBodyBytes: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBodyBytes) {
      const err = vllmError(413, 'Request Entity Too Large', `Request body exceeds the limit of ${maxBodyBytes} bytes.`);
      err.headers = { connection: 'close' };
      throw new RequestError(err);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** The request body parsed as JSON: a 413 past `maxBodyBytes`, a 400 when it is not JSON. */
export async function readJsonBody(req: IncomingMessage, maxBodyBytes: number): Promise<unknown> {
  const body = await readBody(req, maxBodyBytes);
  try {
    return JSON.parse(body.toString('utf8')) as unknown;
  } catch (err) {
    throw new RequestError(vllmError(400, 'Bad Request', `Invalid JSON body: ${(err as Error).message}`));
  }
}
