/**
 * A scripted OpenAI-shaped upstream for tests that need to see exactly what the router sent, or to
 * answer in a dialect the simulator does not speak (TGI's flat errors, plain text, …).
 */
import http, { type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import { type AddressInfo } from 'node:net';

export interface Recorded {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

export type Reply = (req: Recorded, res: ServerResponse) => void;

export const okChat: Reply = (req, res) => {
  const body = JSON.stringify({
    id: 'chatcmpl-up',
    object: 'chat.completion',
    created: 1,
    model: (JSON.parse(req.body) as { model: string }).model,
    choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  });
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
};

export const replyWith =
  (status: number, body: string, headers: Record<string, string> = { 'content-type': 'application/json' }): Reply =>
  (_req, res) => {
    res.writeHead(status, { ...headers, 'content-length': Buffer.byteLength(body) });
    res.end(body);
  };

export interface RecordingUpstream {
  url: string;
  requests: Recorded[];
  /** GET /metrics requests (the router's engine-metrics scrapes), answered 404 and not recorded. */
  scrapes: number;
  reply: Reply;
  close(): Promise<void>;
}

export async function startUpstream(reply: Reply = okChat): Promise<RecordingUpstream> {
  const state: RecordingUpstream = { url: '', requests: [], scrapes: 0, reply, close: () => Promise.resolve() };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      // The router scrapes every replica's engine metrics; this upstream is no engine and has none.
      if (req.method === 'GET' && req.url === '/metrics') {
        state.scrapes += 1;
        res.writeHead(404).end();
        return;
      }
      const recorded: Recorded = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') };
      state.requests.push(recorded);
      state.reply(recorded, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  state.close = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  return state;
}
