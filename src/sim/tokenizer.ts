/**
 * The simulator's reversible tokenizer, behind `/tokenize`, `/detokenize` and token-id prompts. It
 * agrees with {@link countTokens} on ASCII text: a token is a run of up to {@link CHARS_PER_TOKEN}
 * ASCII characters, packed 7 bits each into the id with the run length; any other UTF-16 unit is a
 * token of its own. So `detokenize(tokenize(text)) === text` for every string.
 */
import { fail } from './request-checks.js';
import { CHARS_PER_TOKEN } from './text.js';

const ASCII_IDS = 2 ** (7 * CHARS_PER_TOKEN) * CHARS_PER_TOKEN;
/** Ids from 0 to VOCAB_SIZE - 1 decode to text. */
export const VOCAB_SIZE = ASCII_IDS + 0x10000;

/** The text of each token of `text`. */
export function tokenPieces(text: string): string[] {
  const pieces: string[] = [];
  let run = '';
  const flush = (): void => {
    if (run !== '') pieces.push(run);
    run = '';
  };
  for (let i = 0; i < text.length; i++) {
    const ch = text[i] ?? '';
    if (ch.charCodeAt(0) >= 128) {
      flush();
      pieces.push(ch);
      continue;
    }
    run += ch;
    if (run.length === CHARS_PER_TOKEN) flush();
  }
  flush();
  return pieces;
}

function pieceId(piece: string): number {
  if (piece.charCodeAt(0) >= 128) return ASCII_IDS + piece.charCodeAt(0);
  let packed = 0;
  for (let i = piece.length - 1; i >= 0; i--) packed = packed * 128 + piece.charCodeAt(i);
  return packed * CHARS_PER_TOKEN + piece.length - 1;
}

function idText(id: number): string {
  if (id >= ASCII_IDS) return String.fromCharCode(id - ASCII_IDS);
  let packed = Math.floor(id / CHARS_PER_TOKEN);
  let out = '';
  for (let i = 0; i <= id % CHARS_PER_TOKEN; i++, packed = Math.floor(packed / 128)) out += String.fromCharCode(packed % 128);
  return out;
}

export function tokenize(text: string): number[] {
  return tokenPieces(text).map(pieceId);
}

/** The text of token ids (from {@link checkTokenIds}). */
export function detokenize(ids: readonly number[]): string {
  return ids.map(idText).join('');
}

/** `ids` as token ids, or a 400 on `param` naming the first one outside the vocabulary. */
export function checkTokenIds(ids: readonly unknown[], param: string): number[] {
  const bad = ids.find((id) => !Number.isInteger(id) || (id as number) < 0 || (id as number) >= VOCAB_SIZE);
  if (bad !== undefined) fail(`Token id ${JSON.stringify(bad)} is out of vocabulary (vocabulary size ${VOCAB_SIZE}).`, param);
  return ids as number[];
}
