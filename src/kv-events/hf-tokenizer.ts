/**
 * A model's own tokenizer and chat template, for pools with `kvEvents.tokenizer: huggingface`: the
 * files vLLM loads (`tokenizer.json`, `tokenizer_config.json`) read with the official pure-JS
 * `@huggingface/tokenizers` and `@huggingface/jinja`. The request side renders a chat the way the
 * engine does (the template, `add_generation_prompt`, the config's special tokens), so the router's
 * prefix text is the engine's prompt text; the event side reads an engine block's token ids back as
 * text, continuing along the block chain (see {@link HfModel.readBlock}). Both libraries are loaded
 * by {@link loadHfModel}, only for a pool in this mode.
 */
import { readFile, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';

/** The tokenizer files could not be used; the message names the file and the fix. */
export class KvTokenizerError extends Error {
  readonly code = 'KV_TOKENIZER_UNUSABLE';
}

/** The files a tokenizer directory must hold (those vLLM loads from a model's directory). */
export const TOKENIZER_FILES = ['tokenizer.json', 'tokenizer_config.json'] as const;

/**
 * Where decoding a block chain stands: the last token ids already read (context, so the next block's
 * text is decoded with its neighbours) followed by ids not read yet (the start of a multi-byte character
 * the next block completes).
 */
export interface DecodeTail {
  readonly ids: readonly number[];
  /** How many leading `ids` were read to text already. */
  readonly read: number;
}

export const EMPTY_TAIL: DecodeTail = { ids: [], read: 0 };

/** A request's conversation as the template takes it. */
export interface TemplateInput {
  /** `chat` (messages, tools) or `completions` (prompt); others have no template rendering here. */
  readonly api: string;
  readonly body: Readonly<Record<string, unknown>>;
}

/**
 * How much of a chat the template is given, at most; a larger chat is routed by the estimate for that
 * pick, as a chat whose template fails is. A template's cost is in the items it walks (messages,
 * content parts, tools and what they hold, counted as array elements and object keys: a few µs each,
 * so 300,000 one-character messages, a 9.8 MB body, held the event loop for a second before the engine
 * refused it), and in the characters it copies or escapes (`tojson` of a tool). 4,096 items is a long
 * agent session (a plain message is 3, a tool with its schema 20 to 100), and 16 times the characters
 * the prefix scorer uses (`maxBlocks × blockChars`, 16,384 by default) is a prompt most of which the
 * scorer never reads.
 */
export const TEMPLATE_BUDGET = { items: 4096, charsPerUsedChar: 16 } as const;

/**
 * Whether `values` hold more than `budget.items` items (array elements, object keys) or `budget.chars`
 * characters (strings and keys), counted together; it stops as soon as either runs out, so its own
 * work is bounded by the budget (but for the keys of one object, which V8 lists all at once: a tool
 * schema of 300,000 keys takes about 60 ms to give up on, less than half what JSON.parse took to make it).
 */
function oversize(values: readonly unknown[], budget: { items: number; chars: number }): boolean {
  let { items, chars } = budget;
  const stack: unknown[] = [...values];
  while (stack.length > 0) {
    const value = stack.pop();
    if (typeof value === 'string') chars -= value.length;
    else if (Array.isArray(value)) {
      items -= value.length;
      if (items < 0) return true;
      for (const v of value) stack.push(v);
    } else if (typeof value === 'object' && value !== null) {
      // key by key, not Object.keys: an object of 300,000 keys is given up on after the budget's
      for (const k in value) {
        if (--items < 0) return true;
        chars -= k.length;
        const v = (value as Record<string, unknown>)[k];
        // of a message's list of parts the template gets only the text (contentText): an inline image counts as one item
        if (k === 'content' && Array.isArray(v)) {
          items -= v.length;
          if (items < 0) return true;
          for (const part of v as unknown[]) if (typeof part === 'object' && part !== null) stack.push((part as { text?: unknown }).text);
        } else stack.push(v);
      }
    }
    if (chars < 0) return true;
  }
  return false;
}

/** Tokens kept before a block as context: enough for a SentencePiece leading space or a byte-level character (4 bytes). */
const CONTEXT_TOKENS = 4;
const REPLACEMENT = '\uFFFD';

/**
 * The parts of `@huggingface/tokenizers`' Tokenizer used here, as its README documents them (its
 * published type declarations import without file extensions, which NodeNext resolution cannot follow).
 */
interface HfTokenizer {
  encode(text: string, options?: { add_special_tokens?: boolean }): { ids: number[] };
  decode(ids: number[], options?: { skip_special_tokens?: boolean; clean_up_tokenization_spaces?: boolean }): string;
}

interface HfTemplate {
  render(items: Record<string, unknown>): string;
}

/** A special token as tokenizer_config.json writes it: a string, or an AddedToken object. */
function tokenText(value: unknown): string {
  if (typeof value === 'string') return value;
  if (typeof value === 'object' && value !== null && typeof (value as { content?: unknown }).content === 'string') return (value as { content: string }).content;
  return '';
}

/** A message's content as vLLM hands it to a string-content template: text parts joined by newlines. */
function contentText(content: unknown): unknown {
  if (!Array.isArray(content)) return content;
  const texts: string[] = [];
  for (const part of content) {
    if (typeof part === 'object' && part !== null && typeof (part as { text?: unknown }).text === 'string') texts.push((part as { text: string }).text);
  }
  return texts.join('\n');
}

export class HfModel {
  /** The template's special-token variables (bos_token, eos_token…), as transformers passes them. */
  private readonly specials: Record<string, string>;
  /** What the tokenizer puts before a completions prompt (its BOS, if it adds one), as text. */
  private readonly promptPrefix: string;

  constructor(
    private readonly tokenizer: HfTokenizer,
    private readonly template: HfTemplate | undefined,
    config: Readonly<Record<string, unknown>>,
  ) {
    this.specials = {};
    for (const name of ['bos_token', 'eos_token', 'pad_token', 'unk_token']) this.specials[name] = tokenText(config[name]);
    const ids = tokenizer.encode('', { add_special_tokens: true }).ids;
    this.promptPrefix = ids.length === 0 ? '' : this.decode(ids);
  }

  /** The text of token ids, special tokens kept as their text ('' for none). */
  decode(ids: readonly number[]): string {
    return ids.length === 0 ? '' : this.tokenizer.decode([...ids], { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  }

  /** Token ids of `text` as the engine tokenizes a rendered chat (no special tokens added). */
  encode(text: string): number[] {
    return this.tokenizer.encode(text, { add_special_tokens: false }).ids;
  }

  /** The chat rendered by the model's template, as vLLM renders it (with the generation prompt). */
  /** The special tokens a render is given (`bos_token` and the like). */
  specialTokens(): Record<string, string> {
    return { ...this.specials };
  }

  renderChat(messages: unknown, tools?: unknown): string {
    if (!this.template) throw new KvTokenizerError('tokenizer_config.json has no chat_template');
    const list = Array.isArray(messages) ? messages.map((m: unknown) => (typeof m === 'object' && m !== null ? { ...m, content: contentText((m as { content?: unknown }).content) } : m)) : [];
    const items: Record<string, unknown> = { messages: list, add_generation_prompt: true, ...this.specials };
    if (Array.isArray(tools) && tools.length > 0) items.tools = tools;
    return this.template.render(items);
  }

  /**
   * The engine's prompt text for a request: a chat rendered by the template, a completions prompt
   * after the tokenizer's own prefix (token-id prompts decoded); undefined for other APIs, a content
   * the template cannot take, or a template that fails. `usedChars` (the prefix scorer's `maxBlocks ×
   * blockChars`) bounds the work: a chat over {@link TEMPLATE_BUDGET} is not rendered (undefined), and
   * of a token-id prompt only the ids that can make up those characters are decoded.
   */
  promptText(input: TemplateInput, usedChars = Infinity): string | undefined {
    const { body } = input;
    try {
      if (input.api === 'chat') {
        const budget = { items: TEMPLATE_BUDGET.items, chars: TEMPLATE_BUDGET.charsPerUsedChar * usedChars };
        if (oversize([body.messages, body.tools], budget)) return undefined;
        return this.renderChat(body.messages, body.tools);
      }
      if (input.api !== 'completions') return undefined;
      const prompt = body.prompt;
      const first: unknown = Array.isArray(prompt) && (typeof prompt[0] === 'string' || Array.isArray(prompt[0])) ? prompt[0] : prompt;
      if (typeof first === 'string') return this.promptPrefix + first;
      if (!Array.isArray(first) || first.length === 0) return undefined;
      // every id gives at least a byte, and a character takes at most 4: the decoded ids' text is the prompt's as far as it is used
      const ids = first.length > 4 * usedChars ? first.slice(0, 4 * usedChars) : first;
      if (ids.every((id) => Number.isInteger(id) && (id as number) >= 0)) return this.decode(ids as number[]);
      return undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * The text one engine block adds to its chain. A block decoded alone can be wrong at its edges
   * (byte-level BPE splits a multi-byte character over two tokens, which two blocks may hold;
   * SentencePiece drops the leading space of the first token it decodes), so the block is decoded after
   * the tail of the chain before it and that tail's text is taken off; ids that end inside a character
   * are held in the tail until the next block completes them.
   */
  readBlock(tail: DecodeTail, ids: readonly number[]): { text: string; tail: DecodeTail } {
    const all = tail.ids.length === 0 ? [...ids] : [...tail.ids, ...ids];
    const before = this.decode(all.slice(0, tail.read));
    let end = all.length;
    const whole = this.decode(all);
    let full = whole;
    // ids cut inside a character decode to U+FFFD: hold them back (at most a character's 4 bytes' worth)
    while (full.endsWith(REPLACEMENT) && end > tail.read && all.length - end < CONTEXT_TOKENS) {
      end--;
      full = this.decode(all.slice(0, end));
    }
    if (full.endsWith(REPLACEMENT)) {
      end = all.length; // a real U+FFFD in the text (its decode kept: no need to decode it again)
      full = whole;
    }
    const text = full.startsWith(before) ? full.slice(before.length) : full.slice(Math.min(before.length, full.length));
    const start = Math.max(0, end - CONTEXT_TOKENS);
    return { text, tail: { ids: all.slice(start), read: end - start } };
  }
}

/** tokenizer_config.json's `chat_template`: a string, or named templates of which `default` is the chat's. */
function chatTemplate(value: unknown): unknown {
  if (!Array.isArray(value)) return value;
  const named = value.find((t: unknown) => typeof t === 'object' && t !== null && (t as { name?: unknown }).name === 'default') as { template?: unknown } | undefined;
  return named?.template;
}

async function readJson(dir: string, file: string): Promise<Record<string, unknown>> {
  const path = join(dir, file);
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new KvTokenizerError(`cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}): kvEvents.tokenizerDir must hold the model's ${TOKENIZER_FILES.join(' and ')}`);
  }
  try {
    const data: unknown = JSON.parse(text);
    if (typeof data !== 'object' || data === null || Array.isArray(data)) throw new Error('not a JSON object');
    return data as Record<string, unknown>;
  } catch (err) {
    throw new KvTokenizerError(`${path} is not a tokenizer file: ${(err as Error).message}`);
  }
}

/** The tokenizer files' modification times and sizes, as a string that changes when one of them does (a ConfigMap mount's update swaps a symlink: followed). */
export async function tokenizerStamp(dir: string): Promise<string> {
  const stats = await Promise.all(TOKENIZER_FILES.map((file) => stat(join(dir, file))));
  return stats.map((s) => `${s.mtimeMs}:${s.size}`).join(' ');
}

/** How long a chat_template may take to render a short chat when it is loaded. */
export const TEMPLATE_CHECK_MS = 1000;

/** The worker that renders a template once, in isolation (plain CommonJS: it runs as given, in tests too). */
const TEMPLATE_CHECK_WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const { Template } = require(workerData.jinja);
try {
  new Template(workerData.source).render(workerData.items);
  parentPort.postMessage('rendered');
} catch {
  parentPort.postMessage('threw');
}
`;

/**
 * Renders `source` once with a short chat in a worker thread, stopped after {@link TEMPLATE_CHECK_MS}:
 * the router renders a pool's template for each chat it routes, on the event loop every tenant's
 * requests share, so a template that loops for seconds (or for ever) is refused when it is loaded
 * rather than found at the first request; so is one that needs more than 256 MiB for it. A template
 * that throws on the short chat is not refused here: such chats are routed by the estimate, like every
 * render that fails.
 */
async function checkTemplate(source: string, specials: Record<string, string>, file: string): Promise<void> {
  const jinja = createRequire(import.meta.url).resolve('@huggingface/jinja');
  const items = {
    messages: [
      { role: 'system', content: 'You are helpful.' },
      { role: 'user', content: 'Hello!' },
    ],
    add_generation_prompt: true,
    ...specials,
  };
  const worker = new Worker(TEMPLATE_CHECK_WORKER, { eval: true, workerData: { jinja, source, items }, resourceLimits: { maxOldGenerationSizeMb: 256 } });
  let timer: NodeJS.Timeout | undefined;
  try {
    const done = await Promise.race([
      new Promise<'rendered' | 'memory'>((resolve) => {
        worker.once('message', () => resolve('rendered')); // or it threw: such chats go by the estimate
        worker.once('error', () => resolve('memory')); // the worker's own failure: its heap's limit
        worker.once('exit', () => resolve('memory'));
      }),
      // timed from when the worker runs (a thread's start on a busy machine is not the template's)
      new Promise<'slow'>((resolve) => worker.once('online', () => (timer = setTimeout(() => resolve('slow'), TEMPLATE_CHECK_MS)))),
    ]);
    const why = done === 'slow' ? `took over ${TEMPLATE_CHECK_MS} ms` : done === 'memory' ? 'ran out of 256 MiB of memory' : undefined;
    if (why) throw new KvTokenizerError(`the chat_template of ${file} ${why} to render a two-message chat: the router renders it for every chat it routes`);
  } finally {
    clearTimeout(timer);
    await worker.terminate();
  }
}

/** Reads a tokenizer directory and loads both libraries (by dynamic import: only a pool in this mode pays for them). */
export async function loadHfModel(dir: string): Promise<HfModel> {
  // both read at once; when both fail, tokenizer.json's error is the one said (whichever failed first was a race)
  const [tokenizerRead, configRead] = await Promise.allSettled([readJson(dir, TOKENIZER_FILES[0]), readJson(dir, TOKENIZER_FILES[1])]);
  if (tokenizerRead.status === 'rejected') throw tokenizerRead.reason;
  if (configRead.status === 'rejected') throw configRead.reason;
  const [tokenizerJson, config] = [tokenizerRead.value, configRead.value];
  const [tokenizers, { Template }] = await Promise.all([import('@huggingface/tokenizers'), import('@huggingface/jinja')]);
  const Tokenizer = tokenizers.Tokenizer as unknown as new (tokenizerJson: object, config: object) => HfTokenizer;
  let tokenizer: HfTokenizer;
  let template: HfTemplate | undefined;
  try {
    tokenizer = new Tokenizer(tokenizerJson, config);
  } catch (err) {
    throw new KvTokenizerError(`${join(dir, 'tokenizer.json')} could not be loaded: ${(err as Error).message}`);
  }
  const source = chatTemplate(config.chat_template);
  try {
    template = typeof source === 'string' ? new Template(source) : undefined;
  } catch (err) {
    throw new KvTokenizerError(`the chat_template of ${join(dir, 'tokenizer_config.json')} does not parse: ${(err as Error).message}`);
  }
  const model = new HfModel(tokenizer, template, config);
  if (typeof source === 'string') await checkTemplate(source, model.specialTokens(), join(dir, 'tokenizer_config.json'));
  return model;
}
