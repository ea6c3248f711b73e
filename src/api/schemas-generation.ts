/**
 * JSON Schemas of the generation APIs beyond chat: OpenAI's completions and Responses API, and
 * Anthropic's Messages API. Limits are the specs' own, widened wherever vLLM (the main engine)
 * accepts more, so a request vLLM would serve is never turned away here. Unknown fields pass
 * through to the engine; optional fields may be `null` where the spec (or vLLM) allows it.
 */
import { booleanOrNull, model, nullable, objectOrNull } from './schema-parts.js';

const stringOrNull = nullable({ type: 'string' });
const penalty = nullable({ type: 'number', minimum: -2, maximum: 2 });
/** OpenAI's range, and vLLM's own check since it added the upper bound. */
const temperature = nullable({ type: 'number', minimum: 0, maximum: 2 });
const topP = nullable({ type: 'number', minimum: 0, maximum: 1 });
/** vLLM's extra sampling parameters; `top_k` 0 or -1 turns it off. */
const topK = nullable({ type: 'integer', minimum: -1 });
const minP = nullable({ type: 'number', minimum: 0, maximum: 1 });
const repetitionPenalty = nullable({ type: 'number', exclusiveMinimum: 0 });
const tokenIds = { type: 'array', minItems: 1, items: { type: 'integer', minimum: 0 } };

export const completionsRequestSchema = {
  type: 'object',
  required: ['model'],
  properties: {
    model,
    prompt: {
      description: 'a string, a list of strings, a list of token ids, or a list of token-id lists',
      anyOf: [{ type: 'string' }, { type: 'null' }, { type: 'array', minItems: 1, items: { type: 'string' } }, tokenIds, { type: 'array', minItems: 1, items: tokenIds }],
    },
    /** vLLM: base64 tensors that stand in for the prompt. */
    prompt_embeds: { type: ['string', 'array', 'null'] },
    suffix: stringOrNull,
    echo: booleanOrNull,
    /** OpenAI allows at most 5; vLLM up to its `--max-logprobs`, which only the engine knows. */
    logprobs: nullable({ type: 'integer', minimum: 0 }),
    /** OpenAI allows at most 20; vLLM ignores the field. */
    best_of: nullable({ type: 'integer', minimum: 0 }),
    /** OpenAI allows at most 128; vLLM up to VLLM_MAX_N_SEQUENCES (16384 unless set). */
    n: nullable({ type: 'integer', minimum: 1 }),
    /** 0 with `echo` returns the prompt alone. */
    max_tokens: nullable({ type: 'integer', minimum: 0 }),
    min_tokens: nullable({ type: 'integer', minimum: 0 }),
    temperature,
    top_p: topP,
    top_k: topK,
    min_p: minP,
    repetition_penalty: repetitionPenalty,
    presence_penalty: penalty,
    frequency_penalty: penalty,
    /** OpenAI says at most 4; vLLM takes any number. */
    stop: { description: 'a string or a list of strings', anyOf: [{ type: 'string' }, { type: 'null' }, { type: 'array', items: { type: 'string' } }] },
    stop_token_ids: nullable({ type: 'array', items: { type: 'integer' } }),
    stream: booleanOrNull,
    stream_options: nullable({ type: 'object', properties: { include_usage: booleanOrNull, continuous_usage_stats: booleanOrNull } }),
    /** vLLM: -1 returns every prompt token's full distribution. */
    prompt_logprobs: nullable({ type: 'integer', minimum: -1 }),
    truncate_prompt_tokens: nullable({ type: 'integer', minimum: -1 }),
    /** OpenAI allows -100..100; vLLM clamps any bias into that range. */
    logit_bias: nullable({ type: 'object', additionalProperties: { type: 'number' } }),
    seed: nullable({ type: 'integer' }),
    user: stringOrNull,
    metadata: objectOrNull,
    extra_body: objectOrNull,
  },
  // vLLM takes `prompt_embeds` in place of a prompt; without them the prompt must be there and not empty.
  if: { properties: { prompt_embeds: { type: 'null' } } },
  then: { required: ['prompt'], properties: { prompt: { type: ['string', 'array'], minLength: 1 } } },
} as const;

/**
 * An item of the Responses API's `input`: a message (a `role`, its `type` optional) or another item
 * (a `type`: function_call_output, reasoning…). An item with neither is told its `type` is missing.
 */
const inputItem = {
  type: 'object',
  properties: { type: { type: 'string' }, role: { type: 'string' } },
  if: { required: ['role'], properties: { role: true } },
  else: { required: ['type'], properties: { type: true } },
};

export const responsesRequestSchema = {
  type: 'object',
  required: ['model', 'input'],
  properties: {
    model,
    input: { description: 'a string or a list of input items', anyOf: [{ type: 'string' }, { type: 'array', items: inputItem }] },
    instructions: stringOrNull,
    previous_response_id: stringOrNull,
    stream: booleanOrNull,
    store: booleanOrNull,
    background: booleanOrNull,
    max_output_tokens: nullable({ type: 'integer', minimum: 1 }),
    temperature,
    top_p: topP,
    top_k: topK,
    /** OpenAI allows at most 20; vLLM up to its `--max-logprobs`. */
    top_logprobs: nullable({ type: 'integer', minimum: 0 }),
    tools: { type: 'array', items: { type: 'object', required: ['type'], properties: { type: { type: 'string' } } } },
    tool_choice: { type: ['string', 'object'] },
    parallel_tool_calls: booleanOrNull,
    text: objectOrNull,
    reasoning: objectOrNull,
    truncation: nullable({ enum: ['auto', 'disabled'] }),
    include: nullable({ type: 'array', items: { type: 'string' } }),
    /** String values, as OpenAI states and vLLM checks (OpenAI's 16-key cap is not vLLM's). */
    metadata: nullable({ type: 'object', additionalProperties: { type: 'string' } }),
    user: stringOrNull,
  },
} as const;

/** A content block of Anthropic's: a `type`, and a `text` string when the type is `text`. */
const anthropicBlock = {
  type: 'object',
  required: ['type'],
  properties: { type: { type: 'string' } },
  if: { required: ['type'], properties: { type: { const: 'text' } } },
  then: { required: ['text'], properties: { text: { type: 'string' } } },
};

export const messagesRequestSchema = {
  type: 'object',
  required: ['model', 'max_tokens', 'messages'],
  properties: {
    model,
    max_tokens: { type: 'integer', minimum: 1 },
    messages: {
      type: 'array',
      minItems: 1,
      items: {
        type: 'object',
        required: ['role', 'content'],
        properties: {
          role: { enum: ['user', 'assistant'] },
          content: { description: 'a string or a non-empty list of content blocks', anyOf: [{ type: 'string' }, { type: 'array', minItems: 1, items: anthropicBlock }] },
        },
      },
    },
    system: { description: 'a string or a list of text blocks', anyOf: [{ type: 'string' }, { type: 'null' }, { type: 'array', items: anthropicBlock }] },
    stop_sequences: nullable({ type: 'array', items: { type: 'string' } }),
    stream: booleanOrNull,
    /** Anthropic allows 0..1; vLLM samples with up to 2. */
    temperature,
    top_p: topP,
    /** Anthropic says ≥ 0; vLLM also takes -1 (off). */
    top_k: topK,
    tools: nullable({ type: 'array', items: { type: 'object', required: ['name'], properties: { name: { type: 'string' } } } }),
    tool_choice: nullable({
      type: 'object',
      required: ['type'],
      properties: { type: { enum: ['auto', 'any', 'tool', 'none'] }, name: { type: 'string' } },
      if: { required: ['type'], properties: { type: { const: 'tool' } } },
      then: { required: ['name'], properties: { name: { type: 'string' } } },
    }),
    metadata: objectOrNull,
    thinking: nullable({ type: 'object', required: ['type'], properties: { type: { type: 'string' }, budget_tokens: { type: 'integer' } } }),
  },
} as const;
