/**
 * Synthetic tokens. The simulator has no tokenizer: a prompt costs about one token per
 * {@link CHARS_PER_TOKEN} characters, and every generated token is one word from a fixed
 * vocabulary, so `usage` always matches the text that was produced.
 */
import { type Rng } from './prng.js';

export const CHARS_PER_TOKEN = 4;

const VOCABULARY = (
  'the of and to in is that for it as with was on be by this are or from at an but not have ' +
  'which one all were they their has been can more when there will would about into than its ' +
  'model token cache replica router stream batch queue prefix engine kernel tensor matrix vector ' +
  'layer weight value signal metric latency request answer window context prompt sample shard ' +
  'river mountain garden winter summer ocean forest meadow harbor lantern copper silver amber ' +
  'quiet bright rapid gentle hollow narrow steady golden distant ancient simple careful early ' +
  'build carry gather follow measure balance answer listen travel remember discover explain ' +
  'north south east west above below between across beyond within without during before after'
).split(' ');

/** Number of synthetic tokens in a piece of text (never less than 1 for non-empty text). */
export function countTokens(text: string): number {
  return Math.ceil(text.length / CHARS_PER_TOKEN);
}

/** The text of one generated token: a space and a word, like a BPE token with a leading space. */
export function sampleToken(rng: Rng): string {
  return ' ' + (VOCABULARY[Math.floor(rng() * VOCABULARY.length)] ?? 'the');
}

/** Alternatives for `top_logprobs`: distinct words other than `chosen`. */
export function alternativeTokens(rng: Rng, chosen: string, count: number): string[] {
  const out: string[] = [];
  let guard = 0;
  while (out.length < count && guard++ < count * 20) {
    const token = sampleToken(rng);
    if (token !== chosen && !out.includes(token)) out.push(token);
  }
  return out;
}
