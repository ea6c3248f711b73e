/**
 * The text a request's prompt is made of, for prefix affinity: for a chat, each message's role and
 * text in order, so two requests that share a system prompt or an earlier conversation share a
 * leading stretch of this text. It need not match the engine's chat template — only be stable and
 * prefix-preserving (a message appended later never changes the text before it). The Responses and
 * Messages APIs are rendered the same way (their instructions or system prompt as a `system`
 * message), so the same conversation sent through either shares its prefix with chat's.
 */
import { tokensOfChars } from '../core/types.js';
import { type ValidRequest } from './valid-request.js';

function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  let out = '';
  for (const part of content) {
    if (typeof part === 'object' && part !== null && typeof (part as { text?: unknown }).text === 'string') out += (part as { text: string }).text;
  }
  return out;
}

/** Tool definitions, first: templates put them up front. */
function toolsText(tools: unknown): string {
  return Array.isArray(tools) && tools.length > 0 ? `tools\n${JSON.stringify(tools)}\n` : '';
}

/** The rendered prompt of a valid chat request (tool definitions first: templates put them up front). */
export function chatPromptText(body: ValidRequest): string {
  let out = toolsText(body.tools);
  const messages = Array.isArray(body.messages) ? body.messages : [];
  for (const message of messages) {
    if (typeof message !== 'object' || message === null) continue;
    const m = message as { role?: unknown; content?: unknown };
    out += `${typeof m.role === 'string' ? m.role : ''}\n${contentText(m.content)}\n`;
  }
  return out;
}

/** A completions prompt: itself, or the first of a list of prompts (the engine runs each apart); token ids have no text (''). */
export function completionsPromptText(body: ValidRequest): string {
  const prompt = body.prompt;
  if (typeof prompt === 'string') return prompt;
  return Array.isArray(prompt) && typeof prompt[0] === 'string' ? prompt[0] : '';
}

/**
 * A completions prompt's tokens as the limits charge them up front: a list of ids is that many tokens,
 * a list of such lists (one engine prompt each) their sum, a list of strings all of their text at about
 * four characters a token (its first string alone is the prompt text prefix affinity reads). Undefined
 * for one string (its text is estimated, with what the engines' usage has shown this API adds).
 */
export function completionsPromptTokens(body: ValidRequest): number | undefined {
  const prompt = body.prompt;
  if (!Array.isArray(prompt) || prompt.length === 0) return undefined;
  if (typeof prompt[0] === 'number') return prompt.length;
  let tokens = 0;
  let chars = 0;
  for (const item of prompt) {
    if (Array.isArray(item)) tokens += item.length;
    else if (typeof item === 'string') chars += item.length;
  }
  return tokens + tokensOfChars(chars);
}

const stringOr = (value: unknown): string => (typeof value === 'string' ? value : '');

/**
 * A Responses API request: tools, the instructions (as a system message), then the input — a string
 * is one user message; each item shows its role (or, for a tool call or its output, its type) and
 * its text: content parts, a call's arguments, a tool's output.
 */
export function responsesPromptText(body: ValidRequest): string {
  let out = toolsText(body.tools);
  if (typeof body.instructions === 'string') out += `system\n${body.instructions}\n`;
  if (typeof body.input === 'string') return `${out}user\n${body.input}\n`;
  const items = Array.isArray(body.input) ? body.input : [];
  for (const item of items) {
    if (typeof item !== 'object' || item === null) continue;
    const i = item as { role?: unknown; type?: unknown; content?: unknown; arguments?: unknown; output?: unknown };
    const label = typeof i.role === 'string' ? i.role : stringOr(i.type);
    out += `${label}\n${contentText(i.content)}${stringOr(i.arguments)}${stringOr(i.output)}\n`;
  }
  return out;
}

/** An Anthropic content: a string, or blocks whose text counts — a tool result's own content included. */
function blocksText(content: unknown, nested = false): string {
  if (typeof content === 'string' || !Array.isArray(content)) return stringOr(content);
  let out = '';
  for (const block of content) {
    if (typeof block !== 'object' || block === null) continue;
    const b = block as { type?: unknown; text?: unknown; content?: unknown };
    if (typeof b.text === 'string') out += b.text;
    else if (b.type === 'tool_result' && !nested) out += blocksText(b.content, true);
  }
  return out;
}

/** A Messages API request: tools, the system prompt (as a system message), then each message's role and text. */
export function messagesPromptText(body: ValidRequest): string {
  let out = toolsText(body.tools);
  if (typeof body.system === 'string' || Array.isArray(body.system)) out += `system\n${blocksText(body.system)}\n`;
  const messages = Array.isArray(body.messages) ? body.messages : [];
  for (const message of messages) {
    if (typeof message !== 'object' || message === null) continue;
    const m = message as { role?: unknown; content?: unknown };
    out += `${stringOr(m.role)}\n${blocksText(m.content)}\n`;
  }
  return out;
}
