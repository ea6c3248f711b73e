/** The access-log line, rendered by hand, is the line pino would have written for the same members. */
import { describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { Writable } from 'node:stream';
import { type Request, type Response } from 'express';
import { pino } from 'pino';
import { AccessLog } from '../../src/server/access-log.js';
import { type RequestContext } from '../../src/server/context.js';
import { type LineSink } from '../../src/core/types.js';
import { createLogger, LINE_BATCH_BYTES, lineSinkOf } from '../../src/wiring/logger.js';
import { waitFor } from '../helpers/sim.js';

function capture(): { lines: string[]; sink: Writable } {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(chunk.toString('utf8'));
      done();
    },
  });
  return { lines, sink };
}

/** The batches of the access logs made so far (wiring/logger.ts), written now, as the router's close writes them. */
let batches: LineSink[] = [];
const written = (): void => {
  for (const sink of batches.splice(0)) sink.flush?.();
};

const req = { method: 'POST', headers: {} } as Request;
const finished = { headersSent: true, statusCode: 200, writableFinished: true } as Response;

function context(overrides: Partial<RequestContext> = {}): RequestContext {
  return {
    requestId: 'req-"1"',
    started: 1000,
    route: 'chat',
    dialect: 'openai',
    path: '/v1/chat/completions',
    forwarded: { client: '10.0.0.7', for: '10.0.0.7', proto: 'http', host: '', port: '8080' },
    closed: true,
    abort: new AbortController(),
    principal: { name: 'team-a' } as RequestContext['principal'],
    model: 'llama "8b"\n',
    deployment: 'llama-prod',
    priority: 'critical',
    report: {
      poolName: 'llama',
      servedModel: 'served/llama',
      engine: 'vllm',
      attempts: [
        { endpoint: '10.0.0.1:8000', outcome: 'upstream_503', ms: 3 },
        { endpoint: '10.0.0.2:8000', outcome: 'committed', ms: 12 },
      ],
      endpoint: '10.0.0.2:8000',
      upstreamStatus: 200,
      ttftMs: 41.26,
      usage: { promptTokens: 12, completionTokens: 30 },
      bytes: 812,
    },
    ...overrides,
  };
}

/** What pino writes for the same members on a child logger bound to the request id. */
function pinoLine(ctx: RequestContext, extra: Record<string, unknown>): Record<string, unknown> {
  const { lines, sink } = capture();
  createLogger('info', sink)
    .child({ requestId: ctx.requestId })
    .info(
      {
        key: ctx.principal?.name,
        client: ctx.forwarded.client,
        method: 'POST',
        path: ctx.path,
        status: 200,
        model: ctx.model,
        durationMs: 52.3,
        deployment: ctx.deployment,
        ...extra,
      },
      'request',
    );
  return JSON.parse(lines[0] as string) as Record<string, unknown>;
}

/** The access log as the router makes it: with the destination of a logger from createLogger. */
const accessLog = (logger: ReturnType<typeof createLogger>, metrics: ConstructorParameters<typeof AccessLog>[1]): AccessLog => {
  const sink = lineSinkOf(logger);
  if (sink) batches.push(sink);
  return new AccessLog(logger, metrics, sink);
};

describe('access log', () => {
  it('writes, member for member and in the same order, the line pino would write', () => {
    const { lines, sink } = capture();
    const recorded: unknown[] = [];
    const log = accessLog(createLogger('info', sink), { recordRequest: (...args) => recorded.push(args) });
    const ctx = context();
    log.record(req, finished, ctx, 1052.34);
    expect(lines).toHaveLength(0); // written with the other lines of its batch
    written();
    expect(lines).toHaveLength(1);
    expect(lines[0]?.endsWith('}\n')).toBe(true);
    const ours = JSON.parse(lines[0] as string) as Record<string, unknown>;
    const theirs = pinoLine(ctx, {
      pool: 'llama',
      priority: 'critical',
      endpoint: '10.0.0.2:8000',
      upstreamStatus: 200,
      attempts: ctx.report?.attempts,
      ttftMs: 41.3,
      promptTokens: 12,
      completionTokens: 30,
      bytes: 812,
    });
    expect(typeof ours.time).toBe('number');
    expect({ ...ours, time: 0 }).toEqual({ ...theirs, time: 0 });
    expect(Object.keys(ours)).toEqual(Object.keys(theirs));
    expect(recorded).toEqual([['chat', 'llama-prod', 'llama', 200, expect.closeTo(0.05234, 9)]]);
  });

  // The official SDKs retry a 5xx, a 429 or a timeout twice on their own: the operator could not tell those retries from new calls
  it.each([
    ['2', 2],
    ['1', 1],
    ['0', undefined],
    ['-1', undefined],
    ['1.5', undefined],
    ['abc', undefined],
    ['100', undefined],
    [undefined, undefined],
  ])('names an SDK retry (x-stainless-retry-count %s) as clientRetry, after attempts', (header, logged) => {
    const { lines, sink } = capture();
    const log = accessLog(createLogger('info', sink), { recordRequest: () => undefined });
    log.record({ method: 'POST', headers: header === undefined ? {} : { 'x-stainless-retry-count': header } } as Request, finished, context(), 1052.34);
    written();
    const line = JSON.parse(lines[0] as string) as Record<string, unknown>;
    expect(line.clientRetry).toBe(logged);
    if (logged !== undefined) expect(Object.keys(line).indexOf('clientRetry')).toBe(Object.keys(line).indexOf('attempts') + 1);
  });

  it('leaves out what the request did not get to, and marks a client that left', () => {
    const { lines, sink } = capture();
    const log = accessLog(createLogger('info', sink), { recordRequest: () => undefined });
    const ctx = context({ report: undefined, priority: 'standard', model: undefined, deployment: undefined, failure: 'client_gone' });
    log.record(req, { headersSent: false, statusCode: 200, writableFinished: false } as Response, ctx, 1003);
    written();
    const line = JSON.parse(lines[0] as string) as Record<string, unknown>;
    expect(line).toEqual({
      level: 30,
      time: line.time,
      service: 'modelgate',
      requestId: 'req-"1"',
      key: 'team-a',
      client: '10.0.0.7',
      method: 'POST',
      path: '/v1/chat/completions',
      status: 499,
      durationMs: 3,
      failure: 'client_gone',
      incomplete: true,
      msg: 'request',
    });
  });

  it('marks tokens counted from the stream as estimated, without a prompt count', () => {
    const { lines, sink } = capture();
    const log = accessLog(createLogger('info', sink), { recordRequest: () => undefined });
    const base = context();
    log.record(req, finished, context({ report: { ...(base.report as NonNullable<RequestContext['report']>), usage: { promptTokens: 0, completionTokens: 9, estimated: true } } }), 1010);
    written();
    const line = JSON.parse(lines[0] as string) as Record<string, unknown>;
    expect(line).toMatchObject({ completionTokens: 9, tokensEstimated: true });
    expect(line).not.toHaveProperty('promptTokens');
  });

  it('gives back every string member exactly, whatever it holds (quotes, controls, lone surrogates), and is valid JSON', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), fc.string({ unit: 'grapheme' }), fc.string({ unit: 'binary-ascii' }), (model, key, failure) => {
        const { lines, sink } = capture();
        const log = accessLog(createLogger('info', sink), { recordRequest: () => undefined });
        log.record(req, finished, context({ model, principal: { name: key } as RequestContext['principal'], failure }), 1010);
        written();
        const line = JSON.parse(lines[0] as string) as Record<string, unknown>;
        expect([line.model, line.key, line.failure]).toEqual([model, key, failure]);
        expect(lines[0]).toBe(`${JSON.stringify(line)}\n`); // escaped exactly as JSON.stringify (and so pino) escapes
      }),
      { numRuns: 300 },
    );
  });

  it('writes nothing below info, and still records the metrics', () => {
    const { lines, sink } = capture();
    let recorded = 0;
    const log = accessLog(createLogger('warn', sink), { recordRequest: () => void (recorded += 1) });
    log.record(req, finished, context(), 1010);
    written();
    expect(lines).toEqual([]);
    expect(recorded).toBe(1);
  });

  it('gives a logger it did not make the same members through logger.info', () => {
    const { lines, sink } = capture();
    const log = new AccessLog(pino({ level: 'info', base: { service: 'modelgate' } }, sink), { recordRequest: () => undefined });
    const ctx = context();
    log.record(req, finished, ctx, 1052.34);
    const { lines: ownLines, sink: ownSink } = capture();
    accessLog(createLogger('info', ownSink), { recordRequest: () => undefined }).record(req, finished, ctx, 1052.34);
    written();
    const theirs = JSON.parse(lines[0] as string) as Record<string, unknown>;
    const ours = JSON.parse(ownLines[0] as string) as Record<string, unknown>;
    expect({ ...theirs, time: 0 }).toEqual({ ...ours, time: 0 });
  });

  it('writes the lines recorded together to the destination in one write, in order, unasked, a moment later', async () => {
    const { lines, sink } = capture();
    const log = accessLog(createLogger('info', sink), { recordRequest: () => undefined });
    batches = [];
    for (const requestId of ['a', 'b', 'c']) log.record(req, finished, context({ requestId }), 1010);
    await new Promise((resolve) => setImmediate(resolve));
    expect(lines).toHaveLength(0); // not a write per turn of the event loop
    await waitFor(() => lines.length > 0, 'the batch to be written');
    expect(lines).toHaveLength(1);
    expect(
      (lines[0] as string)
        .split('\n')
        .slice(0, -1)
        .map((line) => (JSON.parse(line) as { requestId: string }).requestId),
    ).toEqual(['a', 'b', 'c']);
    log.record(req, finished, context({ requestId: 'd' }), 1010);
    await waitFor(() => lines.length > 1, 'the next batch');
    expect(lines).toHaveLength(2);
  });

  it('writes at once when a batch reaches LINE_BATCH_BYTES (a burst is not held in memory)', () => {
    const { lines, sink } = capture();
    const log = accessLog(createLogger('info', sink), { recordRequest: () => undefined });
    const line = context({ requestId: 'x'.repeat(100) });
    let recorded = 0;
    while (lines.length === 0 && recorded < 10_000) {
      log.record(req, finished, line, 1010);
      recorded += 1;
    }
    expect(lines).toHaveLength(1);
    expect((lines[0] as string).length).toBeGreaterThanOrEqual(LINE_BATCH_BYTES);
    expect((lines[0] as string).length).toBeLessThan(LINE_BATCH_BYTES + 1_000); // one line past the limit at most
    expect((lines[0] as string).split('\n').length - 1).toBe(recorded);
  });

  it('drops the lines of a destination that throws (closed under it) rather than end the process', () => {
    let tries = 0;
    const closed = {
      write(): void {
        tries += 1;
        throw new Error('SonicBoom destroyed');
      },
    };
    const log = accessLog(createLogger('info', closed), { recordRequest: () => undefined });
    log.record(req, finished, context(), 1010);
    written();
    expect(tries).toBe(1); // the write was made, its error caught: the test process is still here
  });

  it('writes the lines still pending when the process exits (the built logger, stdout as a container runtime keeps it)', () => {
    const logger = new URL('../../dist/wiring/logger.js', import.meta.url).href;
    if (!existsSync(new URL(logger).pathname)) throw new Error('dist/ is missing: run `npm run build` (npm test does it first)');
    const script = `const { createLogger, lineSinkOf } = await import(${JSON.stringify(logger)});
const sink = lineSinkOf(createLogger('info'));
sink.write('{"msg":"one"}\\n');
sink.write('{"msg":"two"}\\n');
process.exit(0);`;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
    expect(out).toBe('{"msg":"one"}\n{"msg":"two"}\n');
  });
});
