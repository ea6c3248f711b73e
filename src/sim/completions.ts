/**
 * `POST /v1/completions` in vLLM's shapes: one choice per prompt × `n` (choice `p·n + i`), `echo`
 * putting the prompt in front of the text (in the first chunk when streaming), and the legacy
 * `logprobs` object (tokens, token_logprobs, top_logprobs as {token: logprob}, text_offset).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { type TokenLogprob } from './chat-generation.js';
import { DONE_EVENT, type Usage } from './chat-response.js';
import { completionParams, parseCompletionRequest, type CompletionJob, type CompletionPrompt } from './completions-request.js';
import { choicesFor, decode } from './decode-loop.js';
import { newId, readJsonBody, sendJson, unixNow } from './http-io.js';
import { hash53 } from './prng.js';
import { inSlot, type InferenceContext, type SlotRun } from './slots.js';
import { tokenPieces } from './tokenizer.js';

interface CompletionLogprobs {
  text_offset: number[];
  token_logprobs: Array<number | null>;
  tokens: string[];
  top_logprobs: Array<Record<string, number> | null>;
}

const noLogprobs = (): CompletionLogprobs => ({ text_offset: [], token_logprobs: [], tokens: [], top_logprobs: [] });

function append(into: CompletionLogprobs, offset: number, token: string, logprob: number | null, top: Record<string, number> | null): number {
  into.text_offset.push(offset);
  into.tokens.push(token);
  into.token_logprobs.push(logprob);
  into.top_logprobs.push(top);
  return offset + token.length;
}

/** Echoed prompt tokens: the first has no log-prob (as in vLLM), the others a stable made-up one. */
function promptLogprobs(prompt: string, into: CompletionLogprobs): number {
  let offset = 0;
  tokenPieces(prompt).forEach((piece, i) => {
    const logprob = i === 0 ? null : -(hash53(`${i}:${piece}`) % 4000) / 1000;
    offset = append(into, offset, piece, logprob, logprob === null ? null : { [piece]: logprob });
  });
  return offset;
}

/** One choice's text and log-probs as they leave the server. */
class ChoiceOutput {
  /** Generated tokens whose log-probs were not sent yet. */
  readonly pending: TokenLogprob[] = [];
  started = false;
  private offset = 0;

  constructor(
    readonly prompt: CompletionPrompt,
    private readonly job: CompletionJob,
  ) {}

  /** The next piece of text: the prompt goes in front of the first one with `echo`. */
  text(delta: string): string {
    return !this.started && this.job.echo ? this.prompt.text + delta : delta;
  }

  /** Log-probs of the next piece (echoed prompt tokens first), or null when not asked for. */
  logprobs(): CompletionLogprobs | null {
    if (this.job.logprobs === undefined) return null;
    const out = noLogprobs();
    if (!this.started && this.job.echo) this.offset = promptLogprobs(this.prompt.text, out);
    for (const t of this.pending.splice(0)) {
      const top = t.top_logprobs.length > 0 ? t.top_logprobs : [t];
      this.offset = append(out, this.offset, t.token, t.logprob, Object.fromEntries(top.map((alt) => [alt.token, alt.logprob])));
    }
    return out;
  }
}

export async function handleCompletions(ctx: InferenceContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const job = parseCompletionRequest(await readJsonBody(req, ctx.options.maxBodyBytes), { models: ctx.options.model, maxModelLen: ctx.options.maxModelLen });
  await inSlot(ctx, req, res, { stream: job.stream, model: job.model }, (run) => generate(run, job));
}

async function generate(run: SlotRun, job: CompletionJob): Promise<void> {
  const promptOf = (index: number): CompletionPrompt => job.prompts[Math.floor(index / job.n)] ?? job.prompts[0]!;
  const choices = choicesFor(run.ctx, (i) => completionParams(job, promptOf(i)), job.prompts.length * job.n, job.seed);
  const outputs = choices.map((c) => new ChoiceOutput(promptOf(c.index), job));
  const id = `cmpl-${newId()}`;
  const created = unixNow();
  const head = `data: {"id":${JSON.stringify(id)},"object":"text_completion","created":${created},"model":${JSON.stringify(job.model)},`;
  const prompt = { text: job.prompts.map((p) => p.text).join('\n'), tokens: job.promptTokens, ...(job.cacheSalt !== undefined ? { salt: job.cacheSalt } : {}) };

  const cached = await decode(run, prompt, choices, {
    step: (choice, step) => {
      const out = outputs[choice.index]!;
      out.pending.push(...step.logprobs);
      if (!job.stream || (step.delta === '' && !step.finishReason && (out.started || !job.echo))) return;
      const chunk = { index: choice.index, text: out.text(step.delta), logprobs: out.logprobs(), finish_reason: step.finishReason, stop_reason: step.stopReason };
      out.started = true;
      run.res.write(`${head}"choices":[${JSON.stringify(chunk)}],"usage":null}\n\n`);
    },
  });
  if (cached === undefined) return;
  const completion = choices.reduce((sum, c) => sum + c.tokens, 0);
  const usage: Usage = { prompt_tokens: job.promptTokens, total_tokens: job.promptTokens + completion, completion_tokens: completion, prompt_tokens_details: { cached_tokens: cached } };
  if (job.stream) {
    run.res.end((job.includeUsage ? `${head}"choices":[],"usage":${JSON.stringify(usage)}}\n\n` : '') + DONE_EVENT);
    return;
  }
  const body = {
    id,
    object: 'text_completion',
    created,
    model: job.model,
    choices: choices.map((c) => {
      const out = outputs[c.index]!;
      return { index: c.index, text: out.text(c.text), logprobs: out.logprobs(), finish_reason: c.finishReason, stop_reason: c.stopReason, prompt_logprobs: null };
    }),
    service_tier: null,
    system_fingerprint: null,
    usage,
    kv_transfer_params: null,
  };
  sendJson(run.res, 200, JSON.stringify(body));
}
