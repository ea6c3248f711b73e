/**
 * The inference APIs the router serves, one table entry each: where clients call it, which pool
 * capability serves it, how its body is read and checked, how it speaks on the wire, and what the
 * scheduler may read of it. The server mounts every entry alike and the director routes every entry
 * alike, so adding an API is one entry here plus its schema.
 */
import { type ApiName, type Capability, type WireDialect } from '../core/types.js';
import { chatCompletionLimit, completionsCompletionLimit, messagesCompletionLimit, responsesCompletionLimit } from './completion-limit.js';
import { chatCrossField, completionsCrossField, messagesCrossField, responsesCrossField, tokenizeCrossField } from './cross-field.js';
import { chatPromptText, completionsPromptText, completionsPromptTokens, messagesPromptText, responsesPromptText } from './prompt-text.js';
import { chatRequestSchema, embeddingsRequestSchema } from './schemas.js';
import { completionsRequestSchema, messagesRequestSchema, responsesRequestSchema } from './schemas-generation.js';
import { detokenizeRequestSchema, rerankRequestSchema, scoreRequestSchema, tokenizeRequestSchema, transcriptionFormSchema } from './schemas-pooling.js';
import { type ValidRequest } from './valid-request.js';

export interface ApiRoute {
  name: ApiName;
  /** Where clients call it, canonical path first. The engine gets the path the client called: vLLM serves each. */
  paths: readonly string[];
  /** What a pool must declare to serve it. */
  capability: Capability;
  /** `json`: an `application/json` body; `multipart`: a `multipart/form-data` upload, `model` read from the form. */
  body: 'json' | 'multipart';
  /** Error envelope, how a cut stream ends, how a stream reports tokens. */
  dialect: WireDialect;
  /** JSON Schema of the body (of the form's fields, for multipart). */
  schema: object;
  /** Rules across fields that a schema cannot state; throws INVALID_REQUEST. */
  check?: (body: ValidRequest) => void;
  /** The prompt's text, for prefix affinity. */
  promptText?: (body: ValidRequest) => string;
  /** The prompt's tokens when the request names them (token ids): what the limits charge before the engine reports usage. */
  promptTokens?: (body: ValidRequest) => number | undefined;
  /**
   * The most completion tokens an honest answer may report (completion-limit.ts); undefined where the
   * request sets no limit. The router charges and counts no more, whatever the engine reports.
   */
  completionLimit?: (body: ValidRequest) => number | undefined;
  /** A stream reports tokens only when asked (`stream_options.include_usage`): the router asks, and strips the answer the client did not ask for. */
  asksStreamUsage?: true;
  /** Each answer is stored on the replica that made it, by its `id`; a request naming one in this field must reach that replica. */
  continues?: 'previous_response_id';
  /**
   * A non-streamed answer reports no tokens (speech to text: engines report seconds of audio): its
   * text is counted instead, at 4 characters a token, so token limits see it (a streamed one counts its events).
   */
  countsAnswerText?: true;
}

export const API_ROUTES: readonly ApiRoute[] = [
  {
    name: 'chat',
    paths: ['/v1/chat/completions'],
    capability: 'chat',
    body: 'json',
    dialect: 'openai',
    schema: chatRequestSchema,
    check: chatCrossField,
    promptText: chatPromptText,
    completionLimit: chatCompletionLimit,
    asksStreamUsage: true,
  },
  {
    name: 'completions',
    paths: ['/v1/completions'],
    capability: 'completions',
    body: 'json',
    dialect: 'openai',
    schema: completionsRequestSchema,
    check: completionsCrossField,
    promptText: completionsPromptText,
    promptTokens: completionsPromptTokens,
    completionLimit: completionsCompletionLimit,
    asksStreamUsage: true,
  },
  { name: 'embeddings', paths: ['/v1/embeddings'], capability: 'embeddings', body: 'json', dialect: 'openai', schema: embeddingsRequestSchema },
  {
    name: 'responses',
    paths: ['/v1/responses'],
    capability: 'responses',
    body: 'json',
    dialect: 'responses',
    schema: responsesRequestSchema,
    check: responsesCrossField,
    promptText: responsesPromptText,
    completionLimit: responsesCompletionLimit,
    continues: 'previous_response_id',
  },
  {
    name: 'messages',
    paths: ['/v1/messages'],
    capability: 'messages',
    body: 'json',
    dialect: 'anthropic',
    schema: messagesRequestSchema,
    check: messagesCrossField,
    promptText: messagesPromptText,
    completionLimit: messagesCompletionLimit,
  },
  { name: 'rerank', paths: ['/v1/rerank', '/rerank', '/v2/rerank'], capability: 'rerank', body: 'json', dialect: 'openai', schema: rerankRequestSchema },
  { name: 'score', paths: ['/v1/score', '/score'], capability: 'score', body: 'json', dialect: 'openai', schema: scoreRequestSchema },
  { name: 'tokenize', paths: ['/tokenize'], capability: 'tokenize', body: 'json', dialect: 'openai', schema: tokenizeRequestSchema, check: tokenizeCrossField },
  { name: 'detokenize', paths: ['/detokenize'], capability: 'tokenize', body: 'json', dialect: 'openai', schema: detokenizeRequestSchema },
  { name: 'transcriptions', paths: ['/v1/audio/transcriptions'], capability: 'audio', body: 'multipart', dialect: 'openai', schema: transcriptionFormSchema, countsAnswerText: true },
  { name: 'translations', paths: ['/v1/audio/translations'], capability: 'audio', body: 'multipart', dialect: 'openai', schema: transcriptionFormSchema, countsAnswerText: true },
];

/** What each capability serves, in words, for error messages. */
export const CAPABILITY_NAMES: Record<Capability, string> = {
  chat: 'chat completions',
  completions: 'completions',
  embeddings: 'embeddings',
  responses: 'the Responses API',
  messages: 'the Messages API',
  rerank: 'rerank',
  score: 'score',
  tokenize: 'tokenize and detokenize',
  audio: 'audio transcriptions and translations',
};

const BY_PATH = new Map(API_ROUTES.flatMap((route) => route.paths.map((path) => [path, route] as const)));

/** The API served at `path` (exact, case-sensitive), if any. */
export function apiRouteAt(path: string): ApiRoute | undefined {
  return BY_PATH.get(path);
}

export function apiRoute(name: ApiName): ApiRoute {
  return API_ROUTES.find((route) => route.name === name) as ApiRoute;
}
