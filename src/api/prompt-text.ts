/**
 * The text a chat request's prompt is made of, for prefix affinity: each message's role and text in
 * order, so two requests that share a system prompt or an earlier conversation share a leading
 * stretch of this text. It need not match the engine's chat template — only be stable and
 * prefix-preserving (a message appended later never changes the text before it).
 */
import { type ValidRequest } from './validate.js';

function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  let out = '';
  for (const part of content) {
    if (typeof part === 'object' && part !== null && typeof (part as { text?: unknown }).text === 'string') out += (part as { text: string }).text;
  }
  return out;
}

/** The rendered prompt of a valid chat request (tool definitions first: templates put them up front). */
export function chatPromptText(body: ValidRequest): string {
  let out = Array.isArray(body.tools) && body.tools.length > 0 ? `tools\n${JSON.stringify(body.tools)}\n` : '';
  const messages = Array.isArray(body.messages) ? body.messages : [];
  for (const message of messages) {
    if (typeof message !== 'object' || message === null) continue;
    const m = message as { role?: unknown; content?: unknown };
    out += `${typeof m.role === 'string' ? m.role : ''}\n${contentText(m.content)}\n`;
  }
  return out;
}
