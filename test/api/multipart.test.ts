/** Multipart forms: read with the platform's parser, shown to validation as fields, written again with a new model name. */
import { describe, expect, it } from '@jest/globals';
import { encodeForm, formFields, parseForm, withField } from '../../src/api/multipart.js';
import { RouterError } from '../../src/core/errors.js';

/** A form as a browser or the openai SDK would send it, via the fetch API's own encoder. */
async function encoded(form: FormData): Promise<{ raw: Buffer; contentType: string }> {
  const request = new Request('http://localhost/', { method: 'POST', body: form });
  return { raw: Buffer.from(await request.arrayBuffer()), contentType: request.headers.get('content-type') ?? '' };
}

function audioForm(): FormData {
  const form = new FormData();
  form.set('model', 'whisper');
  form.set('file', new Blob([Buffer.from([0, 1, 2, 255, 13, 10, 45, 45])], { type: 'audio/wav' }), 'a "quoted"\nname.wav');
  form.append('timestamp_granularities[]', 'word');
  form.append('timestamp_granularities[]', 'segment');
  form.set('language', 'Grüße');
  return form;
}

describe('multipart forms', () => {
  it('reads fields and files, repeated fields as lists, files as their name, size and type', async () => {
    const { raw, contentType } = await encoded(audioForm());
    const parts = await parseForm(raw, contentType);
    expect(formFields(parts)).toEqual({
      model: 'whisper',
      file: { filename: 'a "quoted"\nname.wav', size: 8, type: 'audio/wav' },
      'timestamp_granularities[]': ['word', 'segment'],
      language: 'Grüße',
    });
  });

  it('writes the form again with the model replaced and every other byte of every part kept', async () => {
    const { raw, contentType } = await encoded(audioForm());
    const parts = await parseForm(raw, contentType);
    const rewritten = await encodeForm(withField(parts, 'model', 'openai/whisper-large-v3'));
    expect(rewritten.contentType).toMatch(/^multipart\/form-data; boundary=----modelgate[0-9a-f]{24}$/);
    const again = await parseForm(rewritten.body, rewritten.contentType);
    expect(formFields(again)).toEqual({ ...formFields(parts), model: 'openai/whisper-large-v3' });
    const file = again.find((p) => p.name === 'file');
    expect(file && 'file' in file ? [...Buffer.from(await file.file.arrayBuffer())] : []).toEqual([0, 1, 2, 255, 13, 10, 45, 45]);
  });

  it.each([
    ['not multipart at all', Buffer.from('{"model":"x"}'), 'multipart/form-data; boundary=abc'],
    ['no boundary', Buffer.from('--abc\r\n'), 'multipart/form-data'],
    ['a body cut off mid-part', Buffer.from('--abc\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhis'), 'multipart/form-data; boundary=abc'],
  ])('a body that is not a readable form (%s) is an INVALID_REQUEST', async (_case, raw, contentType) => {
    const err = await parseForm(raw, contentType).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RouterError);
    expect((err as RouterError).code).toBe('INVALID_REQUEST');
    expect((err as RouterError).message).toMatch(/multipart\/form-data body could not be read/);
  });
});
