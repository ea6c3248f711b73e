/**
 * `node:http` for the router, loaded with CommonJS `require` instead of an ESM import.
 *
 * An ESM import of a built-in module builds its namespace by reading every export, and Node 24's
 * `http` exports `WebSocket`, `CloseEvent` and `MessageEvent` through lazy getters that load Node's
 * whole fetch implementation (undici): 13 MiB more resident memory in a router that never calls
 * `fetch`. `require` reads nothing until it is used. Every module of `src/` takes `http` from here
 * (eslint forbids a value import of `node:http` elsewhere; type imports are free), and
 * `test/startup/lazy-loading.test.ts` pins that a static-mode router never loads undici.
 */
import { createRequire } from 'node:module';
import type * as NodeHttp from 'node:http';

const http = createRequire(import.meta.url)('node:http') as typeof NodeHttp;

export default http;

/**
 * Requests that said `Expect: 100-continue` and were handed over without `100 Continue` (the API
 * server's `checkContinue` listener, wiring/servers.ts): the client waits for it before it sends the
 * body, so the body reader (server/body.ts) sends it when it starts to read — after the key, the route and the content type
 * were checked. Only such a request has an `Expect` header here (another expectation is answered 417
 * by the server): an ordinary request pays one property read.
 */
export const expectsContinue = new WeakSet<object>();
