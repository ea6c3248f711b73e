/**
 * The chat response shapes vLLM emits, byte for byte where clients may care: the non-streamed body
 * with the null fields vLLM leaves in, the stream chunks, the usage chunk and the `[DONE]` event.
 */
import { type ChoiceGenerator, type ChoiceStep, type TokenLogprob } from './chat-generation.js';
import { type ChatJob } from './chat-request.js';

export interface Usage {
  prompt_tokens: number;
  total_tokens: number;
  completion_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

export function usageOf(job: ChatJob, choices: readonly ChoiceGenerator[], cachedTokens: number): Usage {
  const completion = choices.reduce((sum, c) => sum + c.tokens, 0);
  return {
    prompt_tokens: job.promptTokens,
    total_tokens: job.promptTokens + completion,
    completion_tokens: completion,
    prompt_tokens_details: { cached_tokens: cachedTokens },
  };
}

/** The non-streamed body, with the null fields vLLM's `model_dump()` leaves in. */
export function completionBody(id: string, created: number, job: ChatJob, choices: readonly ChoiceGenerator[], usage: Usage, logprobs: TokenLogprob[][]): string {
  return JSON.stringify({
    id,
    object: 'chat.completion',
    created,
    model: job.model,
    choices: choices.map((c) => ({
      index: c.index,
      message: {
        role: 'assistant',
        content: c.text,
        refusal: null,
        annotations: null,
        audio: null,
        function_call: null,
        tool_calls: [],
        reasoning_content: null,
      },
      logprobs: job.logprobs ? { content: logprobs[c.index] ?? [] } : null,
      finish_reason: c.finishReason,
      stop_reason: c.stopReason,
    })),
    service_tier: null,
    system_fingerprint: null,
    usage,
    prompt_logprobs: null,
    kv_transfer_params: null,
  });
}

/** Serialises stream chunks that share one id, creation time and model. */
export class ChunkWriter {
  private readonly head: string;

  constructor(id: string, created: number, model: string) {
    this.head = `data: {"id":${JSON.stringify(id)},"object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},`;
  }

  role(index: number): string {
    return `${this.head}"choices":[{"index":${index},"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n`;
  }

  step(index: number, step: ChoiceStep, logprobs: TokenLogprob[]): string {
    const choice: Record<string, unknown> = {
      index,
      delta: step.delta === '' && step.finishReason ? {} : { content: step.delta },
      logprobs: logprobs.length > 0 ? { content: logprobs } : null,
      finish_reason: step.finishReason,
    };
    if (step.finishReason) choice.stop_reason = step.stopReason;
    return `${this.head}"choices":[${JSON.stringify(choice)}]}\n\n`;
  }

  usage(usage: Usage): string {
    return `${this.head}"choices":[],"usage":${JSON.stringify(usage)}}\n\n`;
  }
}

export const DONE_EVENT = 'data: [DONE]\n\n';
