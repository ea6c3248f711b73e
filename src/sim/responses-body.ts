/**
 * The Responses API shapes vLLM sends: the response object (field order and defaults of its
 * `ResponsesResponse.from_request`), the assistant message item, the usage with its per-turn
 * details, and the typed SSE events (`event: <type>` plus JSON with `type` and `sequence_number`).
 */
import { type TokenLogprob } from './chat-generation.js';
import { type ResponsesJob } from './responses-request.js';

export type ResponseStatus = 'in_progress' | 'completed' | 'incomplete';

export interface OutputText {
  annotations: [];
  text: string;
  type: 'output_text';
  logprobs: TokenLogprob[] | null;
}

export const outputText = (text: string, logprobs: TokenLogprob[] | null): OutputText => ({ annotations: [], text, type: 'output_text', logprobs });

export function outputMessage(id: string, content: OutputText[], status: 'in_progress' | 'completed'): object {
  return { id, content, role: 'assistant', status, type: 'message' };
}

export function responseUsage(input: number, cached: number, output: number): object {
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: cached, input_tokens_per_turn: [input], cached_tokens_per_turn: [cached] },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: 0, tool_output_tokens: 0, output_tokens_per_turn: [output], tool_output_tokens_per_turn: [0] },
    total_tokens: input + output,
  };
}

export function responseObject(job: ResponsesJob, createdAt: number, status: ResponseStatus, output: object[], usage: object | null): object {
  const e = job.echo;
  return {
    id: job.id,
    created_at: createdAt,
    incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    instructions: e.instructions,
    metadata: e.metadata,
    model: job.model,
    object: 'response',
    output,
    parallel_tool_calls: e.parallel_tool_calls,
    temperature: e.temperature,
    tool_choice: e.tool_choice,
    tools: e.tools,
    top_p: e.top_p,
    background: false,
    max_output_tokens: job.maxTokens,
    max_tool_calls: e.max_tool_calls,
    previous_response_id: e.previous_response_id,
    prompt: null,
    reasoning: e.reasoning,
    service_tier: e.service_tier,
    status,
    text: e.text,
    top_logprobs: e.top_logprobs,
    truncation: e.truncation,
    usage,
    user: e.user,
    input_messages: null,
    output_messages: null,
  };
}

/** Numbers the events of one stream; fields are written in the alphabetical order of OpenAI's types. */
export class ResponseEvents {
  private next = 0;

  event(type: string, fields: Record<string, unknown>): string {
    const data = Object.entries({ ...fields, sequence_number: this.next++, type }).sort(([a], [b]) => (a < b ? -1 : 1));
    return `event: ${type}\ndata: ${JSON.stringify(Object.fromEntries(data))}\n\n`;
  }
}
