/**
 * Edits the top level of a JSON object in place, as text: replace or add members, remove members.
 * Everything else keeps its exact bytes — number spellings (`1.0`, `1e2`), integers beyond 2^53,
 * escapes and whitespace — because the body is never re-serialised. The input must be valid JSON
 * (it has been parsed before), so the scanner only tracks strings and nesting.
 */

export interface Member {
  key: string;
  /** Index of the key's opening quote. */
  start: number;
  valueStart: number;
  /** Index just past the value. */
  valueEnd: number;
}

/** JSON's whitespace: space, tab, line feed, carriage return. */
const isWs = (c: number): boolean => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

function skipWs(text: string, i: number): number {
  while (i < text.length && isWs(text.charCodeAt(i))) i++;
  return i;
}

/** Index just past the string starting at `i` (a `"`). */
function skipString(text: string, i: number): number {
  for (i++; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x5c)
      i++; // backslash: skip the escaped character
    else if (c === 0x22) return i + 1;
  }
  return i;
}

/** Index just past the value starting at `i`. */
export function skipValue(text: string, i: number): number {
  const c = text.charCodeAt(i);
  if (c === 0x22) return skipString(text, i);
  if (c === 0x7b || c === 0x5b) {
    let depth = 0;
    for (; i < text.length; i++) {
      const d = text.charCodeAt(i);
      if (d === 0x22) i = skipString(text, i) - 1;
      else if (d === 0x7b || d === 0x5b) depth++;
      else if (d === 0x7d || d === 0x5d) {
        depth--;
        if (depth === 0) return i + 1;
      }
    }
    return i;
  }
  while (i < text.length) {
    const d = text.charCodeAt(i);
    if (d === 0x2c || d === 0x7d || d === 0x5d || isWs(d)) break;
    i++;
  }
  return i;
}

/** The members of the object whose `{` is at `open`, and the index of its closing `}`. */
export function scanMembers(text: string, open: number): { members: Member[]; close: number } {
  const members: Member[] = [];
  let i = skipWs(text, open + 1);
  while (i < text.length && text.charCodeAt(i) !== 0x7d) {
    const start = i;
    const keyEnd = skipString(text, i);
    const rawKey = text.slice(start, keyEnd);
    const key = rawKey.includes('\\') ? (JSON.parse(rawKey) as string) : rawKey.slice(1, -1);
    i = skipWs(text, keyEnd) + 1; // past ':'
    const valueStart = skipWs(text, i);
    const valueEnd = skipValue(text, valueStart);
    members.push({ key, start, valueStart, valueEnd });
    i = skipWs(text, valueEnd);
    if (text.charCodeAt(i) === 0x2c) i = skipWs(text, i + 1);
  }
  return { members, close: i };
}

export interface TopLevelPatch {
  /** Members to set, as raw JSON text of their values. Existing members are replaced in place. */
  set?: ReadonlyMap<string, string>;
  /** Members to remove. */
  remove?: ReadonlySet<string>;
}

/** Applies `patch` to the JSON object `text` (whose first non-space character is `{`). */
export function patchTopLevel(text: string, patch: TopLevelPatch): string {
  const open = skipWs(text, 0);
  const { members, close } = scanMembers(text, open);
  const set = patch.set ?? new Map<string, string>();
  const remove = patch.remove ?? new Set<string>();
  const present = new Set(members.map((m) => m.key));
  const valueOf = (m: Member): string => set.get(m.key) ?? text.slice(m.valueStart, m.valueEnd);
  const kept = members.filter((m) => !remove.has(m.key));
  let appended = '';
  let separator = kept.length > 0;
  for (const [key, value] of set) {
    if (present.has(key) && !remove.has(key)) continue;
    appended += `${separator ? ',' : ''}${JSON.stringify(key)}:${value}`;
    separator = true;
  }

  if (kept.length === members.length) {
    // Nothing removed: splice each replaced value where it stands, from the end backwards.
    let out = text.slice(close);
    let cursor = close;
    for (let i = members.length - 1; i >= 0; i--) {
      const m = members[i] as Member;
      if (!set.has(m.key)) continue;
      out = valueOf(m) + text.slice(m.valueEnd, cursor) + out;
      cursor = m.valueStart;
    }
    out = text.slice(0, cursor) + out;
    return appended ? out.slice(0, out.length - (text.length - close)) + appended + text.slice(close) : out;
  }
  // Something removed: rebuild the top level from the kept members' exact text (key, spacing, value).
  const body = kept.map((m) => text.slice(m.start, m.valueStart) + valueOf(m)).join(',');
  return text.slice(0, open + 1) + body + appended + text.slice(close);
}

/** The raw JSON text of each member of the object value of member `key`, if it is an object. */
export function objectMemberTexts(text: string, member: Member): Map<string, string> {
  const out = new Map<string, string>();
  if (text.charCodeAt(member.valueStart) !== 0x7b) return out;
  for (const inner of scanMembers(text, member.valueStart).members) out.set(inner.key, text.slice(inner.valueStart, inner.valueEnd));
  return out;
}

/**
 * The upstream body of an inference request: `extra_body` merged into the top level (its keys win)
 * and removed, then `model` set to `servedModelName`, then `overrides` (raw JSON values) applied. A
 * body needing none of this is returned as is.
 */
export function upstreamBody(text: string, servedModelName: string, currentModel: string, overrides?: ReadonlyMap<string, string>): string {
  const open = skipWs(text, 0);
  const { members } = scanMembers(text, open);
  const extra = members.filter((m) => m.key === 'extra_body');
  if (extra.length === 0 && currentModel === servedModelName && !overrides?.size) return text;
  const set = new Map<string, string>();
  const last = extra.at(-1);
  if (last) for (const [key, value] of objectMemberTexts(text, last)) set.set(key, value);
  set.set('model', JSON.stringify(servedModelName));
  set.delete('extra_body');
  for (const [key, value] of overrides ?? []) set.set(key, value);
  return patchTopLevel(text, { set, remove: new Set(['extra_body']) });
}
