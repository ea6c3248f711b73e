/**
 * The inference routes' handler: parse, validate, resolve the model, check the key may use it, work
 * out the request's priority — then hand the request to the director, which owns it from there.
 */
import { type Request, type Response } from 'express';
import { mayUse, type Principal } from '../auth/key-store.js';
import { jsonDepthExceeds } from '../api/json-depth.js';
import { type InferenceKind, validateRequest } from '../api/validate.js';
import { modelNotFound, RouterError } from '../core/errors.js';
import { PRIORITIES, type Priority } from '../core/types.js';
import { type RequestDirector } from '../director/director.js';
import { type ModelCatalog } from '../registry/registry.js';
import { contextOf } from './context.js';

export interface InferenceDeps {
  maxJsonDepth: number;
  catalog: () => ModelCatalog;
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

export function inferenceHandler(deps: InferenceDeps, kind: InferenceKind) {
  return (req: Request, res: Response): Promise<void> | undefined => {
    const ctx = contextOf(res);
    const principal = ctx.principal as Principal;
    const raw = req.body as Buffer;
    const text = raw.toString('utf8');
    const body = validateRequest(kind, parseBody(text, deps.maxJsonDepth));
    ctx.model = body.model;
    const deployment = deps.catalog().resolve(body.model);
    if (!deployment) throw modelNotFound(body.model);
    ctx.deployment = deployment.id;
    // A model the key may not use is answered like a missing one; the log says which it was.
    if (!mayUse(principal, deployment)) throw modelNotFound(body.model, true);
    const priority = requestPriority(principal.priority, req.headers[deps.priorityHeader], deps.priorityHeader);
    ctx.priority = priority;
    if (ctx.closed) return; // the client left while the body was read
    const request = {
      kind,
      deployment,
      asked: body.model,
      body,
      raw,
      text,
      priority,
      requestId: ctx.requestId,
      headers: req.headers,
      forwarded: ctx.forwarded,
      signal: ctx.abort.signal,
    };
    const directed = deps.director.direct(req, res, request);
    ctx.exchange = directed.then(
      (report) => {
        ctx.report = report;
      },
      () => undefined, // a route that cannot be planned is answered by the error handler below
    );
    return directed.then(() => undefined);
  };
}
