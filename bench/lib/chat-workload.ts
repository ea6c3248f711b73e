/**
 * The shared-prefix chat workload of the prefix benchmarks (bench/prefix.ts, bench/kv-events.ts):
 * `systemPrompts` long system prompts, and interleaved multi-turn chats over them. Deterministic
 * (seeded), so every policy of a run gets the same bodies.
 */
import { logNormal, mulberry32 } from './random.js';

/** The simulator's characters per token (src/sim/text.ts). */
export const CHARS_PER_TOKEN = 4;

const WORDS = (
  'the of and to in is that for it as with was on be by this are or from at an but not have which one all were they their ' +
  'model token cache replica router stream batch queue prefix engine kernel tensor matrix vector layer weight value signal ' +
  'river mountain garden winter summer ocean forest meadow harbor lantern copper silver amber quiet bright rapid gentle ' +
  'policy customer invoice refund account contract shipment warranty support ticket escalate summary answer explain'
).split(' ');

/** `chars` characters of random words. */
export function text(random: () => number, chars: number): string {
  let out = '';
  while (out.length < chars) out += WORDS[Math.floor(random() * WORDS.length)] + ' ';
  return out.slice(0, chars);
}

export interface Message {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

export interface SharedSet {
  prompts: string[];
  /** Each prompt's length in tokens. */
  tokens: number[];
}

/** `count` system prompts of 2,000–3,000 tokens, one per desk. */
export function systemPrompts(count: number): SharedSet {
  const random = mulberry32(7);
  const prompts: string[] = [];
  const tokens: number[] = [];
  for (let k = 0; k < count; k++) {
    const t = 2000 + Math.floor(random() * 1001);
    prompts.push(`You are assistant ${k} of the ${['billing', 'shipping', 'legal', 'travel', 'medical', 'retail', 'banking', 'support'][k % 8]} desk. ` + text(random, t * CHARS_PER_TOKEN));
    tokens.push(t);
  }
  return { prompts, tokens };
}

/**
 * `count` streamed chat bodies for `model`: `conversations` chats in progress, taken in turn (one
 * request of each, then the next turn of each), so a conversation's next turn always comes later in
 * the order than its last one. A chat keeps one system prompt for 2–8 turns, each turn's request
 * carrying every earlier user and assistant message; when it ends, a new chat takes its place.
 * `system[i]` is the system prompt body `i` starts with.
 */
export function sharedChats(shared: SharedSet, options: { model: string; count: number; conversations: number }): { bodies: string[]; system: number[] } {
  const random = mulberry32(11);
  const bodies: string[] = [];
  const system: number[] = [];
  let id = 0;
  const fresh = (): { system: number; turns: number; messages: Message[]; id: number } => {
    const k = Math.floor(random() * shared.prompts.length);
    return { system: k, turns: 2 + Math.floor(random() * 7), messages: [{ role: 'system', content: shared.prompts[k]! }], id: id++ };
  };
  const slots = Array.from({ length: options.conversations }, fresh);
  while (bodies.length < options.count) {
    for (let s = 0; s < slots.length && bodies.length < options.count; s++) {
      const chat = slots[s]!;
      const userTokens = Math.min(600, Math.max(8, Math.round(logNormal(random, 80, 0.7))));
      const output = Math.min(192, Math.max(8, Math.round(logNormal(random, 48, 0.6))));
      chat.messages.push({ role: 'user', content: `[chat ${chat.id}] ` + text(random, userTokens * CHARS_PER_TOKEN) });
      bodies.push(JSON.stringify({ model: options.model, messages: chat.messages, max_tokens: output, ignore_eos: true, stream: true }));
      system.push(chat.system);
      // the answer the client will send back with its next turn
      chat.messages = [...chat.messages, { role: 'assistant', content: text(random, output * CHARS_PER_TOKEN) }];
      if (chat.messages.filter((m) => m.role === 'user').length >= chat.turns) slots[s] = fresh();
    }
  }
  return { bodies, system };
}
