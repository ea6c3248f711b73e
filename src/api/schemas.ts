/**
 * JSON Schemas of chat and embeddings: the fields of the OpenAI-style convention with the
 * service description's limits. Unknown fields are allowed (they pass through to the engine), and
 * optional fields may be `null` as the OpenAI spec allows.
 */
import { nullable, objectOrNull } from './schema-parts.js';

const penalty = nullable({ type: 'number', minimum: -2, maximum: 2 });

const contentPart = {
  type: 'object',
  required: ['type'],
  properties: { type: { type: 'string' } },
  if: { properties: { type: { const: 'text' } } },
  then: { required: ['text'], properties: { text: { type: 'string' } } },
};

const message = {
  type: 'object',
  required: ['role'],
  properties: {
    role: { enum: ['system', 'developer', 'user', 'assistant', 'tool', 'function'] },
    content: {
      description: 'a string or an array of content parts',
      anyOf: [{ type: 'string' }, { type: 'null' }, { type: 'array', items: contentPart }],
    },
    name: { type: 'string' },
  },
};

export const chatRequestSchema = {
  type: 'object',
  required: ['model', 'messages'],
  properties: {
    model: { type: 'string', minLength: 1 },
    messages: { type: 'array', minItems: 1, items: message },
    temperature: nullable({ type: 'number', minimum: 0 }),
    top_p: nullable({ type: 'number', minimum: 0, maximum: 1 }),
    top_k: nullable({ type: 'integer', minimum: -1 }),
    min_p: nullable({ type: 'number', minimum: 0, maximum: 1 }),
    n: nullable({ type: 'integer', minimum: 1 }),
    max_tokens: nullable({ type: 'integer', minimum: 1 }),
    max_completion_tokens: nullable({ type: 'integer', minimum: 1 }),
    min_tokens: nullable({ type: 'integer', minimum: 0 }),
    stop: {
      description: 'a string or a list of at most 4 strings',
      anyOf: [{ type: 'string' }, { type: 'null' }, { type: 'array', maxItems: 4, items: { type: 'string' } }],
    },
    stream: nullable({ type: 'boolean' }),
    stream_options: nullable({ type: 'object', properties: { include_usage: nullable({ type: 'boolean' }) } }),
    presence_penalty: penalty,
    frequency_penalty: penalty,
    repetition_penalty: nullable({ type: 'number', exclusiveMinimum: 0 }),
    logprobs: nullable({ type: 'boolean' }),
    top_logprobs: nullable({ type: 'integer', minimum: 0, maximum: 20 }),
    logit_bias: nullable({ type: 'object', additionalProperties: { type: 'number', minimum: -100, maximum: 100 } }),
    seed: nullable({ type: 'integer' }),
    response_format: nullable({ type: 'object', required: ['type'], properties: { type: { type: 'string' } } }),
    tools: nullable({
      type: 'array',
      items: { type: 'object', required: ['type'], properties: { type: { type: 'string' }, function: { type: 'object', required: ['name'], properties: { name: { type: 'string' } } } } },
    }),
    tool_choice: nullable({ type: ['string', 'object'] }, 'a string or an object'),
    parallel_tool_calls: nullable({ type: 'boolean' }),
    functions: nullable({ type: 'array', items: { type: 'object', required: ['name'], properties: { name: { type: 'string' } } } }),
    function_call: nullable({ type: ['string', 'object'] }, 'a string or an object'),
    user: nullable({ type: 'string' }),
    metadata: objectOrNull,
    extra_body: objectOrNull,
  },
} as const;

const tokenIds = { type: 'array', minItems: 1, items: { type: 'integer', minimum: 0 } };

export const embeddingsRequestSchema = {
  type: 'object',
  required: ['model', 'input'],
  properties: {
    model: { type: 'string', minLength: 1 },
    input: {
      description: 'a non-empty string, a non-empty list of non-empty strings, a list of token ids, or a list of non-empty token-id lists',
      anyOf: [{ type: 'string', minLength: 1 }, { type: 'array', minItems: 1, items: { type: 'string', minLength: 1 } }, tokenIds, { type: 'array', minItems: 1, items: tokenIds }],
    },
    encoding_format: nullable({ enum: ['float', 'base64'] }),
    dimensions: nullable({ type: 'integer', minimum: 1 }),
    user: nullable({ type: 'string' }),
    metadata: objectOrNull,
    extra_body: objectOrNull,
  },
} as const;
