/**
 * Synthetic generation of one choice (chat, completions, responses, messages, transcriptions): text
 * that depends only on (seed, choice index), ending at a synthetic EOS, at `max_tokens` or at a stop
 * string; stop strings hold text back while they could still match, and log-probs come from their
 * own random stream.
 */
import { type ChatJob } from './chat-request.js';
import { createRng, hash53, type Rng } from './prng.js';
import { alternativeTokens, sampleToken } from './text.js';

export interface TokenLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: Array<{ token: string; logprob: number; bytes: number[] }>;
}

export type ChoiceFinish = 'stop' | 'length';

/** What a choice's generation depends on: a chat job has all of it, the other routes build one. */
export type GenerationParams = Pick<ChatJob, 'maxTokens' | 'minTokens' | 'ignoreEos' | 'stop' | 'logprobs' | 'topLogprobs'>;

/** What one decode step produced for one choice. */
export interface ChoiceStep {
  /** Text released to the client this step (may be empty while a stop string could still match). */
  delta: string;
  logprobs: TokenLogprob[];
  finishReason: ChoiceFinish | null;
  stopReason: string | null;
}

const bytesOf = (s: string): number[] => [...Buffer.from(s, 'utf8')];

/**
 * One choice's synthetic generation. Text is a pure function of (seed, choice index); the answer
 * ends at a synthetic EOS drawn from the output-length range, at `max_tokens`, or at a stop string.
 */
export class ChoiceGenerator {
  text = '';
  tokens = 0;
  finishReason: ChoiceFinish | null = null;
  stopReason: string | null = null;
  private released = 0;
  private readonly rng: Rng;
  /** Separate stream so asking for log-probs never changes the text. */
  private readonly logprobRng: Rng;
  private readonly eosAt: number;
  private readonly holdBack: number;

  constructor(
    private readonly job: GenerationParams,
    readonly index: number,
    seed: number,
    outputTokens: { min: number; max: number },
  ) {
    this.rng = createRng(hash53(`${seed}:${index}`));
    this.logprobRng = createRng(hash53(`${seed}:${index}:logprobs`));
    const lengthRng = createRng(hash53(`${seed}:${index}:length`));
    const natural = outputTokens.min + Math.floor(lengthRng() * (outputTokens.max - outputTokens.min + 1));
    this.eosAt = job.ignoreEos ? Infinity : Math.max(job.minTokens, natural);
    this.holdBack = Math.max(0, ...job.stop.map((s) => s.length - 1));
  }

  get finished(): boolean {
    return this.finishReason !== null;
  }

  /** Generates the next token. */
  next(): ChoiceStep {
    const token = sampleToken(this.rng);
    const logprobs = this.job.logprobs ? [this.logprobFor(token)] : [];
    const searchFrom = Math.max(0, this.text.length - this.holdBack);
    this.text += token;
    this.tokens += 1;
    for (const stop of this.job.stop) {
      const at = this.text.indexOf(stop, searchFrom);
      if (at >= 0 && this.tokens > this.job.minTokens) {
        this.text = this.text.slice(0, at);
        return this.release('stop', stop, logprobs);
      }
    }
    if (this.tokens >= this.eosAt) return this.release('stop', null, logprobs);
    if (this.tokens >= this.job.maxTokens) return this.release('length', null, logprobs);
    const until = this.text.length - this.holdBack;
    const delta = until > this.released ? this.text.slice(this.released, until) : '';
    this.released = Math.max(this.released, until);
    return { delta, logprobs, finishReason: null, stopReason: null };
  }

  private release(reason: ChoiceFinish, stop: string | null, logprobs: TokenLogprob[]): ChoiceStep {
    this.finishReason = reason;
    this.stopReason = stop;
    const delta = this.text.slice(this.released);
    this.released = this.text.length;
    return { delta, logprobs, finishReason: reason, stopReason: stop };
  }

  private logprobFor(token: string): TokenLogprob {
    const rng = this.logprobRng;
    const logprob = -rng() * 1.5;
    const alternatives = alternativeTokens(rng, token, Math.max(0, this.job.topLogprobs - 1));
    const top = this.job.topLogprobs > 0 ? [{ token, logprob, bytes: bytesOf(token) }] : [];
    let next = logprob;
    for (const alt of alternatives) {
      next -= 0.1 + rng() * 2;
      top.push({ token: alt, logprob: next, bytes: bytesOf(alt) });
    }
    return { token, logprob, bytes: bytesOf(token), top_logprobs: top };
  }
}
