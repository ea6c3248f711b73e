/**
 * The inference routes' handler, the same for every API of the route table: parse (JSON, or a
 * multipart form), validate, resolve the model, check the key may use it, work out the request's
 * priority — then hand the request to the director, which owns it from there.
 */
import type { ServerResponse } from 'node:http';
import { mayUse, type Principal } from '../auth/key-store.js';
import { jsonDepthExceeds } from '../api/json-depth.js';
import { formFields, parseForm, type FormPart } from '../api/multipart.js';
import { type ApiRoute } from '../api/routes.js';
import { validateRequest, type ValidRequest } from '../api/validate.js';
import { modelNotFound, NO_REPLICA_RETRY_AFTER_SECONDS, RouterError } from '../core/errors.js';
import { passed } from '../core/phases.js';
import { deploymentLabel, PRIORITIES, tokensOfChars, type Priority, type RequestTrace } from '../core/types.js';
import { type RequestDirector } from '../director/director.js';
import { type DeploymentNames, type Lease, type TokenUsage } from '../limits/limiter.js';
import { type ModelCatalog } from '../registry/registry.js';
import { type ChainRequest } from './app.js';
import { contextOf, engineRequestIdOf, shownModel } from './context.js';
import { genAiOperation } from './access-log.js';

/** The per-key limits as the handler uses them (limits/limiter.ts). */
export interface RequestLimits {
  /** The key's limits, or undefined for a key without them (such a key is not admitted at all: no lease, no wait). */
  limitsOf(key: Principal): object | undefined;
  /** `kind`: requests whose prompt estimates are corrected together (limits/limiter.ts). */
  /** `deployment`: its ID, model name and aliases, any of which the key's per-deployment limits may name. */
  /** `held`: the names the deployment holds (`ModelCatalog.namesOf`): a per-deployment limit counts only under those. */
  admit(key: Principal, deployment: DeploymentNames, estimate: number, kind?: string, held?: readonly string[]): Promise<Pick<Lease, 'headers' | 'streamed' | 'answered' | 'finish'> | undefined>;
  /** A request of a key without limits was served (or failed): counted in the opt-in per-key metrics, which show every key. */
  /** `estimate`: the prompt's estimated tokens when the engine reported no usage (counted as a limited key's are); else 0. */
  unlimited?(key: Principal, usage: TokenUsage | undefined, estimate: number): void;
}

export interface InferenceDeps {
  maxJsonDepth: number;
  /** Absent: no key is limited. */
  limits?: RequestLimits;
  catalog: () => ModelCatalog;
  /** The catalog has not loaded yet (Kubernetes watches not listed): a name it lacks may still come. */
  catalogLoading?: () => boolean;
  director: RequestDirector;
  /** The header that may lower a request's priority class (config `priority.header`), lower case. */
  priorityHeader: string;
}

/** The request's class: its key's, or lower when the priority header asks for lower (never higher). */
export function requestPriority(keyPriority: Priority, header: string | string[] | undefined, headerName: string): Priority {
  if (header === undefined) return keyPriority;
  const asked = (Array.isArray(header) ? header[0] : header)?.trim().toLowerCase() ?? '';
  if (!(PRIORITIES as readonly string[]).includes(asked)) {
    throw new RouterError('INVALID_REQUEST', `The ${headerName} header must be one of ${PRIORITIES.join(', ')} (got "${asked.slice(0, 40)}").`, { param: headerName });
  }
  return PRIORITIES.indexOf(asked as Priority) > PRIORITIES.indexOf(keyPriority) ? (asked as Priority) : keyPriority;
}

/** JSON.parse behind the nesting guard, in the route's error codes. */
function parseBody(text: string, maxDepth: number): unknown {
  if (jsonDepthExceeds(text, maxDepth)) throw new RouterError('INVALID_REQUEST', `The request body nests JSON deeper than ${maxDepth} levels.`);
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new RouterError('INVALID_JSON', `The request body is not valid JSON: ${(err as Error).message}`);
  }
}

/** A JSON body, validated, as the engine will get it ({@link effectiveRequest}). */
function readJson(api: ApiRoute, raw: Buffer, maxJsonDepth: number): { body: ValidRequest; text: string; form?: FormPart[] } {
  const text = raw.toString('utf8');
  return { body: validateRequest(api, effectiveRequest(parseBody(text, maxJsonDepth)), text.length), text };
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The request as the engine will get it, which is what is validated and what every check and decision
 * the router makes reads: the members of an `extra_body` object in place of the top level's
 * (body-patch.ts `upstreamBody` merges them so, its keys winning). Without it a field sent in
 * `extra_body` — `previous_response_id`, `store`, `stream`, `n`, a prompt — would reach the engine
 * unseen by the ownership check, the stream rules and the prompt the limits charge. `model` stays the
 * top level's (the router sets the engine's), and `extra_body` stays, so the upstream body is still
 * patched from the client's text (and an `extra_body` that is no object is refused by the schema).
 */
function effectiveRequest(body: unknown): unknown {
  if (!isObject(body) || !isObject(body.extra_body)) return body;
  return { ...body, ...body.extra_body, model: body.model, extra_body: body.extra_body };
}

/** A multipart body's fields, validated, with its parts kept for forwarding. */
async function readForm(api: ApiRoute, raw: Buffer, contentType: string): Promise<{ body: ValidRequest; text: string; form?: FormPart[] }> {
  const form = await parseForm(raw, contentType);
  return { body: validateRequest(api, formFields(form)), text: '', form };
}

/**
 * The prompt tokens a request is charged before the engine reports them: its prompt text (or, for
 * APIs without one, its JSON body) at about four characters a token. A form (audio) is charged nothing
 * up front. The engine's usage replaces the estimate when the response ends, and the limiter learns
 * from it how far this kind of request's estimates fall short (a chat template's tokens).
 */
export function estimatePromptTokens(promptText: (() => string) | undefined, text: string, promptTokens?: number): number {
  if (promptTokens !== undefined) return promptTokens; // the route's own count (token ids; a batch of prompts)
  return tokensOfChars(promptText ? promptText().length : text.length);
}

/** The request's prompt text, made once however many ask (the limits' estimate, prefix affinity): a long prompt's text is costly to build. */
function promptOnce(api: ApiRoute, body: ValidRequest): (() => string) | undefined {
  const of = api.promptText;
  if (!of) return undefined;
  let text: string | undefined;
  return () => (text ??= of(body));
}

/**
 * What a request that went out to an engine that did not refuse it (exchange.ts `engineHad`), but whose
 * answer the router never read (cut, not read by its client, timed out), is charged: its prompt's
 * estimate, not refunded as one that never reached an engine is (the router cannot tell an engine that
 * read the prompt from one that hung), and no completion tokens it could count.
 */
const PROMPT_ONLY: TokenUsage = Object.freeze({ promptTokens: 0, completionTokens: 0, estimated: true });

/** What each streamed content event tells: the key's token limits, and the trace's first token. */
function contentHook(lease: { streamed(): void } | undefined, trace: RequestTrace | undefined): () => void {
  if (!trace) return () => lease?.streamed();
  return () => {
    lease?.streamed();
    trace.firstToken();
  };
}

export function inferenceHandler(deps: InferenceDeps, api: ApiRoute) {
  return async (req: ChainRequest, res: ServerResponse): Promise<void> => {
    const ctx = contextOf(res);
    const principal = ctx.principal as Principal;
    const raw = req.body as Buffer;
    const { body, text, form } = api.body === 'multipart' ? await readForm(api, raw, req.headers['content-type'] ?? '') : readJson(api, raw, deps.maxJsonDepth);
    passed(res, 'validated');
    ctx.model = shownModel(body.model);
    const catalog = deps.catalog();
    const deployment = catalog.resolve(body.model);
    if (!deployment) {
      // before the first full listing, "no such model" is not known: a 503 to retry, not a 404 to believe
      if (deps.catalogLoading?.()) throw new RouterError('NO_READY_REPLICA', 'The router is still loading its models; retry shortly.', { retryAfterSeconds: NO_REPLICA_RETRY_AFTER_SECONDS });
      throw modelNotFound(body.model);
    }
    // its label (`namespace/name` in Kubernetes mode): what the access log, the trace and the metrics name it by
    const label = deploymentLabel(deployment);
    ctx.deployment = label;
    // A model the key may not use is answered like a missing one; the log says which it was.
    if (!mayUse(principal, catalog.namesOf(deployment))) throw modelNotFound(body.model, true);
    const priority = requestPriority(principal.priority, req.headers[deps.priorityHeader], deps.priorityHeader);
    ctx.priority = priority;
    const trace = ctx.trace;
    // named as the GenAI conventions say: `{gen_ai.operation.name} {gen_ai.request.model}`
    trace?.rename(`${genAiOperation(api.name)} ${body.model.slice(0, 200)}`);
    if (ctx.closed) return; // the client left while the body was read
    const promptText = promptOnce(api, body);
    const promptTokens = api.promptTokens?.(body);
    const limits = deps.limits?.limitsOf(principal) ? deps.limits : undefined;
    let lease: Pick<Lease, 'headers' | 'streamed' | 'answered' | 'finish'> | undefined;
    if (limits) {
      const admission = trace?.child('modelgate.admission');
      // the prompt tokens' overhead is learned per deployment (by label: each namespace's its own) and API
      lease = await limits.admit(principal, deployment, estimatePromptTokens(promptText, text, promptTokens), `${label} ${api.name}`, catalog.namesOf(deployment));
      admission?.end();
      if (lease) for (const [name, value] of Object.entries(lease.headers)) res.setHeader(name, value);
      if (ctx.closed) {
        lease?.finish(undefined); // the client left while its limits were checked
        return;
      }
    }
    const request = {
      api,
      path: ctx.path,
      deployment,
      asked: body.model,
      body,
      raw,
      text,
      ...(form ? { form } : {}),
      priority,
      tenant: principal.name,
      weight: principal.weight,
      cacheSalt: principal.cacheSalt,
      ...(lease || trace ? { onContent: contentHook(lease, trace) } : {}),
      ...(lease ? { onAnswered: () => lease.answered() } : {}),
      ...(trace ? { trace } : {}),
      ...(promptText ? { promptText } : {}),
      requestId: ctx.requestId,
      engineRequestId: engineRequestIdOf(req, ctx.requestId),
      headers: req.headers,
      forwarded: ctx.forwarded,
      signal: ctx.abort.signal,
    };
    const directed = deps.director.direct(req, res, request);
    // a key without limits has no lease; the per-key metrics count it all the same
    const unlimited = limits === undefined ? deps.limits : undefined;
    ctx.exchange = directed.then(
      (report) => {
        ctx.report = report;
        const usage = report.usage ?? (report.engineHad ? PROMPT_ONLY : undefined);
        lease?.finish(usage);
        unlimited?.unlimited?.(principal, usage, usage?.estimated ? estimatePromptTokens(promptText, text, promptTokens) : 0);
      },
      () => {
        lease?.finish(undefined); // a route that cannot be planned is answered by the error handler below
        unlimited?.unlimited?.(principal, undefined, 0);
      },
    );
    await directed;
  };
}
