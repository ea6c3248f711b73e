import http from 'node:http';

export interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
  /** Each body chunk as it arrived, with ms since the request was sent. */
  chunks: Array<{ at: number; data: string }>;
  /** Set when the connection broke before the response ended. */
  error?: NodeJS.ErrnoException;
}

export interface RawRequest {
  method?: string;
  headers?: Record<string, string>;
  body?: string | object;
  /** Abort after this many ms (the response then carries `error`). */
  abortAfterMs?: number;
  /** Cuts the connection when aborted (the response then carries `error`). */
  signal?: AbortSignal;
  /** Called with each chunk; return true to cut the connection there. */
  onChunk?: (data: string, soFar: string) => boolean | void;
}

/** One HTTP request on a fresh connection, recording every body chunk and its arrival time. */
export function rawRequest(url: string, req: RawRequest = {}): Promise<RawResponse> {
  const body = typeof req.body === 'object' ? JSON.stringify(req.body) : req.body;
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const out: RawResponse = { status: 0, headers: {}, body: '', chunks: [] };
    const request = http.request(url, {
      method: req.method ?? (body === undefined ? 'GET' : 'POST'),
      agent: false,
      headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...req.headers },
    });
    const cut = (): void => {
      out.error ??= Object.assign(new Error('client abort'), { code: 'CLIENT_ABORT' });
      request.destroy(Object.assign(new Error('client abort'), { code: 'CLIENT_ABORT' }));
    };
    req.signal?.addEventListener('abort', cut, { once: true });
    const timer = req.abortAfterMs === undefined ? undefined : setTimeout(() => cut(), req.abortAfterMs);
    const done = (error?: NodeJS.ErrnoException): void => {
      req.signal?.removeEventListener('abort', cut);
      clearTimeout(timer);
      if (error) out.error ??= error;
      resolve(out);
    };
    request.on('response', (res) => {
      out.status = res.statusCode ?? 0;
      out.headers = res.headers;
      res.setEncoding('utf8');
      res.on('data', (data: string) => {
        out.body += data;
        out.chunks.push({ at: performance.now() - started, data });
        if (req.onChunk?.(data, out.body)) cut();
      });
      res.on('end', () => done());
      res.on('error', (err) => done(err));
      res.on('aborted', () => done(Object.assign(new Error('aborted'), { code: 'ECONNRESET' })));
    });
    request.on('error', (err: NodeJS.ErrnoException) => (out.status === 0 && err.code !== 'CLIENT_ABORT' && err.code !== 'ECONNRESET' ? reject(err) : done(err)));
    request.end(body);
  });
}

/** Splits an SSE body into its `data:` payloads. */
export function sseData(body: string): string[] {
  return body
    .split('\n\n')
    .filter((event) => event.startsWith('data: '))
    .map((event) => event.slice('data: '.length));
}

/** SSE events with the arrival time (ms since the request) of the chunk that completed each one. */
export function timedEvents(res: RawResponse): Array<{ at: number; data: string }> {
  const out: Array<{ at: number; data: string }> = [];
  let buffer = '';
  for (const chunk of res.chunks) {
    buffer += chunk.data;
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (event.startsWith('data: ')) out.push({ at: chunk.at, data: event.slice(6) });
    }
  }
  return out;
}

/** Times of the events that carry generated text. */
export function contentTimes(res: RawResponse): number[] {
  return timedEvents(res)
    .filter((e) => /"delta":\{"content":"[^"]/.test(e.data))
    .map((e) => e.at);
}
