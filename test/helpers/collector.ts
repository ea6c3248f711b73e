/** An OTLP/HTTP collector that refuses every batch (a wrong token): 401, which the exporter does not retry. */
import http from 'node:http';
import { type AddressInfo } from 'node:net';

export async function startRefusingCollector(): Promise<{ url: string; batches(): number; close(): Promise<void> }> {
  let batches = 0;
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      batches += 1;
      res.writeHead(401, { 'content-type': 'application/json' }).end('{"code":16,"message":"missing or wrong token"}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`,
    batches: () => batches,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
