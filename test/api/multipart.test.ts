/** Multipart forms: read with the platform's parser, shown to validation as fields, written again with a new model name. */
import { describe, expect, it } from '@jest/globals';
import { encodeForm, formBoundary, formFields, MAX_FORM_PARTS, parseForm, tooManyParts, withField } from '../../src/api/multipart.js';
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

  it(`reads a form of ${MAX_FORM_PARTS} parts, a field repeated in all of them as one list in order; refuses one more part before parsing`, async () => {
    const form = new FormData();
    for (let i = 0; i < MAX_FORM_PARTS; i++) form.append('x', String(i));
    const { raw, contentType } = await encoded(form);
    expect(tooManyParts(raw, formBoundary(contentType)!)).toBe(false);
    const fields = formFields(await parseForm(raw, contentType));
    expect(fields.x).toEqual(Array.from({ length: MAX_FORM_PARTS }, (_, i) => String(i)));
    form.append('x', 'one more');
    const over = await encoded(form);
    expect(tooManyParts(over.raw, formBoundary(over.contentType)!)).toBe(true);
    const err = await parseForm(over.raw, over.contentType).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RouterError);
    expect((err as RouterError).code).toBe('INVALID_REQUEST');
    expect((err as RouterError).message).toBe(`The multipart/form-data body has more than ${MAX_FORM_PARTS} parts.`);
  });

  it('reads the boundary the content type names, quoted or not; none when it names none', () => {
    expect(formBoundary('multipart/form-data; boundary="a b"')).toBe('a b');
    expect(formBoundary('multipart/form-data; charset=utf-8; BOUNDARY=xyz')).toBe('xyz');
    expect(formBoundary('multipart/form-data')).toBeUndefined();
    const body = (boundary: string, parts: number): Buffer =>
      Buffer.from(`${Array.from({ length: parts }, (_, i) => `--${boundary}\r\nContent-Disposition: form-data; name="f${i}"\r\n\r\nv\r\n`).join('')}--${boundary}--\r\n`);
    expect(tooManyParts(body('a b', 3), 'a b', 2)).toBe(true);
    expect(tooManyParts(body('a b', 2), 'a b', 2)).toBe(false);
  });

  it.each([
    ['a quote inside', 'multipart/form-data; boundary="a\\"b"'],
    // parsers disagree on its escapes ("a\b" is ab to the platform's, a\b to Python's): the engine could split the body elsewhere
    ['an escape inside', 'multipart/form-data; boundary="a\\b"'],
    ['a backslash inside', 'multipart/form-data; boundary="a\\\\b"'],
    ['ending in a space', 'multipart/form-data; boundary="ab "'],
    ['longer than 70 characters', `multipart/form-data; boundary=${'a'.repeat(71)}`],
    ['a character RFC 2046 does not allow', 'multipart/form-data; boundary=a{b'],
  ])('refuses a boundary RFC 2046 does not allow (%s) before reading the body', async (_case, contentType) => {
    const err = await parseForm(Buffer.from('--x\r\n'), contentType).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RouterError);
    expect((err as RouterError).message).toMatch(/^The multipart\/form-data boundary is not valid/);
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
