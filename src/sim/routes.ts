/**
 * The simulator's inference routes: every API a vLLM replica serves, by path, with its method.
 * (Discovery, health, metrics and `/sim/config` are the server's own, in `server.ts`.)
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { handleTranscription, handleTranslation } from './audio.js';
import { handleCompletions } from './completions.js';
import { handleChat, handleEmbeddings } from './inference.js';
import { type ErrorDialect, VLLM_ERRORS } from './http-io.js';
import { ANTHROPIC_ERRORS, handleMessages } from './messages.js';
import { handleRerank, handleScore } from './pooling.js';
import { handleResponses, retrieveResponse } from './responses.js';
import { type InferenceContext } from './slots.js';
import { handleDetokenize, handleTokenize } from './tokenize.js';

export type RouteHandler = (ctx: InferenceContext, req: IncomingMessage, res: ServerResponse) => Promise<void>;

export interface Route {
  method: 'GET' | 'POST';
  handle: RouteHandler;
  /** How the route writes the errors the server raises before handing over (e.g. while the model loads). */
  errors: ErrorDialect;
}

const POST_ROUTES: Record<string, RouteHandler> = {
  '/v1/chat/completions': handleChat,
  '/v1/completions': handleCompletions,
  '/v1/embeddings': handleEmbeddings,
  '/v1/responses': handleResponses,
  '/v1/messages': handleMessages,
  '/rerank': handleRerank,
  '/v1/rerank': handleRerank,
  '/v2/rerank': handleRerank,
  '/score': handleScore,
  '/v1/score': handleScore,
  '/tokenize': handleTokenize,
  '/detokenize': handleDetokenize,
  '/v1/audio/transcriptions': handleTranscription,
  '/v1/audio/translations': handleTranslation,
};

const STORED_RESPONSE = '/v1/responses/';

/** The inference route at `path`, if any. */
export function inferenceRoute(path: string): Route | undefined {
  const handle = Object.hasOwn(POST_ROUTES, path) ? POST_ROUTES[path] : undefined;
  if (handle) return { method: 'POST', handle, errors: path === '/v1/messages' ? ANTHROPIC_ERRORS : VLLM_ERRORS };
  if (path.startsWith(STORED_RESPONSE) && path.length > STORED_RESPONSE.length) {
    const id = path.slice(STORED_RESPONSE.length);
    return { method: 'GET', handle: (ctx, req, res) => retrieveResponse(ctx, req, res, id), errors: VLLM_ERRORS };
  }
  return undefined;
}
