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
    const timer = req.abortAfterMs === undefined ? undefined : setTimeout(() => request.destroy(Object.assign(new Error('client abort'), { code: 'CLIENT_ABORT' })), req.abortAfterMs);
    const done = (error?: NodeJS.ErrnoException): void => {
      clearTimeout(timer);
      if (error) out.error = error;
      resolve(out);
    };
    request.on('response', (res) => {
      out.status = res.statusCode ?? 0;
      out.headers = res.headers;
      res.setEncoding('utf8');
      res.on('data', (data: string) => {
        out.body += data;
        out.chunks.push({ at: performance.now() - started, data });
        if (req.onChunk?.(data, out.body)) request.destroy(Object.assign(new Error('client abort'), { code: 'CLIENT_ABORT' }));
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
