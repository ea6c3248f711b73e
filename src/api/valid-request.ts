/** The shape of a request body that passed validation (a module of its own, so that every part of `api` can name it without loading validation). */
export interface ValidRequest {
  model: string;
  stream?: boolean | null;
  extra_body?: Record<string, unknown> | null;
  [field: string]: unknown;
}

/**
 * How many choices a chat or completions request asks for: `n`, times each prompt of a completions
 * request with several (strings or token-id lists). 1 on every other API.
 */
export function choicesOf(api: string, body: ValidRequest): number {
  if (api !== 'chat' && api !== 'completions') return 1;
  const n = typeof body.n === 'number' && body.n > 1 ? body.n : 1;
  const prompt = body.prompt;
  const prompts = api === 'completions' && Array.isArray(prompt) && prompt.length > 1 && prompt.every((p) => typeof p === 'string' || Array.isArray(p)) ? prompt.length : 1;
  return n * prompts;
}
