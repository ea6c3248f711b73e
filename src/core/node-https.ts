/**
 * `node:https`, loaded on first use. It loads `node:tls` (about 2 MiB of resident memory), which a
 * router whose engines all speak plain HTTP never needs: only an `https` engine URL (its `/metrics`,
 * health checks, a LoRA adapter load) loads it. `test/startup/lazy-loading.test.ts` pins that a
 * static-mode router with plain-HTTP engines never loads `node:tls`. (Inference requests go through
 * undici, src/proxy/engine-agent.ts.)
 */
import { createRequire } from 'node:module';
import type * as NodeHttps from 'node:https';
import http from './node-http.js';

let https: typeof NodeHttps | undefined;

export function nodeHttps(): typeof NodeHttps {
  return (https ??= createRequire(import.meta.url)('node:https') as typeof NodeHttps);
}

/** The Node client for a request to `url`: `node:https` for an `https:` URL, else `node:http`. */
export function nodeClientFor(url: URL): typeof http | typeof NodeHttps {
  return url.protocol === 'https:' ? nodeHttps() : http;
}
