/**
 * The floor for a router written on Node's HTTP stack: the least any such router does per request,
 * and nothing more. It reads the client's JSON body and parses it (a router must, to find `model`),
 * forwards it on a keep-alive agent to one upstream, relays the answer as it comes (status, content
 * type and length, then the body chunk by chunk) and parses a JSON answer once it ended (a router
 * must, to read `usage`). No authentication, validation, scheduling, retries, timeouts, metrics or
 * logs. The overhead benchmark runs it as a baseline next to modelgate, so that the report shows
 * how much of modelgate's added latency is Node's own and how much is the router's. It marks the
 * steps it has on modelgate's request-phase channel (src/core/phases.ts: nothing is published unless
 * the path benchmark's probe listens), so that bench/path.ts times both with the same code.
 *
 * Run as its own process: `node node-proxy.js PORT UPSTREAM_URL`.
 */
import http from 'node:http';
import { passed } from '../../src/core/phases.js';

const [port, upstreamUrl] = [Number(process.argv[2]), process.argv[3]];
if (!Number.isInteger(port) || !upstreamUrl) {
  console.error('usage: node-proxy.js PORT UPSTREAM_URL');
  process.exit(2);
}
const upstream = new URL(upstreamUrl);
const agent = new http.Agent({ keepAlive: true });

const server = http.createServer((req, res) => {
  passed(res, 'received');
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    passed(res, 'body_read');
    try {
      JSON.parse(body.toString('utf8'));
    } catch {
      res.writeHead(400).end();
      return;
    }
    passed(res, 'validated');
    const forwarded = http.request({
      hostname: upstream.hostname,
      port: upstream.port,
      method: 'POST',
      path: req.url,
      agent,
      headers: ['host', upstream.host, 'content-type', 'application/json', 'content-length', String(body.length)],
    });
    forwarded.on('error', () => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
    forwarded.on('response', (answer) => {
      passed(res, 'responded');
      const type = answer.headers['content-type'] ?? '';
      const length = answer.headers['content-length'];
      const json = type.startsWith('application/json');
      const received: Buffer[] = [];
      let started = false;
      let wrote = false;
      answer.on('data', (chunk: Buffer) => {
        if (!started) {
          res.writeHead(answer.statusCode ?? 502, length === undefined ? { 'content-type': type } : { 'content-type': type, 'content-length': length });
          started = true;
        }
        res.write(chunk);
        if (!wrote) {
          wrote = true;
          passed(res, 'first_byte');
        }
        if (json) received.push(chunk);
      });
      answer.on('end', () => {
        if (!started) res.writeHead(answer.statusCode ?? 502, { 'content-type': type, 'content-length': '0' });
        res.end();
        if (json) JSON.parse(Buffer.concat(received).toString('utf8'));
      });
    });
    forwarded.end(body);
    passed(res, 'sent');
  });
});
server.listen(port, '127.0.0.1');
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    server.close();
    server.closeAllConnections();
    agent.destroy();
  });
}
