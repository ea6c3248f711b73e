/**
 * The token loop every generation route shares (chat, completions, responses, messages, audio): the
 * prefill, then one engine step per token for all unfinished choices at once (the first token comes
 * with the prefill), the request's mid-stream faults, and a pause while a streaming client is not
 * reading. Each route renders the steps in its own API's shape.
 */
import { ChoiceGenerator, type ChoiceStep, type GenerationParams } from './chat-generation.js';
import { midFault } from './fault-injection.js';
import { drained } from './http-io.js';
import { promptBlockHashes } from './prefix-cache.js';
import { type InferenceContext, type SlotRun } from './slots.js';

export interface PromptShape {
  /** Rendered prompt text (what the prefix cache hashes). */
  text: string;
  tokens: number;
  /** vLLM's `cache_salt`: mixed into the first block's hash, so a prompt cached under another salt is no hit. */
  salt?: string;
}

export interface DecodeHooks {
  /** After the prefill, before the first token (e.g. chat's role chunks). */
  prefilled?: (cachedTokens: number) => void;
  /** One token of one choice. */
  step: (choice: ChoiceGenerator, step: ChoiceStep) => void;
}

/**
 * `count` choices of one request, choice `i` generating with `paramsOf(i)`; without a seed the request
 * draws one. `outputTokens` overrides the natural answer length of `--output-min`/`--output-max`.
 */
export function choicesFor(
  ctx: InferenceContext,
  paramsOf: (index: number) => GenerationParams,
  count: number,
  seed: number | undefined,
  outputTokens?: { min: number; max: number },
): ChoiceGenerator[] {
  const base = seed ?? Math.floor(ctx.random() * 2 ** 31);
  const natural = outputTokens ?? { min: ctx.options.outputMin, max: ctx.options.outputMax };
  return Array.from({ length: count }, (_, i) => new ChoiceGenerator(paramsOf(i), i, base, natural));
}

/**
 * Prefills `prompt` and decodes `choices` to the end. Returns how many prompt tokens the prefix cache
 * served, or undefined when a fault ended the request (the client then got what the fault sends).
 */
export async function decode(run: SlotRun, prompt: PromptShape, choices: readonly ChoiceGenerator[], hooks: DecodeHooks): Promise<number | undefined> {
  const { ctx, seq, fault, res, signal, stream } = run;
  const cached = await seq.prefill(prompt.tokens, promptBlockHashes(prompt.text, ctx.engine.blockSize, prompt.salt), fault.slowStartMs ?? 0, signal);
  hooks.prefilled?.(cached);
  for (let tokens = 0; ; tokens++) {
    const active = choices.filter((c) => !c.finished);
    if (active.length === 0) break;
    if (tokens === 0) seq.accountGenerated(active.length);
    else await seq.decode(active.length, signal);
    if (await midFault(fault, tokens, res, seq, signal, stream, run.errors)) return undefined;
    for (const choice of active) hooks.step(choice, choice.next());
    if (stream) await drained(res, signal);
  }
  seq.finish(choices.some((c) => c.finishReason === 'length') ? 'length' : 'stop');
  return cached;
}
