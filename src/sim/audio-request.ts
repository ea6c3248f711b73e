/**
 * Speech-to-text requests (`/v1/audio/transcriptions`, `/v1/audio/translations`): multipart form
 * data parsed with the fetch API's `Response.formData()`, checked as vLLM checks its form. The audio
 * is never decoded: its length gives the duration (as 16 kHz 16-bit mono PCM), and its bytes seed
 * the transcript, so the same file always reads the same.
 */
import type { IncomingMessage } from 'node:http';
import { readBody } from './http-io.js';
import { hash53 } from './prng.js';
import { fail, servedModel } from './request-checks.js';
import { countTokens } from './text.js';

export type AudioFormat = 'json' | 'text' | 'verbose_json';

export interface AudioJob {
  model: string;
  durationS: number;
  /** Words the speech holds (about 150 a minute). */
  words: number;
  seed: number;
  /** Prompt tokens: the text prompt and the audio's encoder frames. */
  promptTokens: number;
  format: AudioFormat;
  language: string | undefined;
  temperature: number;
  stream: boolean;
  includeUsage: boolean;
}

const PCM_BYTES_PER_SECOND = 16000 * 2;
const WORDS_PER_SECOND = 2.5;
/** Whisper's encoder: 1500 frames per 30 s. */
const AUDIO_TOKENS_PER_SECOND = 50;
const FORMATS = ['json', 'text', 'srt', 'verbose_json', 'vtt'];

async function readForm(req: IncomingMessage, maxBodyBytes: number): Promise<FormData> {
  const type = req.headers['content-type'] ?? '';
  if (!type.toLowerCase().startsWith('multipart/form-data')) fail('The request body must be multipart/form-data with a file part.', 'file');
  const body = await readBody(req, maxBodyBytes);
  try {
    return await new Response(new Uint8Array(body), { headers: { 'content-type': type } }).formData();
  } catch (err) {
    return fail(`Invalid multipart/form-data body: ${(err as Error).message}`, 'file');
  }
}

function formBool(form: FormData, field: string): boolean {
  const value = form.get(field);
  if (value === null) return false;
  if (typeof value === 'string' && ['true', '1', 'yes', 'on'].includes(value.toLowerCase())) return true;
  if (typeof value === 'string' && ['false', '0', 'no', 'off'].includes(value.toLowerCase())) return false;
  return fail(`${field} must be a boolean.`, field);
}

const formString = (form: FormData, field: string): string | undefined => {
  const value = form.get(field);
  return typeof value === 'string' ? value : undefined;
};

/** Reads and checks a speech-to-text form. Throws `RequestError`. */
export async function parseAudioRequest(req: IncomingMessage, limits: { models: readonly string[]; maxBodyBytes: number }): Promise<AudioJob> {
  const form = await readForm(req, limits.maxBodyBytes);
  const file = form.get('file');
  if (!(file instanceof Blob)) return fail('file: Field required (an audio file part).', 'file');
  const model = servedModel({ model: formString(form, 'model') }, limits.models);
  const format = formString(form, 'response_format') ?? 'json';
  if (!FORMATS.includes(format)) fail(`response_format must be one of ${FORMATS.join(', ')}.`, 'response_format');
  if (format !== 'json' && format !== 'text' && format !== 'verbose_json') fail('Currently only support response_format: `text`, `json` or `verbose_json`');
  const temperature = Number(formString(form, 'temperature') ?? 0);
  if (!Number.isFinite(temperature)) fail('temperature must be a number.', 'temperature');
  const stream = formBool(form, 'stream');
  const includeUsage = formBool(form, 'stream_include_usage');
  if (includeUsage && !stream) fail('Stream options can only be defined when `stream=True`.', 'stream_include_usage');
  if (format === 'verbose_json' && stream) fail("verbose_json format doesn't support streaming case");

  const audio = Buffer.from(await file.arrayBuffer());
  const durationS = audio.length / PCM_BYTES_PER_SECOND;
  return {
    model,
    durationS,
    words: Math.max(1, Math.round(durationS * WORDS_PER_SECOND)),
    seed: hash53(audio.toString('latin1')) % 2 ** 31,
    promptTokens: countTokens(formString(form, 'prompt') ?? '') + Math.ceil(durationS * AUDIO_TOKENS_PER_SECOND),
    format,
    language: formString(form, 'language'),
    temperature,
    stream,
    includeUsage,
  };
}
