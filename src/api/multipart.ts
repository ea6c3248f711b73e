/**
 * `multipart/form-data` bodies (the audio routes). The form is read with the platform's own parser
 * (the fetch API's `Response.formData()`), shown to validation as plain fields, and written again
 * only when a pool serves the model under another name. A file stays the parser's Blob until then:
 * an upload forwarded as it came is never copied again (each copy of a large upload is external
 * memory, which drives V8's full collections).
 */
import { randomBytes } from 'node:crypto';
import { RouterError } from '../core/errors.js';

export type FormPart = { name: string; value: string } | { name: string; file: File };

/**
 * The most parts a form may have. The audio APIs' forms have a dozen fields at most (a file, the
 * model, a few options, a repeated `timestamp_granularities[]`); a body of hundreds of thousands of
 * tiny parts would cost the router's event loop seconds to parse, and every tenant would wait.
 */
export const MAX_FORM_PARTS = 1000;

/** The characters RFC 2046 allows in a boundary (`bchars`); a space only inside it. */
const BOUNDARY_CHARS = /^[0-9A-Za-z'()+_,\-./:=? ]{0,69}[0-9A-Za-z'()+_,\-./:=?]$/;

/**
 * The boundary `contentType` names; undefined when it names none. INVALID_REQUEST for one RFC 2046
 * does not allow, a backslash included: parsers disagree on a quoted boundary's escapes (`"a\b"` is
 * `ab` to the platform's parser and `a\b` to Python's), and an engine given the client's content type
 * would split the body where the router did not.
 */
export function formBoundary(contentType: string): string | undefined {
  const match = /;\s*boundary=(?:"((?:[^"\\]|\\.)*)"|([^;\s]+))/i.exec(contentType);
  if (!match) return undefined;
  const name = match[1] ?? match[2] ?? '';
  if (!BOUNDARY_CHARS.test(name)) throw new RouterError('INVALID_REQUEST', "The multipart/form-data boundary is not valid: 1 to 70 letters, digits or '()+_,-./:=? and inner spaces.");
  return name;
}

/**
 * Whether `raw` holds more than `max` parts of a form whose boundary is `boundary` (its delimiters
 * counted, without parsing anything).
 */
export function tooManyParts(raw: Buffer, boundary: string, max = MAX_FORM_PARTS): boolean {
  const delimiter = Buffer.from(`--${boundary}`);
  // every part starts with a delimiter, and the body ends with one more (`--boundary--`)
  let count = 0;
  for (let at = raw.indexOf(delimiter); at >= 0; at = raw.indexOf(delimiter, at + delimiter.length)) {
    count += 1;
    if (count > max + 1) return true;
  }
  return false;
}

/**
 * The parts of a multipart body, in order; INVALID_REQUEST when it is not a readable form, or has more
 * than {@link MAX_FORM_PARTS} parts. The parser is given the boundary the parts were counted by, in a
 * content type of the router's own writing: read from the client's by two parsers, a boundary spelled
 * with an escape (`"a\b"`) was `a\b` to the count (no part found) and `ab` to the parser (every part);
 * such a boundary is now refused ({@link formBoundary}).
 */
export async function parseForm(raw: Buffer, contentType: string): Promise<FormPart[]> {
  const boundary = formBoundary(contentType);
  if (boundary !== undefined && tooManyParts(raw, boundary)) throw new RouterError('INVALID_REQUEST', `The multipart/form-data body has more than ${MAX_FORM_PARTS} parts.`);
  let form: FormData;
  try {
    // without a boundary the client's type goes as it came, and the parser refuses it
    const type = boundary === undefined ? contentType : `multipart/form-data; boundary="${boundary}"`;
    form = await new Response(raw, { headers: { 'content-type': type } }).formData();
  } catch (err) {
    throw new RouterError('INVALID_REQUEST', `The multipart/form-data body could not be read (${(err as Error).message}).`);
  }
  const parts: FormPart[] = [];
  for (const [name, value] of form) {
    parts.push(typeof value === 'string' ? { name, value } : { name, file: value });
  }
  return parts;
}

/**
 * The form as an object to validate: a text field as its string (a repeated one as the list of its
 * values), a file as `{filename, size, type}`.
 */
export function formFields(parts: readonly FormPart[]): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  for (const part of parts) {
    const value = 'value' in part ? part.value : { filename: part.file.name, size: part.file.size, type: part.file.type };
    const seen = fields[part.name];
    if (seen === undefined) fields[part.name] = value;
    // the list is this function's own (a value is a string or a file's description, never an array): added to, not copied
    else if (Array.isArray(seen)) seen.push(value);
    else fields[part.name] = [seen, value];
  }
  return fields;
}

/** A name or filename in a Content-Disposition header, escaped as browsers do. */
const quoted = (text: string): string => `"${text.replace(/\r/g, '%0D').replace(/\n/g, '%0A').replace(/"/g, '%22')}"`;

/** The parts written as a multipart body with a fresh boundary; returns the body and its content type. */
export async function encodeForm(parts: readonly FormPart[]): Promise<{ body: Buffer; contentType: string }> {
  const boundary = `----modelgate${randomBytes(12).toString('hex')}`;
  const chunks: Buffer[] = [];
  for (const part of parts) {
    const disposition = `Content-Disposition: form-data; name=${quoted(part.name)}`;
    if ('value' in part) {
      chunks.push(Buffer.from(`--${boundary}\r\n${disposition}\r\n\r\n${part.value}\r\n`, 'utf8'));
    } else {
      const { file } = part;
      chunks.push(Buffer.from(`--${boundary}\r\n${disposition}; filename=${quoted(file.name)}\r\nContent-Type: ${file.type || 'application/octet-stream'}\r\n\r\n`, 'utf8'));
      chunks.push(Buffer.from(await file.arrayBuffer()), Buffer.from('\r\n'));
    }
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(chunks), contentType: `multipart/form-data; boundary=${boundary}` };
}

/** The parts with every `name` field's value replaced. */
export function withField(parts: readonly FormPart[], name: string, value: string): FormPart[] {
  return parts.map((part) => (part.name === name && 'value' in part ? { name, value } : part));
}
