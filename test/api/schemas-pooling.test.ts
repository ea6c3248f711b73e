/** The rerank, score, tokenize, detokenize and audio-form schemas: vLLM's documented bodies pass; a bad field is named in param. */
import { describe, expect, it } from '@jest/globals';
import OpenAI, { toFile } from 'openai';
import { detokenizeRequestSchema, rerankRequestSchema, scoreRequestSchema, tokenizeRequestSchema, transcriptionFormSchema } from '../../src/api/schemas-pooling.js';
import { checker, described } from '../helpers/schema-check.js';

const rerank = checker(rerankRequestSchema);
const score = checker(scoreRequestSchema);
const tokenize = checker(tokenizeRequestSchema);
const detokenize = checker(detokenizeRequestSchema);
const transcription = checker(transcriptionFormSchema);

const image = { content: [{ type: 'image_url', image_url: { url: 'https://example.com/cat.png' } }] };

describe('rerankRequestSchema', () => {
  const base = { model: 'BAAI/bge-reranker-base', query: 'What is the capital of France?' };

  it.each([
    ['the body of vLLM’s rerank example', { documents: ['The capital of Brazil is Brasilia.', 'The capital of France is Paris.', 'Horses and cows are both animals'] }],
    ['a Cohere/Jina client’s top_n, return_documents and {text} documents', { documents: [{ text: 'Paris' }, 'Berlin'], top_n: 1, return_documents: true }],
    ['vLLM’s multimodal documents and query', { query: image, documents: [image, 'a cat'] }],
    ['a single document, as vLLM takes it', { documents: 'The capital of France is Paris.' }],
    ['vLLM’s top_n 0 or less (every document)', { documents: ['a'], top_n: -1 }],
    ['pooling settings and unknown fields', { documents: ['a'], truncate_prompt_tokens: -1, use_activation: false, priority: 1, instruction: 'rank by relevance' }],
  ])('accepts %s', (_name, over) => {
    expect(rerank({ ...base, ...over })).toBeNull();
  });

  it.each([
    ['no documents', 'documents', { documents: [] }],
    ['documents missing', 'documents', {}],
    ['a number for documents', 'documents', { documents: 5 }],
    ['a document object with neither text nor content', 'documents[0].text', { documents: [{ title: 'x' }] }],
    ['a non-string document text', 'documents[1].text', { documents: ['a', { text: 5 }] }],
    ['a document content that is no list', 'documents[0].content', { documents: [{ content: 'x' }] }],
    ['no query', 'query', { query: undefined, documents: ['a'] }],
    ['a number for query', 'query', { query: 1, documents: ['a'] }],
    ['a fractional top_n', 'top_n', { documents: ['a'], top_n: 1.5 }],
    ['truncate_prompt_tokens below -1', 'truncate_prompt_tokens', { documents: ['a'], truncate_prompt_tokens: -2 }],
  ])('rejects %s, naming %s', (_name, param, over) => {
    expect(rerank({ ...base, ...over })).toBe(param);
  });

  it('says what documents may be when they are none of it', () => {
    expect(described(rerankRequestSchema, { ...base, documents: 5 })[0]?.message).toBe('documents must be a non-empty list of documents (strings, or objects with a text or a content list)');
  });
});

describe('scoreRequestSchema', () => {
  const model = 'BAAI/bge-reranker-v2-m3';

  it.each([
    ['text_1 and text_2 as strings (vLLM’s example)', { text_1: 'What is the capital of Brazil?', text_2: 'The capital of Brazil is Brasilia.' }],
    ['one text_1 against a list', { text_1: 'What is the capital of France?', text_2: ['The capital of Brazil is Brasilia.', 'The capital of France is Paris.'] }],
    ['queries and documents (current vLLM)', { queries: ['q1', 'q2'], documents: ['d1', 'd2'] }],
    ['queries and items', { queries: 'q', items: ['a', 'b'] }],
    ['data_1 and data_2 with multimodal content', { data_1: 'a cat', data_2: [image, 'a dog'] }],
    ['settings and unknown fields', { text_1: 'a', text_2: 'b', truncate_prompt_tokens: 512, use_activation: true, encoding_format: 'float' }],
  ])('accepts %s', (_name, over) => {
    expect(score({ model, ...over })).toBeNull();
  });

  it.each([
    ['no pair at all', 'text_1', {}],
    ['text_1 alone', 'text_2', { text_1: 'a' }],
    ['queries alone', 'documents', { queries: 'q' }],
    ['data_1 alone', 'data_2', { data_1: 'a' }],
    ['a number for text_2', 'text_2', { text_1: 'a', text_2: 5 }],
    ['a list holding a number', 'documents[1]', { queries: 'q', documents: ['a', 2] }],
    ['a content part without a type', 'text_2.content[0].type', { text_1: 'a', text_2: { content: [{ text: 'x' }] } }],
    ['an empty model', 'model', { model: '', text_1: 'a', text_2: 'b' }],
  ])('rejects %s, naming %s', (_name, param, over) => {
    expect(score({ model, ...over })).toBe(param);
  });

  it('tells a body with no pair which fields to send', () => {
    expect(described(scoreRequestSchema, { model, query: 'q', documents: ['d'] }).map((d) => d.message)).toEqual(['text_1 is required', 'text_2 is required']);
  });
});

describe('tokenizeRequestSchema and detokenizeRequestSchema', () => {
  const model = 'meta-llama/Llama-3.1-8B-Instruct';

  it.each([
    ['a prompt (vLLM’s example)', { prompt: 'Hello, my name is', add_special_tokens: true, return_token_strs: true }],
    [
      'a chat with its template options',
      {
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'Hi' },
        ],
        add_generation_prompt: true,
        chat_template_kwargs: { enable_thinking: false },
      },
    ],
    ['an empty chat (the template alone)', { messages: [] }],
    ['token ids as the prompt', { prompt: [128000, 9906] }],
    ['a list of prompts', { prompt: ['a', 'b'] }],
    ['tools beside the chat', { messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'function', function: { name: 'f' } }] }],
  ])('tokenize accepts %s', (_name, over) => {
    expect(tokenize({ model, ...over })).toBeNull();
  });

  it.each([
    ['neither prompt nor messages', 'prompt', {}],
    ['a number for prompt', 'prompt', { prompt: 5 }],
    ['a message without a role', 'messages[0].role', { messages: [{ content: 'x' }] }],
    ['messages as a string', 'messages', { messages: 'Hi' }],
    ['a string add_special_tokens', 'add_special_tokens', { prompt: 'x', add_special_tokens: 'yes' }],
  ])('tokenize rejects %s, naming %s', (_name, param, over) => {
    expect(tokenize({ model, ...over })).toBe(param);
  });

  it('tokenize names a negative token id in a prompt', () => {
    expect(described(tokenizeRequestSchema, { model, prompt: [1, -1] })).toContainEqual({ path: 'prompt[1]', message: 'prompt[1] must be >= 0' });
  });

  it('detokenize accepts token ids, none included', () => {
    expect(detokenize({ model, tokens: [128000, 9906, 11, 856, 836, 374] })).toBeNull();
    expect(detokenize({ model, tokens: [] })).toBeNull();
  });

  it.each([
    ['no tokens', 'tokens', {}],
    ['a negative token', 'tokens[1]', { tokens: [1, -1] }],
    ['a fractional token', 'tokens[0]', { tokens: [1.5] }],
    ['a string of tokens', 'tokens', { tokens: '1 2 3' }],
  ])('detokenize rejects %s, naming %s', (_name, param, over) => {
    expect(detokenize({ model, ...over })).toBe(param);
  });
});

describe('transcriptionFormSchema', () => {
  /** The form an openai SDK call sends, read as the router reads it: text fields as strings, a repeated field as a list, a file as its name, size and type. */
  async function sentForm(call: (client: OpenAI) => Promise<unknown>): Promise<Record<string, unknown>> {
    let form: FormData | undefined;
    const fetch = (_url: string | URL | Request, init?: RequestInit): Promise<Response> => {
      form = init?.body as FormData;
      return Promise.resolve(new Response('{"text":""}', { headers: { 'content-type': 'application/json' } }));
    };
    await call(new OpenAI({ apiKey: 'k', baseURL: 'http://router/v1', fetch, maxRetries: 0 }));
    const fields: Record<string, unknown> = {};
    for (const [name, value] of (form as FormData).entries()) {
      const read = typeof value === 'string' ? value : { filename: value.name, size: value.size, type: value.type };
      const seen = fields[name];
      fields[name] = seen === undefined ? read : Array.isArray(seen) ? [...(seen as unknown[]), read] : [seen, read];
    }
    return fields;
  }
  const wav = (): Promise<File> => toFile(Buffer.from('RIFF\x24\x00\x00\x00WAVEfmt '), 'speech.wav', { type: 'audio/wav' });
  const file = { filename: 'speech.wav', size: 16, type: 'audio/wav' };

  it('accepts what the openai SDK sends for a transcription and a translation', async () => {
    const transcribed = await sentForm(async (c) =>
      c.audio.transcriptions.create({ model: 'whisper', file: await wav(), language: 'en', response_format: 'verbose_json', timestamp_granularities: ['word', 'segment'], temperature: 0.2 }),
    );
    const translated = await sentForm(async (c) => c.audio.translations.create({ model: 'openai/whisper-large-v3', file: await wav(), response_format: 'text', temperature: 0 }));
    const granularities = ['word', 'segment'];
    expect(transcribed).toEqual({ model: 'whisper', file, language: 'en', response_format: 'verbose_json', temperature: '0.2', 'timestamp_granularities[]': granularities });
    expect(transcription(transcribed)).toBeNull();
    expect(transcription(translated)).toBeNull();
  });

  it.each([
    ['a single granularity, as one field', { 'timestamp_granularities[]': 'segment' }],
    ['a prompt in the audio’s language', { language: 'de', prompt: 'Namen: Grüße.' }],
    ['stream as python clients spell it, and vLLM’s stream options', { stream: 'True', stream_include_usage: 'true' }],
    ['temperature 2 and .5, which vLLM samples with', { temperature: '2' }],
    ['a leading-dot temperature', { temperature: '.5' }],
    ['vLLM’s diarized_json', { response_format: 'diarized_json' }],
    ['other fields, passed through', { to_language: 'en', vllm_xargs: '{}' }],
  ])('accepts %s', (_name, over) => {
    expect(transcription({ model: 'w', file, ...over })).toBeNull();
  });

  it.each([
    ['no file', 'file', { file: undefined }],
    ['the file sent as a text field', 'file', { file: 'speech.wav' }],
    ['an empty file', 'file.size', { file: { ...file, size: 0 } }],
    ['no model', 'model', { model: undefined }],
    ['model sent twice', 'model', { model: ['a', 'b'] }],
    ['temperature above 2', 'temperature', { temperature: '2.5' }],
    ['a negative temperature', 'temperature', { temperature: '-0.1' }],
    ['a temperature that is no number', 'temperature', { temperature: 'warm' }],
    ['stream neither true nor false', 'stream', { stream: 'maybe' }],
    ['an unknown response_format', 'response_format', { response_format: 'xml' }],
    ['an unknown granularity', 'timestamp_granularities[]', { 'timestamp_granularities[]': 'char' }],
    ['an unknown granularity in a list', 'timestamp_granularities[][1]', { 'timestamp_granularities[]': ['word', 'char'] }],
  ])('rejects %s, naming %s', (_name, param, over) => {
    expect(transcription({ model: 'w', file, ...over })).toBe(param);
  });
});

describe('the pooling schemas', () => {
  it.each([
    ['rerank', rerankRequestSchema],
    ['score', scoreRequestSchema],
    ['tokenize', tokenizeRequestSchema],
    ['detokenize', detokenizeRequestSchema],
    ['transcription', transcriptionFormSchema],
  ])('%s: requires a non-empty model and closes no object to unknown fields', (_name, schema) => {
    expect(schema.required).toContain('model');
    expect(schema.properties.model).toEqual({ type: 'string', minLength: 1 });
    expect(JSON.stringify(schema)).not.toContain('"additionalProperties":false');
  });
});
