/** How the access log ends a request's server span: an error only when the server failed it. */
import { expect, it } from '@jest/globals';
import pino from 'pino';
import { AccessLog } from '../../src/server/access-log.js';

type Ended = { attrs: Record<string, unknown>; error: string | undefined };

function ending(status: number, failure: string | undefined, headersSent = true): Ended | undefined {
  const ended: Ended[] = [];
  const log = new AccessLog(pino({ level: 'silent' }), { recordRequest: () => undefined });
  const trace = { sampled: true, traceId: 't', end: (attrs: Record<string, unknown>, error?: string) => ended.push({ attrs, error }) };
  const report = { attempts: [{ endpoint: 'e', outcome: 'committed', ms: 5 }], upstreamStatus: status, ...(failure ? { failure } : {}) };
  const ctx = { route: 'chat', requestId: 'r1', started: 0, forwarded: {}, trace, report };
  log.record({ method: 'POST' } as never, { headersSent, statusCode: status, writableFinished: failure === undefined } as never, ctx as never, 100);
  return ended[0];
}

it.each([
  ['an answer served whole', 200, undefined, undefined],
  ['a stream the engine broke after its first bytes', 200, 'upstream_stream_broken', 'upstream_stream_broken'],
  ['a stream its client left after its first bytes', 200, 'client_gone', undefined],
  ['a stream its client stopped reading', 200, 'client_stalled', undefined],
  ['a model that does not exist (the client’s mistake)', 404, 'model_not_found', undefined],
  ['a key over its limit', 429, 'rate_limit_exceeded', undefined],
  ['no ready replica', 503, 'no_ready_replica', 'no_ready_replica'],
] as const)('%s (status %i, failure %s): error %s', (_case, status, failure, error) => {
  const ended = ending(status, failure);
  expect(ended?.error).toBe(error);
  expect(ended?.attrs['error.type']).toBe(error);
});
