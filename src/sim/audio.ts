/**
 * `POST /v1/audio/transcriptions` and `/v1/audio/translations` in vLLM's shapes: `{text, usage}`
 * (translations: `{text}`), `verbose_json` with Whisper-style segments, plain text for `text`, or a
 * stream of `transcription.chunk` / `translation.chunk` events ending in `[DONE]`. The transcript is
 * generated token by token in an engine slot like any answer (see `audio-request.ts` for its text).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { deflateSync } from 'node:zlib';
import { DONE_EVENT } from './chat-response.js';
import { parseAudioRequest, type AudioJob } from './audio-request.js';
import { choicesFor, decode } from './decode-loop.js';
import { newId, sendJson, unixNow } from './http-io.js';
import { hash53 } from './prng.js';
import { inSlot, type InferenceContext, type SlotRun } from './slots.js';
import { tokenize } from './tokenizer.js';

type Task = 'transcribe' | 'translate';

const WORDS_PER_SEGMENT = 12;

/** Python's `str(float)`, as vLLM writes `duration`. */
const pyFloat = (x: number): string => (Number.isInteger(x) ? `${x}.0` : String(x));

/** Whisper-like segments: runs of words with timestamps spread evenly over the audio. */
function segments(job: AudioJob, text: string): object[] {
  const words = text.match(/\s*\S+/g) ?? [];
  const at = (word: number): number => Math.round(((job.durationS * word) / Math.max(1, words.length)) * 50) / 50;
  const out: object[] = [];
  for (let first = 0; first < words.length; first += WORDS_PER_SEGMENT) {
    const last = Math.min(words.length, first + WORDS_PER_SEGMENT);
    const segment = words.slice(first, last).join('');
    const bytes = Buffer.from(segment, 'utf8');
    out.push({
      id: out.length,
      avg_logprob: -0.05 - (hash53(segment) % 400) / 1000,
      compression_ratio: bytes.length / deflateSync(bytes).length,
      end: at(last),
      no_speech_prob: null,
      seek: 0,
      start: at(first),
      temperature: job.temperature,
      text: segment,
      tokens: tokenize(segment),
    });
  }
  return out;
}

function handleSpeech(task: Task): (ctx: InferenceContext, req: IncomingMessage, res: ServerResponse) => Promise<void> {
  return async (ctx, req, res) => {
    const job = await parseAudioRequest(req, { models: ctx.options.model, maxBodyBytes: ctx.options.maxBodyBytes });
    await inSlot(ctx, req, res, { stream: job.stream }, (run) => transcribe(run, job, task));
  };
}

export const handleTranscription = handleSpeech('transcribe');
export const handleTranslation = handleSpeech('translate');

async function transcribe(run: SlotRun, job: AudioJob, task: Task): Promise<void> {
  const { res } = run;
  const params = { maxTokens: run.ctx.options.maxModelLen, minTokens: 0, ignoreEos: false, stop: [], logprobs: false, topLogprobs: 0 };
  const [choice] = choicesFor(run.ctx, () => params, 1, job.seed, { min: job.words, max: job.words });
  if (!choice) return;
  const object = task === 'transcribe' ? 'transcription.chunk' : 'translation.chunk';
  const head = `data: {"id":${JSON.stringify(`${task}-${newId()}`)},"object":"${object}","created":${unixNow()},"model":${JSON.stringify(job.model)},`;

  const done = await decode(run, { text: '', tokens: job.promptTokens }, [choice], {
    step: (_choice, step) => {
      if (!job.stream || (step.delta === '' && !step.finishReason)) return;
      const delta = { content: step.delta };
      const data = step.finishReason ? { delta, finish_reason: step.finishReason, stop_reason: step.stopReason } : { delta };
      res.write(`${head}"choices":[${JSON.stringify(data)}]}\n\n`);
    },
  });
  if (done === undefined) return;
  if (job.stream) {
    const usage = { prompt_tokens: job.promptTokens, total_tokens: job.promptTokens + choice.tokens, completion_tokens: choice.tokens };
    res.end((job.includeUsage ? `${head}"choices":[],"usage":${JSON.stringify(usage)}}\n\n` : '') + DONE_EVENT);
  } else if (job.format === 'text') {
    const body = choice.text;
    res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  } else if (job.format === 'verbose_json') {
    const body = { duration: pyFloat(job.durationS), language: job.language ?? 'en', text: choice.text, segments: segments(job, choice.text), words: null };
    sendJson(res, 200, JSON.stringify(body));
  } else {
    const usage = { type: 'duration', seconds: Math.ceil(job.durationS) };
    sendJson(res, 200, JSON.stringify(task === 'transcribe' ? { text: choice.text, usage } : { text: choice.text }));
  }
}
