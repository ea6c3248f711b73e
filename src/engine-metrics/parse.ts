/**
 * A scanner for the Prometheus text exposition format that reports only the samples of a few wanted
 * metric names. An engine's `/metrics` is tens of kilobytes of histograms we don't need, scraped every
 * second per replica, so unwanted lines are skipped without allocating: names are matched in place,
 * and only the value of a wanted sample is sliced out.
 */

const SPACE = 0x20;
const TAB = 0x09;
const CR = 0x0d;
const HASH = 0x23;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * Calls `onSample(i, value)` for every sample of `names[i]` in `text`, one call per series (label set).
 * Comment and `#` lines, timestamps and malformed lines are skipped; never throws. `NaN`, `+Inf` and
 * `-Inf` are reported as such: what they mean is the caller's decision. A series whose label
 * `breakdown` has a non-empty value is skipped: it is a part of the total series, which has the label
 * empty or not at all (SGLang's per-priority queue counts, `priority="1"`, beside `priority=""`).
 */
export function scanSamples(text: string, names: readonly string[], onSample: (nameIndex: number, value: number) => void, breakdown?: string): void {
  let start = 0;
  while (start < text.length) {
    let end = text.indexOf('\n', start);
    if (end < 0) end = text.length;
    scanLine(text, start, end, names, onSample, breakdown);
    start = end + 1;
  }
}

/**
 * The label sets of every sample of `name` (for info metrics, whose data is in their labels, like
 * vLLM's `cache_config_info`). Label values are unescaped (`\\`, `\"`, `\n`). Never throws.
 */
export function scanLabels(text: string, name: string): Array<Map<string, string>> {
  return scanLabelled(text, name).map((series) => series.labels);
}

/**
 * Every sample of `name` that has labels, with its label set (as {@link scanLabels}) and its value (as
 * {@link scanSamples}: NaN for a missing or malformed one). For info metrics whose value says which
 * series is current, like vLLM's `lora_requests_info` (a timestamp: the latest wins). Never throws.
 * A sample is read within its own line (a label value holds no raw line feed: it is escaped `\n`), so
 * a label set or value left open stops at the line's end: read on into the lines after it, each
 * sample of a page of such lines read the rest of the page, and a 4 MiB page held the event loop
 * for minutes.
 */
export function scanLabelled(text: string, name: string): Array<{ labels: Map<string, string>; value: number }> {
  const out: Array<{ labels: Map<string, string>; value: number }> = [];
  for (let at = text.indexOf(name + '{'); at >= 0; at = text.indexOf(name + '{', at + 1)) {
    if (at > 0 && text.charCodeAt(at - 1) !== 0x0a) continue; // not at the start of a line
    let end = text.indexOf('\n', at);
    if (end < 0) end = text.length;
    const labels = new Map<string, string>();
    let pos = at + name.length + 1;
    for (;;) {
      const eq = indexBefore(text, 0x3d, pos, end); // '='
      if (eq < 0) break;
      const open = skipBlanks(text, eq + 1, end);
      if (open >= end || text.charCodeAt(open) !== QUOTE) break;
      const key = text.slice(pos, eq).trim();
      let value = '';
      let i = open + 1;
      let run = i;
      for (; i < end; i++) {
        const c = text.charCodeAt(i);
        if (c === QUOTE) break;
        if (c === BACKSLASH && i + 1 < end) {
          value += text.slice(run, i);
          i++;
          value += text[i] === 'n' ? '\n' : text[i];
          run = i + 1;
        }
      }
      if (i >= end) break; // the value is not closed on its line
      labels.set(key, value + text.slice(run, i));
      pos = i + 1;
      while (pos < end && (text.charCodeAt(pos) === 0x2c || isBlank(text.charCodeAt(pos)))) pos++;
      if (pos >= end || text.charCodeAt(pos) === CLOSE_BRACE) break;
    }
    out.push({ labels, value: valueAfterLabels(text, pos, end) });
    at = end - 1; // the next sample starts on a later line
  }
  return out;
}

/** The sample value after the `}` at or after `pos`, before `end` (the line's end); NaN when there is none. */
function valueAfterLabels(text: string, pos: number, end: number): number {
  const close = indexBefore(text, CLOSE_BRACE, pos, end);
  if (close < 0) return NaN;
  const start = skipBlanks(text, close + 1, end);
  let valueEnd = start;
  while (valueEnd < end && !isBlank(text.charCodeAt(valueEnd))) valueEnd++;
  return parseValue(text.slice(start, valueEnd)) ?? NaN;
}

/** The first `code` in `text` from `pos` before `end`, or -1 (never read past `end`, as `indexOf` would). */
function indexBefore(text: string, code: number, pos: number, end: number): number {
  for (let i = pos; i < end; i++) if (text.charCodeAt(i) === code) return i;
  return -1;
}

function scanLine(text: string, start: number, end: number, names: readonly string[], onSample: (nameIndex: number, value: number) => void, breakdown: string | undefined): void {
  let pos = skipBlanks(text, start, end);
  if (pos >= end || text.charCodeAt(pos) === HASH) return;
  const index = matchName(text, pos, end, names);
  if (index < 0) return;
  pos = skipBlanks(text, pos + (names[index] as string).length, end);
  if (text.charCodeAt(pos) === OPEN_BRACE) {
    const open = pos + 1;
    pos = skipLabels(text, open, end);
    if (pos < 0) return;
    if (breakdown !== undefined && labelSet(text, open, pos - 1, breakdown)) return;
  }
  pos = skipBlanks(text, pos, end);
  let valueEnd = pos;
  while (valueEnd < end && !isBlank(text.charCodeAt(valueEnd))) valueEnd++;
  const value = parseValue(text.slice(pos, valueEnd));
  if (value !== undefined) onSample(index, value);
}

/** The index of the wanted name the line starts with, followed by `{` or a blank; -1 for none. */
function matchName(text: string, pos: number, end: number, names: readonly string[]): number {
  for (let i = 0; i < names.length; i++) {
    const name = names[i] as string;
    const after = pos + name.length;
    if (after >= end || !text.startsWith(name, pos)) continue;
    const next = text.charCodeAt(after);
    if (next === OPEN_BRACE || isBlank(next)) return i;
  }
  return -1;
}

/** Whether the label set between `from` and its `}` at `to` gives `key` a non-empty value. */
function labelSet(text: string, from: number, to: number, key: string): boolean {
  let pos = from;
  while (pos < to) {
    while (pos < to && (text.charCodeAt(pos) === 0x2c || isBlank(text.charCodeAt(pos)))) pos++;
    const eq = indexBefore(text, 0x3d, pos, to); // '=' within the label set: indexOf would read on through the page
    if (eq < 0) return false;
    const open = skipBlanks(text, eq + 1, to);
    if (text.charCodeAt(open) !== QUOTE) return false;
    let close = open + 1;
    while (close < to && text.charCodeAt(close) !== QUOTE) close += text.charCodeAt(close) === BACKSLASH ? 2 : 1;
    if (text.slice(pos, eq).trim() === key) return close > open + 1;
    pos = close + 1;
  }
  return false;
}

/** The position after the `}` closing a label set that opened before `pos`; -1 when unterminated. */
function skipLabels(text: string, pos: number, end: number): number {
  let quoted = false;
  for (; pos < end; pos++) {
    const c = text.charCodeAt(pos);
    if (quoted) {
      if (c === BACKSLASH) pos++;
      else if (c === QUOTE) quoted = false;
    } else if (c === QUOTE) quoted = true;
    else if (c === CLOSE_BRACE) return pos + 1;
  }
  return -1;
}

/** A Go `ParseFloat`-style value: decimal or exponent notation, `NaN`, `±Inf`; undefined when malformed. */
function parseValue(raw: string): number | undefined {
  if (raw.length === 0) return undefined;
  const value = Number(raw);
  if (!Number.isNaN(value)) return value;
  switch (raw.toLowerCase()) {
    case 'nan':
      return NaN;
    case 'inf':
    case '+inf':
    case 'infinity':
    case '+infinity':
      return Infinity;
    case '-inf':
    case '-infinity':
      return -Infinity;
    default:
      return undefined;
  }
}

function skipBlanks(text: string, pos: number, end: number): number {
  while (pos < end && isBlank(text.charCodeAt(pos))) pos++;
  return pos;
}

function isBlank(c: number): boolean {
  return c === SPACE || c === TAB || c === CR;
}
