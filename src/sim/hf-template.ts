/**
 * A model's own chat template and tokenizer for the simulator (`--tokenizer-dir DIR`: the directory of
 * a model's `tokenizer.json` and `tokenizer_config.json`, as vLLM loads them). With it the simulator
 * renders chats as that model's engine would and publishes its KV events with that tokenizer's ids, so
 * a router in `kvEvents.tokenizer: huggingface` mode can be tested end to end. The two Hugging Face
 * libraries are loaded only then (server.ts imports this module for the flag).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Template } from '@huggingface/jinja';
import { Tokenizer as UntypedTokenizer } from '@huggingface/tokenizers';

/** The Tokenizer's documented API used here (its published declarations do not resolve under NodeNext). */
interface Tokenizer {
  encode(text: string, options?: { add_special_tokens?: boolean }): { ids: number[] };
}
const TokenizerClass = UntypedTokenizer as unknown as new (tokenizerJson: object, config: object) => Tokenizer;

export class SimTokenizerError extends Error {
  readonly code = 'SIM_BAD_TOKENIZER';
}

const specialText = (value: unknown): string =>
  typeof value === 'string' ? value : typeof value === 'object' && value !== null && typeof (value as { content?: unknown }).content === 'string' ? (value as { content: string }).content : '';

/** A message's content as vLLM gives a string-content template: text parts joined by newlines. */
function contentText(content: unknown): unknown {
  if (!Array.isArray(content)) return content;
  return content
    .filter((p: unknown): p is { text: string } => typeof p === 'object' && p !== null && typeof (p as { text?: unknown }).text === 'string')
    .map((p) => p.text)
    .join('\n');
}

export class SimChatModel {
  private constructor(
    private readonly tokenizer: Tokenizer,
    private readonly template: Template,
    private readonly specials: Record<string, string>,
  ) {}

  static async load(dir: string): Promise<SimChatModel> {
    const read = async (file: string): Promise<Record<string, unknown>> => {
      const path = join(dir, file);
      try {
        return JSON.parse(await readFile(path, 'utf8')) as Record<string, unknown>;
      } catch (err) {
        throw new SimTokenizerError(`--tokenizer-dir: cannot read ${path}: ${(err as Error).message}`);
      }
    };
    const [tokenizerJson, config] = await Promise.all([read('tokenizer.json'), read('tokenizer_config.json')]);
    const source = config.chat_template;
    if (typeof source !== 'string') throw new SimTokenizerError(`--tokenizer-dir: ${join(dir, 'tokenizer_config.json')} has no chat_template string`);
    const specials: Record<string, string> = {};
    for (const name of ['bos_token', 'eos_token', 'pad_token', 'unk_token']) specials[name] = specialText(config[name]);
    return new SimChatModel(new TokenizerClass(tokenizerJson, config), new Template(source), specials);
  }

  /** The conversation as the template renders it (`tools` when some are given). */
  render(messages: readonly unknown[], addGenerationPrompt: boolean, tools: unknown): string {
    const list = messages.map((m) => (typeof m === 'object' && m !== null ? { ...m, content: contentText((m as { content?: unknown }).content) } : m));
    const items: Record<string, unknown> = { messages: list, add_generation_prompt: addGenerationPrompt, ...this.specials };
    if (Array.isArray(tools) && tools.length > 0) items.tools = tools;
    return this.template.render(items);
  }

  /** Token ids of rendered text (special tokens are matched as text, none added). */
  readonly encode = (text: string): number[] => this.tokenizer.encode(text, { add_special_tokens: false }).ids;
}
