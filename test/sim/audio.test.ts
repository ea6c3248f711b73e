/** vLLM's speech-to-text routes on the simulator: multipart uploads over fetch, answers in each format. */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type SimServer } from '../../src/sim/server.js';
import { sseData } from '../helpers/http.js';
import { startTestSim } from '../helpers/sim.js';

let sim: SimServer;
beforeAll(async () => {
  sim = await startTestSim({ model: ['whisper-sim'] });
});
afterAll(() => sim.close());

/** `seconds` of 16 kHz 16-bit mono PCM whose bytes depend on `seed`. */
function audio(seconds: number, seed = 1): Blob {
  const bytes = new Uint8Array(seconds * 32000);
  for (let i = 0; i < bytes.length; i++) bytes[i] = (i * seed * 31 + seed) % 251;
  return new Blob([bytes], { type: 'audio/wav' });
}

function upload(path: string, fields: Record<string, string>, file: Blob | null = audio(2)): Promise<Response> {
  const form = new FormData();
  if (file) form.append('file', file, 'speech.wav');
  for (const [name, value] of Object.entries(fields)) form.append(name, value);
  return fetch(`${sim.url}${path}`, { method: 'POST', body: form });
}

const TRANSCRIBE = '/v1/audio/transcriptions';

describe('speech to text', () => {
  it('transcribes to {text, usage} by default, the same text for the same bytes and words in proportion to the length', async () => {
    const res = await upload(TRANSCRIBE, { model: 'whisper-sim' });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { text: string; usage: object };
    expect(body.usage).toEqual({ type: 'duration', seconds: 2 });
    expect(body.text.split(' ').slice(1)).toHaveLength(5);
    const again = (await (await upload(TRANSCRIBE, { model: 'whisper-sim' })).json()) as { text: string };
    expect(again.text).toBe(body.text);
    const other = (await (await upload(TRANSCRIBE, {}, audio(2, 7))).json()) as { text: string };
    expect(other.text).not.toBe(body.text);
    const longer = (await (await upload(TRANSCRIBE, {}, audio(8))).json()) as { text: string };
    expect(longer.text.split(' ').slice(1)).toHaveLength(20);
  });

  it('answers plain text for response_format=text', async () => {
    const json = (await (await upload(TRANSCRIBE, {})).json()) as { text: string };
    const res = await upload(TRANSCRIBE, { response_format: 'text' });
    expect(res.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(await res.text()).toBe(json.text);
  });

  it('answers verbose_json with Whisper-style segments covering the audio', async () => {
    const res = await upload(TRANSCRIBE, { response_format: 'verbose_json', language: 'de', temperature: '0.2' }, audio(12));
    const body = (await res.json()) as { duration: string; language: string; text: string; segments: Array<Record<string, unknown>>; words: null };
    expect(body).toMatchObject({ duration: '12.0', language: 'de', words: null });
    expect(body.segments.map((s) => s.text).join('')).toBe(body.text);
    expect(body.segments[0]).toMatchObject({ id: 0, start: 0, seek: 0, temperature: 0.2, no_speech_prob: null });
    expect(body.segments.at(-1)!.end).toBe(12);
    expect(Object.keys(body.segments[0]!)).toEqual(['id', 'avg_logprob', 'compression_ratio', 'end', 'no_speech_prob', 'seek', 'start', 'temperature', 'text', 'tokens']);
  });

  it('streams transcription chunks, finish_reason on the last, usage when asked, then [DONE]', async () => {
    const whole = (await (await upload(TRANSCRIBE, {})).json()) as { text: string };
    const res = await upload(TRANSCRIBE, { stream: 'true', stream_include_usage: 'true' });
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    const events = sseData(await res.text());
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events
      .slice(0, -1)
      .map((e) => JSON.parse(e) as { id: string; object: string; choices: Array<{ delta: { content: string }; finish_reason?: string }>; usage?: { completion_tokens: number } });
    expect(chunks.every((c) => c.object === 'transcription.chunk' && c.id.startsWith('transcribe-'))).toBe(true);
    const content = chunks.slice(0, -1);
    expect(content.map((c) => c.choices[0]!.delta.content).join('')).toBe(whole.text);
    expect(content.at(-1)!.choices[0]!.finish_reason).toBe('stop');
    expect(content[0]!.choices[0]).toEqual({ delta: { content: expect.any(String) } });
    expect(chunks.at(-1)!.choices).toEqual([]);
    expect(chunks.at(-1)!.usage!.completion_tokens).toBe(content.length);
  });

  it('translates to {text} only, and streams translation chunks', async () => {
    const body = (await (await upload('/v1/audio/translations', {})).json()) as Record<string, unknown>;
    expect(Object.keys(body)).toEqual(['text']);
    const stream = sseData(await (await upload('/v1/audio/translations', { stream: 'true' })).text());
    expect((JSON.parse(stream[0]!) as { object: string }).object).toBe('translation.chunk');
  });

  it.each([
    ['no file part', {}, null, 'file'],
    ['srt, which vLLM does not produce', { response_format: 'srt' }, audio(1), null],
    ['verbose_json streamed', { response_format: 'verbose_json', stream: 'true' }, audio(1), null],
    ['usage without a stream', { stream_include_usage: 'true' }, audio(1), 'stream_include_usage'],
  ])('answers 400 to %s', async (_name, fields, file, param) => {
    const res = await upload(TRANSCRIBE, fields, file);
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: object }).error).toMatchObject({ param, code: 400, type: 'BadRequestError' });
  });

  it('answers 400 to a body that is not multipart, and 404 to an unknown model', async () => {
    const json = await fetch(`${sim.url}${TRANSCRIBE}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"file":"x"}' });
    expect(json.status).toBe(400);
    expect((await upload(TRANSCRIBE, { model: 'other' })).status).toBe(404);
  });
});
