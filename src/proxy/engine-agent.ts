/**
 * The router's HTTP client for engine requests: undici's `Agent` (a keep-alive pool per engine
 * origin), used through its documented `dispatch(options, handler)` API by the forwarder.
 *
 * Why undici and not Node's `http.request`: per request, `http.request` builds a ClientRequest, an
 * IncomingMessage stream and the agent's socket bookkeeping, and takes a tick to hand the request its
 * socket. undici's dispatch writes the request on a free connection at once and calls the handler with
 * the status, the headers and each body chunk, with no stream between. In a micro-benchmark on this
 * project's machine (one request at a time on loopback, a keep-alive connection, the router's request
 * and answer sizes) a request cost 152 µs of CPU through `http.request` and 116 µs through dispatch,
 * and was answered 25 µs sooner at the median.
 *
 * Why this module loads `undici/lib/dispatcher/agent.js` and not `undici`: the package's entry point
 * loads all of undici (fetch, WebSocket, the cache, mocks) for 10 MiB more resident memory in a router
 * that uses none of it. This is the one place the router leans on undici's file layout;
 * `test/proxy/engine-agent.test.ts` pins that the file's class is the package's documented `Agent`.
 *
 * Why it keeps `node:http2` (and with it `node:tls`) from loading: undici's HTTP/2 client
 * (`client-h2.js`) requires it as it loads, and uses it only on a connection that negotiated HTTP/2,
 * which `allowH2: false` rules out (engines speak HTTP/1.1; an `https` engine is offered HTTP/1.1
 * only). While undici loads, a module hook (Node's documented `module.registerHooks`) gives
 * `client-h2.js` what undici itself falls back to when `node:http2` is missing, `{ constants: {} }`,
 * and is removed at once. Where hooks cannot be registered (Jest's sandbox refuses them) undici loads
 * as it is. `test/startup/lazy-loading.test.ts` pins that a router never loads `node:http2` or
 * `node:tls` (with plain-HTTP engines); together they were 2–3 MiB of
 * the static-mode router's idle RSS (target 90 MiB).
 */
import { createRequire, registerHooks } from 'node:module';
import type { Agent, Dispatcher } from 'undici';

/** The stand-in module's URL (never a file). */
const NO_HTTP2 = 'modelgate:undici-without-http2';

/** undici's Agent, loaded without `node:http2` where module hooks are available. */
function loadAgent(): typeof Agent {
  const load = (): typeof Agent => createRequire(import.meta.url)('undici/lib/dispatcher/agent.js') as typeof Agent;
  let hooks: { deregister(): void };
  try {
    hooks = registerHooks({
      resolve(specifier, context, next) {
        if ((specifier === 'node:http2' || specifier === 'http2') && context.parentURL?.endsWith('/undici/lib/dispatcher/client-h2.js') === true) {
          return { url: NO_HTTP2, format: 'commonjs', shortCircuit: true };
        }
        return next(specifier, context);
      },
      load(url, context, next) {
        if (url === NO_HTTP2) return { format: 'commonjs', source: 'module.exports = { constants: {} };', shortCircuit: true };
        return next(url, context);
      },
    });
  } catch {
    return load();
  }
  try {
    return load();
  } finally {
    hooks.deregister();
  }
}

const AgentClass = loadAgent();

/** What the forwarder needs of its client: dispatch (with the pool's connect timeout), and closing at shutdown. */
export interface EngineAgent {
  dispatch(options: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler, connectMs: number): void;
  destroy(): Promise<void>;
  /**
   * Ends every request in flight with `reason` (undici's `destroy(error)`: each handler hears it in
   * `onResponseError`) and drops the connections; a later dispatch starts on a new agent.
   */
  endAll(reason: Error): void;
}

/**
 * The engine client: one undici `Agent` per connect timeout the pools use (usually one), each set to
 * give up a connection attempt at that timeout. The forwarder's own timer fails the attempt then (on
 * the injected clock); undici's closes the socket still connecting, which nothing else could: a
 * request has no handle undici documents until it is on a connection.
 *
 * Each agent:
 *
 * - speaks HTTP/1.1 only (`allowH2: false`; see above);
 * - has no per-origin connection limit (as Node's agent had none: admission and the scheduler bound
 *   what an engine gets) and no pipelining;
 * - has no header or body timeout of undici's own: the forwarder's timers (first byte, idle, deadline)
 *   own them;
 * - closes idle keep-alive connections after 4 s, or sooner when the engine's `Keep-Alive` header says
 *   it closes them sooner (undici's defaults), so a request rarely meets a connection the engine
 *   (uvicorn closes after 5 s) is closing.
 */
export function createEngineAgent(): EngineAgent {
  const agents = new Map<number, Agent>();
  return {
    dispatch(options, handler, connectMs) {
      let agent = agents.get(connectMs);
      if (agent === undefined) {
        agent = new AgentClass({ connections: null, pipelining: 1, headersTimeout: 0, bodyTimeout: 0, allowH2: false, connect: { timeout: connectMs } });
        agents.set(connectMs, agent);
      }
      agent.dispatch(options, handler);
    },
    async destroy() {
      const all = [...agents.values()];
      agents.clear();
      await Promise.all(all.map((agent) => agent.destroy()));
    },
    endAll(reason) {
      const all = [...agents.values()];
      agents.clear();
      for (const agent of all) void agent.destroy(reason).catch(() => undefined);
    },
  };
}
