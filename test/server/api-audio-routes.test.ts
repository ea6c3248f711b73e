/**
 * Speech to text through a listening router: multipart uploads to /v1/audio/transcriptions and
 * /v1/audio/translations reach a simulator replica (behind a recording proxy that keeps the exact
 * bytes it got), every response format comes back as the engine sent it, a form whose model name
 * changes is written again with the file intact, and the upload limits and form checks hold.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type RunningRouter } from '../../src/main.js';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest, sseData } from '../helpers/http.js';
import { KEY, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startTestSim } from '../helpers/sim.js';
import { startTap, type Tap, type Tapped } from '../helpers/tap.js';

const SERVED = 'openai/whisper-large-v3';
const MAX_BODY = 16 * 1024;
const MAX_UPLOAD = 256 * 1024;

let asr: SimServer;
let llm: SimServer;
let tap: Tap;
let g: TestRouter<RunningRouter>;

beforeAll(async () => {
  asr = await startTestSim({ model: [SERVED], name: 'asr-0' });
  llm = await startTestSim({ model: ['served/llm'], name: 'llm-0' });
  tap = await startTap(asr.url);
  g = await startTestRouter({
    pools: [
      { name: 'asr', servedModelName: SERVED, capabilities: ['audio'], endpoints: [tap.url] },
      { name: 'llm', servedModelName: 'served/llm', capabilities: ['chat'], endpoints: [llm.url] },
    ],
    deployments: [
      // asked for by its served name, a form goes on byte for byte; asked for as `stt` it is written again
      { id: 'stt', model: SERVED, targets: [{ pool: 'asr' }] },
      { id: 'llm', model: 'llm-model', targets: [{ pool: 'llm' }] },
    ],
    server: { maxBodyBytes: MAX_BODY, maxUploadBytes: MAX_UPLOAD },
  });
});
afterAll(async () => {
  await g.close();
  await tap.close();
  await Promise.all([asr.close(), llm.close()]);
});

const TRANSCRIBE = '/v1/audio/transcriptions';
const TRANSLATE = '/v1/audio/translations';
const auth = { authorization: `Bearer ${KEY}` };

/** `seconds` of "16 kHz 16-bit PCM" whose bytes run through every value 0–255 (CR, LF, `-` included). */
function audioBytes(seconds: number, seed = 3): Uint8Array {
  const bytes = new Uint8Array(seconds * 32000);
  for (let i = 0; i < bytes.length; i++) bytes[i] = (i * seed + (i >> 8)) % 256;
  return bytes;
}

/** A multipart body as fetch writes it: its exact bytes and content type. */
async function encode(fields: Array<[string, string]>, file: Uint8Array | null = audioBytes(2)): Promise<{ bytes: Buffer; type: string }> {
  const form = new FormData();
  if (file) form.append('file', new Blob([file], { type: 'audio/wav' }), 'speech.wav');
  for (const [name, value] of fields) form.append(name, value);
  const request = new Request('http://encoder.invalid/', { method: 'POST', body: form });
  return { bytes: Buffer.from(await request.arrayBuffer()), type: request.headers.get('content-type') ?? '' };
}

/** Sends the encoded form to `base` (the router, with the key, or the simulator directly) and records what the engine got. */
async function upload(base: string, path: string, body: { bytes: Buffer; type: string }): Promise<{ res: Response; sent: Tapped | undefined }> {
  const before = tap.posts().length;
  const res = await fetch(`${base}${path}`, { method: 'POST', headers: { ...auth, 'content-type': body.type }, body: body.bytes });
  return { res, sent: tap.posts()[before] };
}
const viaRouter = async (path: string, fields: Array<[string, string]>, file?: Uint8Array | null): Promise<{ res: Response; sent: Tapped | undefined }> =>
  upload(g.router.apiUrl, path, await encode(fields, file));
const direct = async (path: string, fields: Array<[string, string]>): Promise<Response> => (await upload(asr.url, path, await encode(fields))).res;

/** A stream's events without the fields that differ per request (id, created). */
const events = (body: string): unknown[] => sseData(body).map((d) => (d === '[DONE]' ? d : { ...(JSON.parse(d) as object), id: 'x', created: 0 }));

describe('audio uploads', () => {
  it.each([TRANSCRIBE, TRANSLATE])('%s: a json answer arrives as the engine sent it, and the form reaches the engine byte for byte', async (path) => {
    const form = await encode([
      ['model', SERVED],
      ['language', 'de'],
    ]);
    const { res, sent } = await upload(g.router.apiUrl, path, form);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-sim-replica')).toBe('asr-0');
    expect(sent?.url).toBe(path);
    expect(sent?.headers['content-type']).toBe(form.type);
    expect(sent?.body.equals(form.bytes)).toBe(true);
    const body = (await res.json()) as { text: string; usage?: object };
    expect(body).toEqual(await (await direct(path, [['model', SERVED]])).json());
    expect(body.text.length).toBeGreaterThan(0);
    if (path === TRANSCRIBE) expect(body.usage).toEqual({ type: 'duration', seconds: 2 });
    else expect(body.usage).toBeUndefined();
  });

  it('passes a text answer on as plain text', async () => {
    const fields: Array<[string, string]> = [
      ['model', SERVED],
      ['response_format', 'text'],
    ];
    const { res } = await viaRouter(TRANSCRIBE, fields);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    const text = await res.text();
    expect(text).toBe(await (await direct(TRANSCRIBE, fields)).text());
    expect(text).not.toContain('{');
  });

  it('passes a verbose_json answer on with its segments', async () => {
    const fields: Array<[string, string]> = [
      ['model', SERVED],
      ['response_format', 'verbose_json'],
      ['temperature', '0.2'],
    ];
    const { res } = await viaRouter(TRANSCRIBE, fields);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { duration: string; segments: Array<{ text: string }>; text: string };
    expect(body).toEqual(await (await direct(TRANSCRIBE, fields)).json());
    expect(body.duration).toBe('2.0');
    expect(body.segments.map((s) => s.text).join('')).toBe(body.text);
  });

  it.each([
    [TRANSCRIBE, 'transcription.chunk'],
    [TRANSLATE, 'translation.chunk'],
  ])('%s with stream=true relays the engine’s event stream', async (path, object) => {
    const fields: Array<[string, string]> = [
      ['model', SERVED],
      ['stream', 'true'],
      ['stream_include_usage', 'true'],
    ];
    const { res } = await viaRouter(path, fields);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const body = await res.text();
    const got = events(body);
    expect(got).toEqual(events(await (await direct(path, fields)).text()));
    expect(got.at(-1)).toBe('[DONE]');
    const chunks = got.slice(0, -1) as Array<{ object: string; model: string; choices: Array<{ delta: { content: string } }>; usage?: { prompt_tokens: number } }>;
    expect(new Set(chunks.map((c) => c.object))).toEqual(new Set([object]));
    expect(chunks.at(-1)?.usage?.prompt_tokens).toBeGreaterThan(0);
    const plain = (await (await direct(path, [['model', SERVED]])).json()) as { text: string };
    expect(chunks.flatMap((c) => c.choices.map((ch) => ch.delta.content)).join('')).toBe(plain.text);
  });

  it('writes the form again when the pool serves the model under another name: model changed, file bytes and other parts intact', async () => {
    const file = audioBytes(2, 7);
    const clientForm = await encode(
      [
        ['model', 'stt'],
        ['language', 'fr'],
        ['prompt', 'Bonjour\r\n--boundary-like text'],
      ],
      file,
    );
    const { res, sent } = await upload(g.router.apiUrl, TRANSLATE, clientForm);
    // the simulator refuses any model name but its own: the 200 proves `model` was changed
    expect(res.status).toBe(200);
    expect(sent?.url).toBe(TRANSLATE);
    const type = String(sent?.headers['content-type']);
    expect(type).toMatch(/^multipart\/form-data; boundary=/);
    expect(type).not.toBe(clientForm.type);
    expect(Number(sent?.headers['content-length'])).toBe(sent?.body.length);
    const received = await new Response(new Uint8Array(sent!.body), { headers: { 'content-type': type } }).formData();
    expect([...received.keys()]).toEqual(['file', 'model', 'language', 'prompt']);
    expect(received.get('model')).toBe(SERVED);
    expect(received.get('language')).toBe('fr');
    expect(received.get('prompt')).toBe('Bonjour\r\n--boundary-like text');
    const got = received.get('file') as File;
    expect(got.name).toBe('speech.wav');
    expect(got.type).toBe('audio/wav');
    expect(Buffer.from(await got.arrayBuffer()).equals(Buffer.from(file))).toBe(true);
  });
});

describe('audio upload checks', () => {
  const errorOf = async (res: Response): Promise<{ code: string; param: string | null; type: string }> => ((await res.json()) as { error: { code: string; param: string | null; type: string } }).error;

  it('answers JSON sent to an audio route with 415, nothing sent upstream', async () => {
    const before = tap.posts().length;
    const res = await fetch(`${g.router.apiUrl}${TRANSCRIBE}`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ model: SERVED, file: 'x' }) });
    expect(res.status).toBe(415);
    expect(await errorOf(res)).toMatchObject({ code: 'unsupported_media_type', type: 'invalid_request_error' });
    expect(tap.posts().length).toBe(before);
  });

  it.each([
    ['a body that is not multipart', 'multipart/form-data; boundary=abc', 'this is not a form at all'],
    ['a form that never closes', 'multipart/form-data; boundary=abc', '--abc\r\nContent-Disposition: form-data; name="model"\r\n\r\nx'],
    ['a form without a boundary', 'multipart/form-data', '--abc\r\nContent-Disposition: form-data; name="model"\r\n\r\nx\r\n--abc--\r\n'],
    ['a boundary with a character RFC 2046 does not allow', 'multipart/form-data; boundary="a\\\\bc"', '--a\\bc\r\nContent-Disposition: form-data; name="model"\r\n\r\nx\r\n--a\\bc--\r\n'],
    // the escape read literally by the count (no part found) and undone by the parser (1001 parts read) let a form of any size past the limit
    ['a boundary spelled with an escape', 'multipart/form-data; boundary="a\\bc"', `${'--abc\r\nContent-Disposition: form-data; name="x"\r\n\r\nx\r\n'.repeat(1001)}--abc--\r\n`],
  ])('answers %s with 400 invalid_request', async (_what, type, body) => {
    const before = tap.posts().length;
    const res = await fetch(`${g.router.apiUrl}${TRANSCRIBE}`, { method: 'POST', headers: { ...auth, 'content-type': type }, body });
    expect(res.status).toBe(400);
    expect(await errorOf(res)).toMatchObject({ code: 'invalid_request', type: 'invalid_request_error' });
    expect(tap.posts().length).toBe(before);
  });

  // a hostile tenant's form of tiny parts (it froze the router for seconds: every tenant waited), its model and file valid
  it('answers an otherwise valid form of more than 1000 parts with 400 before parsing it', async () => {
    const boundary = 'abc';
    const part = (name: string, value: string): string => `--abc\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`;
    const file = '--abc\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\nRIFF\r\n';
    const body = `${part('model', SERVED)}${file}${part('x', 'x').repeat(999)}--abc--\r\n`;
    const before = tap.posts().length;
    const res = await fetch(`${g.router.apiUrl}${TRANSCRIBE}`, { method: 'POST', headers: { ...auth, 'content-type': `multipart/form-data; boundary=${boundary}` }, body });
    expect(res.status).toBe(400);
    expect(await errorOf(res)).toMatchObject({ code: 'invalid_request', message: 'The multipart/form-data body has more than 1000 parts.' });
    expect(tap.posts().length).toBe(before);
    // one part fewer is a form like any other
    const fits = `${part('model', SERVED)}${file}${part('x', 'x').repeat(998)}--abc--\r\n`;
    const ok = await fetch(`${g.router.apiUrl}${TRANSCRIBE}`, { method: 'POST', headers: { ...auth, 'content-type': `multipart/form-data; boundary=${boundary}` }, body: fits });
    expect(ok.status).toBe(200);
  });

  it.each([
    ['file', [['model', SERVED]], null],
    ['model', [['language', 'en']], undefined],
  ] as Array<[string, Array<[string, string]>, null | undefined]>)('answers a form without %s with 400 naming it', async (param, fields, file) => {
    const { res, sent } = await viaRouter(TRANSCRIBE, fields, file);
    expect(res.status).toBe(400);
    expect(await errorOf(res)).toMatchObject({ code: 'invalid_request', param });
    expect(sent).toBeUndefined();
  });

  it('takes uploads up to server.maxUploadBytes and answers a larger one with 413', async () => {
    const fits = await viaRouter(TRANSCRIBE, [['model', SERVED]], audioBytes(7)); // 224 000 bytes: far over maxBodyBytes
    expect(fits.res.status).toBe(200);
    expect(fits.sent?.body.length).toBeGreaterThan(MAX_BODY);
    const tooBig = await viaRouter(TRANSCRIBE, [['model', SERVED]], audioBytes(9)); // 288 000 bytes
    expect(tooBig.res.status).toBe(413);
    expect(await errorOf(tooBig.res)).toMatchObject({ code: 'request_too_large' });
    expect(tooBig.sent).toBeUndefined();
  });

  it('keeps server.maxBodyBytes on the JSON routes', async () => {
    const chat = (content: string): Promise<{ status: number }> =>
      rawRequest(`${g.router.apiUrl}/v1/chat/completions`, { headers: auth, body: { model: 'llm-model', messages: [{ role: 'user', content }], max_tokens: 2 } });
    expect((await chat('small')).status).toBe(200);
    const big = await rawRequest(`${g.router.apiUrl}/v1/chat/completions`, { headers: auth, body: { model: 'llm-model', messages: [{ role: 'user', content: 'x'.repeat(MAX_BODY + 1) }] } });
    expect(big.status).toBe(413);
    expect((JSON.parse(big.body) as { error: { code: string } }).error.code).toBe('request_too_large');
    expect((await chat('y'.repeat(MAX_BODY / 2))).status).toBe(200);
  });
});
