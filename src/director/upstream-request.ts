/**
 * What a request's engines get, pool by pool: the path the client called (no query: none of the
 * APIs takes one), the body with `model` set to the pool's served name (and, for a stream, usage
 * asked for), and exactly the allow-listed headers plus the router's own. A multipart form is
 * forwarded as it came unless the model's name changes; then it is written again.
 */
import { randomUUID } from 'node:crypto';
import type { OutgoingHttpHeaders } from 'node:http';
import { encodeForm, withField } from '../api/multipart.js';
import { type ValidRequest } from '../api/validate.js';
import { type PoolSpec } from '../core/types.js';
import { upstreamBody } from '../proxy/body-patch.js';
import { upstreamHeaders } from '../proxy/headers.js';
import { type DirectedRequest } from './director.js';
import { type RouteStep } from './exchange.js';
import { type PlannedPool } from './route-plan.js';

/**
 * For a streamed chat or completions request whose client did not ask for usage: the `stream_options` that asks the
 * engine for it anyway (so tokens are counted). The usage chunk is then removed from what the client
 * gets. `extra_body` is honoured, as the engine would see it.
 */
export function streamUsageOverride(body: ValidRequest): Map<string, string> | undefined {
  const extra = body.extra_body ?? undefined;
  const stream = extra && 'stream' in extra ? extra.stream : body.stream;
  if (stream !== true) return undefined;
  const options = extra && 'stream_options' in extra ? extra.stream_options : body.stream_options;
  const current = typeof options === 'object' && options !== null && !Array.isArray(options) ? (options as Record<string, unknown>) : {};
  if (current.include_usage === true) return undefined;
  return new Map([['stream_options', JSON.stringify({ ...current, include_usage: true })]]);
}

/**
 * Each planned pool with the body and headers its engines get. Both are made the first time an
 * attempt reads them: most requests never leave their first pool, and patching a large body for every
 * fallback up front would be wasted. `allowed(pool)` is the pool's header allow-list.
 */
export function routeSteps(
  planned: readonly PlannedPool[],
  request: DirectedRequest,
  usage: Map<string, string> | undefined,
  allowed: (pool: PoolSpec) => ReadonlySet<string>,
  forms?: ReadonlyMap<string, EncodedForm>,
): RouteStep[] {
  return planned.map(({ pool, deployment }) => new LazyStep(pool, deployment, request, usage, allowed, forms?.get(pool.servedModelName)));
}

/**
 * One route step whose body and headers are made on first read. A class, with its getters on the
 * prototype. As an object literal with getters of its own (two closures made per request), each
 * request's step kept its body, headers and the request behind them alive through young-generation
 * GCs: with the router answering from the director (no exchange), 263 KB were promoted per scavenge at
 * 500 requests/s, against 8 KB with this class (--trace-gc-nvp; scavenge pauses 1.2–1.8 against
 * about 0.6 ms). The measurement is what this rests on; the mechanism inside V8 is not pinned down (an
 * object with accessors of its own gets a hidden class of its own, and V8's hidden-class bookkeeping
 * is the likely holder). The forwarder's attempt had a kin: a function field replaced after construction.
 */
class LazyStep implements RouteStep {
  private patchedBody: Buffer | undefined;
  private ownHeaders: OutgoingHttpHeaders | undefined;

  constructor(
    readonly pool: PoolSpec,
    readonly deployment: string,
    private readonly request: DirectedRequest,
    private readonly usage: Map<string, string> | undefined,
    private readonly allowed: (pool: PoolSpec) => ReadonlySet<string>,
    /** A form whose model the pool names differently, written again (encodedForms, before the route runs). */
    private readonly form: EncodedForm | undefined,
  ) {}

  get body(): Buffer {
    this.patchedBody ??= this.form?.body ?? (this.request.form ? this.request.raw : patchedJson(this.request, this.pool, this.usage));
    return this.patchedBody;
  }

  get headers(): OutgoingHttpHeaders {
    if (!this.ownHeaders) {
      const { request, pool } = this;
      this.ownHeaders = upstreamHeaders(request.headers, this.allowed(pool), { requestId: request.engineRequestId, forwarded: request.forwarded, backendKey: pool.backendKey });
      if (this.form) this.ownHeaders['content-type'] = this.form.contentType;
    }
    return this.ownHeaders;
  }
}

/**
 * The usage override, and what a vLLM engine must get from the router rather than the client:
 * - in a pool that isolates keys (`routing.prefix.isolateKeys`), the key's `cache_salt`
 *   (auth/key-store.ts) on every request: vLLM mixes it into the hash of a prompt's first KV block, so
 *   a prefix cached for one key is never a hit for another and `cached_tokens` tells nobody else's
 *   prompt. It is set over whatever the client sent, on every API (one whose engine ignores it too): a
 *   client could otherwise name a salt of its choosing;
 * - a new `request_id` where the client sent one (vLLM's own field): an id vLLM may run the request,
 *   and store its response, under, which two clients must not share (as for `x-request-id`, context.ts).
 */
function overridesFor(request: DirectedRequest, pool: PoolSpec, usage: Map<string, string> | undefined): Map<string, string> | undefined {
  if (pool.engine !== 'vllm') return usage;
  const salted = pool.routing.prefix.isolateKeys;
  const ownId = typeof request.body.request_id === 'string';
  if (!salted && !ownId) return usage;
  const overrides = new Map(usage);
  if (salted) overrides.set('cache_salt', JSON.stringify(request.cacheSalt));
  if (ownId) overrides.set('request_id', JSON.stringify(`${request.api.name === 'responses' ? 'resp_' : ''}${randomUUID().replaceAll('-', '')}`));
  return overrides;
}

/** A JSON body with the pool's served model name (and the overrides: usage, a cache salt, a request id); the body as received when nothing changes. */
function patchedJson(request: DirectedRequest, pool: PoolSpec, streamUsage: Map<string, string> | undefined): Buffer {
  const usage = overridesFor(request, pool, streamUsage);
  // known from the parsed body without scanning its text: neither `model` nor `extra_body` to change
  const asIs = request.asked === pool.servedModelName && !('extra_body' in request.body);
  if (asIs && usage === undefined) return request.raw;
  // a stream's usage asked for, the rest unchanged: the member goes before the closing brace, where the
  // scan below would put it, without scanning the body twice (about 5 µs a stream)
  const options = usage?.size === 1 ? usage.get('stream_options') : undefined;
  if (asIs && options !== undefined && !('stream_options' in request.body)) {
    const close = request.text.lastIndexOf('}'); // a JSON object with members (it was parsed and validated)
    return Buffer.from(`${request.text.slice(0, close)},"stream_options":${options}${request.text.slice(close)}`, 'utf8');
  }
  const patched = upstreamBody(request.text, pool.servedModelName, request.asked, usage);
  return patched === request.text ? request.raw : Buffer.from(patched, 'utf8');
}

export type EncodedForm = Awaited<ReturnType<typeof encodeForm>>;

/**
 * A multipart request's form written again for each served model name of the route that is not the
 * name the client used (usually none: then nothing is copied and the upload is forwarded as it came).
 */
export async function encodedForms(planned: readonly PlannedPool[], request: DirectedRequest): Promise<Map<string, EncodedForm>> {
  const forms = new Map<string, EncodedForm>();
  const { form } = request;
  if (!form) return forms;
  for (const { pool } of planned) {
    const served = pool.servedModelName;
    if (served !== request.asked && !forms.has(served)) forms.set(served, await encodeForm(withField(form, 'model', served)));
  }
  return forms;
}
