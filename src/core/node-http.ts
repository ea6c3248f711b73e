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
