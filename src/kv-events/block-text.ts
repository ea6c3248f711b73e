/**
 * From an engine's blocks to the router's prefix blocks. The router cuts a request's prompt text
 * (api/prompt-text.ts: each message as `role\ntext\n`) into blocks of `prefix.blockChars` characters
 * whose hashes chain (balancer/prefix-index.ts `promptBlocks`). An engine's block is a run of token
 * ids of its own rendering of the prompt (its chat template). To say which router blocks a replica
 * holds, the router must read the engine's tokens back as text and undo the template — possible
 * only when it knows the tokenizer and the template.
 *
 * It knows them for `modelgate sim` (pools with `kvEvents.tokenizer: simulator`): the simulator's
 * tokenizer is reversible (src/sim/tokenizer.ts: up to four ASCII characters packed 7 bits each into
 * one id, every other UTF-16 unit an id of its own) and its template is ChatML
 * (`<|im_start|>role\ntext<|im_end|>\n`), which without its two markers is exactly the router's
 * rendering. For a real engine the router knows them when the pool names the model's tokenizer files
 * (`kvEvents.tokenizer: huggingface`, hf-tokenizer.ts): then the request side renders the engine's
 * template too, so the markers stay (`strip` false) and the blocks' token ids are read along the chain
 * (the state's `tail`). Otherwise a real engine's token ids are opaque here.
 */
import { hash53 } from '../core/hash.js';
import type { DecodeTail } from './hf-tokenizer.js';

/** The simulator's tokenizer (src/sim/tokenizer.ts, which the router does not import): characters per packed token. */
const SIM_CHARS_PER_TOKEN = 4;
const SIM_ASCII_IDS = 2 ** (7 * SIM_CHARS_PER_TOKEN) * SIM_CHARS_PER_TOKEN;

/** The text of simulator token ids. */
export function simulatorText(ids: readonly number[], from = 0, to = ids.length): string {
  let out = '';
  for (let k = from; k < to; k++) {
    const id = ids[k] as number;
    if (id >= SIM_ASCII_IDS) {
      out += String.fromCharCode(id - SIM_ASCII_IDS);
      continue;
    }
    let packed = Math.floor(id / SIM_CHARS_PER_TOKEN);
    for (let i = 0; i <= id % SIM_CHARS_PER_TOKEN; i++, packed = Math.floor(packed / 128)) out += String.fromCharCode(packed % 128);
  }
  return out;
}

/** ChatML's markers: the template's own text, not the conversation's. */
const MARKERS = ['<|im_start|>', '<|im_end|>'] as const;

/** The longest end of `text` that could begin a marker (it is completed, or not, by the next block). */
function markerTail(text: string): number {
  const longest = Math.min(text.length, 11);
  for (let n = longest; n > 0; n--) {
    const tail = text.slice(text.length - n);
    if (MARKERS.some((m) => m.length > n && m.startsWith(tail))) return n;
  }
  return 0;
}

/**
 * Where a chain of engine blocks leaves the router's blocks: the chained hash of the last full router
 * block, the text after it, and template text held back until the next block says whether it is a marker.
 */
export interface ChainState {
  readonly hash: number;
  readonly pending: string;
  readonly held: string;
  /** The model tokenizer's decoding state (huggingface mode). */
  readonly tail?: DecodeTail;
}

/** Before the first block of a prompt. */
export const CHAIN_START: ChainState = { hash: 0, pending: '', held: '' };

/**
 * Continues `state` over one engine block's rendered text: the router blocks completed within it
 * (their chained hashes, as `promptBlocks` computes them over the router's text) and the state after it.
 * `strip`: drop ChatML's markers (the simulator mode: the router's text is the conversation without them).
 */
export function continueChain(state: ChainState, blockText: string, blockChars: number, strip = true): { state: ChainState; keys: number[] } {
  let text = state.held + blockText;
  if (strip) for (const marker of MARKERS) if (text.includes(marker)) text = text.split(marker).join('');
  const held = strip ? markerTail(text) : 0;
  let pending = state.pending + (held === 0 ? text : text.slice(0, text.length - held));
  let hash = state.hash;
  const keys: number[] = [];
  let at = 0;
  while (pending.length - at >= blockChars) {
    hash = hash53(pending, hash % 4294967296, at, at + blockChars);
    keys.push(hash);
    at += blockChars;
  }
  if (at > 0) pending = pending.slice(at);
  return { state: { hash, pending, held: held === 0 ? '' : text.slice(text.length - held) }, keys };
}
