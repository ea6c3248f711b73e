/**
 * JSON Schemas of the APIs vLLM serves beside generation: rerank and score (cross-encoders),
 * tokenize and detokenize, and the audio uploads (transcriptions and translations). The shapes are
 * vLLM's request classes, whose limits they never tighten; unknown fields pass through to the engine.
 */
import { booleanOrNull, model, nullable, objectOrNull } from './schema-parts.js';

const tokenIds = { type: 'array', items: { type: 'integer', minimum: 0 } };
/** vLLM: -1 truncates to the model's context length. */
const truncatePromptTokens = nullable({ type: 'integer', minimum: -1 });

/** vLLM's multimodal score input: `{content: [parts]}`, each part a chat content part (`text`, `image_url`…). */
const withContent = {
  type: 'object',
  required: ['content'],
  properties: { content: { type: 'array', items: { type: 'object', required: ['type'], properties: { type: { type: 'string' } } } } },
};
const scoreInput = { description: 'a string or an object with a content list', anyOf: [{ type: 'string' }, withContent] };
/** One input or a list of them: vLLM pairs a single one with each of the other side's. */
const scoreInputs = { description: 'a string, an object with a content list, or a list of those', anyOf: [{ type: 'string' }, withContent, { type: 'array', items: scoreInput }] };

/** Settings every vLLM pooling request takes. */
const poolingCommon = {
  truncate_prompt_tokens: truncatePromptTokens,
  use_activation: booleanOrNull,
  priority: { type: 'integer' },
  user: nullable({ type: 'string' }),
  mm_processor_kwargs: objectOrNull,
};

/** A document to rank: a string, vLLM's `{content}`, or `{text}` as Cohere and Jina clients send. An object with neither is told its `text` is missing. */
const rerankDocument = {
  description: 'a string or an object with a text or a content list',
  anyOf: [
    { type: 'string' },
    {
      type: 'object',
      properties: { text: { type: 'string' } },
      if: { required: ['content'], properties: { content: true } },
      then: withContent,
      else: { required: ['text'], properties: { text: true } },
    },
  ],
};

export const rerankRequestSchema = {
  type: 'object',
  required: ['model', 'query', 'documents'],
  properties: {
    model,
    query: scoreInput,
    documents: {
      description: 'a non-empty list of documents (strings, or objects with a text or a content list)',
      anyOf: [{ type: 'string' }, withContent, { type: 'array', minItems: 1, items: rerankDocument }],
    },
    /** vLLM returns every document for 0 or less. */
    top_n: nullable({ type: 'integer' }),
    return_documents: booleanOrNull,
    ...poolingCommon,
  },
} as const;

/**
 * vLLM names the two sides of a score request four ways: `text_1`/`text_2` (its first), `queries`
 * with `documents` or `items`, and `data_1`/`data_2`. A body with none is told the first pair is
 * missing; one that starts a pair is told what completes it.
 */
export const scoreRequestSchema = {
  type: 'object',
  required: ['model'],
  properties: { model, text_1: scoreInputs, text_2: scoreInputs, queries: scoreInputs, documents: scoreInputs, items: scoreInputs, data_1: scoreInputs, data_2: scoreInputs, ...poolingCommon },
  if: { required: ['queries'], properties: { queries: true } },
  then: { if: { required: ['items'], properties: { items: true } }, else: { required: ['documents'], properties: { documents: true } } },
  else: {
    if: { required: ['data_1'], properties: { data_1: true } },
    then: { required: ['data_2'], properties: { data_2: true } },
    else: { required: ['text_1', 'text_2'], properties: { text_1: true, text_2: true } },
  },
} as const;

const chatMessage = { type: 'object', required: ['role'], properties: { role: { type: 'string' } } };

/** vLLM's two tokenize requests in one: a `prompt`, or a chat (`messages`) rendered with its template. */
export const tokenizeRequestSchema = {
  type: 'object',
  required: ['model'],
  properties: {
    model,
    prompt: { description: 'a string, a list of strings, or a list of token ids', anyOf: [{ type: 'string' }, { type: 'array', items: { type: 'string' } }, tokenIds] },
    messages: { type: 'array', items: chatMessage },
    add_special_tokens: booleanOrNull,
    add_generation_prompt: booleanOrNull,
    continue_final_message: booleanOrNull,
    return_token_strs: booleanOrNull,
    tools: nullable({ type: 'array', items: { type: 'object' } }),
    chat_template: nullable({ type: 'string' }),
    chat_template_kwargs: objectOrNull,
  },
  // Without messages it is a prompt to tokenize (prompt and messages together: tokenizeCrossField).
  if: { required: ['messages'], properties: { messages: true } },
  else: { required: ['prompt'], properties: { prompt: true } },
} as const;

export const detokenizeRequestSchema = {
  type: 'object',
  required: ['model', 'tokens'],
  properties: { model, tokens: tokenIds },
} as const;

/** A boolean as a form field: what vLLM's parser reads as one (true/false, 1/0, yes/no, on/off, t/f, y/n; any case). */
const formBoolean = { type: 'string', pattern: '^(?:[Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee]|[Yy][Ee][Ss]|[Nn][Oo]|[Oo][Nn]|[Oo][Ff][Ff]|[TtFfYyNn01])$' };
const granularity = { enum: ['word', 'segment'] };

/**
 * The fields of an audio upload (`multipart/form-data`) as the router reads them: text fields as
 * strings, a repeated field as a list of strings under its name as sent, the file as its name, size
 * and type. Numbers arrive as text, so `temperature` is checked by pattern: a decimal in [0, 2]
 * (OpenAI documents 0..1; vLLM samples with up to 2).
 */
export const transcriptionFormSchema = {
  type: 'object',
  required: ['file', 'model'],
  properties: {
    file: {
      type: 'object',
      required: ['filename', 'size', 'type'],
      properties: { filename: { type: 'string' }, size: { type: 'integer', minimum: 1 }, type: { type: 'string' } },
    },
    model,
    language: { type: 'string' },
    prompt: { type: 'string' },
    /** OpenAI's five, and vLLM's `diarized_json`. */
    response_format: { enum: ['json', 'text', 'srt', 'verbose_json', 'vtt', 'diarized_json'] },
    temperature: { type: 'string', pattern: '^(?:[01](?:\\.\\d*)?|2(?:\\.0*)?|\\.\\d+)$' },
    stream: formBoolean,
    /** One value, or a list when the field is repeated. */
    'timestamp_granularities[]': { type: ['string', 'array'], if: { type: 'string' }, then: granularity, else: { items: granularity } },
  },
} as const;
