/**
 * The router's logger: pino JSON lines, the key's header redacted wherever it could appear.
 *
 * The access log writes one line per request, the hottest line by far: it is rendered by
 * `server/access-log.ts` and written straight to the logger's destination (the profile showed pino's
 * general object serialisation at a tenth of the router's allocations per request). The logger's
 * destination and line prefix are kept here (`lineSinkOf`), so the line is exactly what pino writes.
 *
 * Access-log lines reach the destination in batches (`LineBatch`): what gathered over at most
 * {@link LINE_BATCH_MS}, or {@link LINE_BATCH_BYTES} of lines, in one write. pino's destination
 * (sonic-boom) hands each write to libuv's thread pool: at 500 requests/s, one write per request cost
 * the router about 60 µs of CPU a request between its own thread and the pool's (a tenth of its CPU at
 * that rate), and each write also measured the text still held, which flattened it (4 KB allocated a
 * request at 6,000 requests/s while a write was in flight). Other log lines are written as they come,
 * so an access-log line may follow a line logged up to {@link LINE_BATCH_MS} after it; each line
 * carries its own time. Lines still pending are written when the router closes and when the process
 * exits.
 */
import { pino, type DestinationStream, type Logger } from 'pino';
import { type LogLevel } from '../config/schema.js';
import { type LineSink } from '../core/types.js';

const sinks = new WeakMap<Logger, LineSink>();
/** Longest an access-log line waits for others to share its write. */
export const LINE_BATCH_MS = 50;
/** Pending access-log text past which it is written at once. */
export const LINE_BATCH_BYTES = 64 * 1024;
const BASE = { service: 'modelgate' };

/**
 * Most log text held for stdout while it takes none (a pipe nobody reads, a blocked collector); what
 * comes past it is dropped, and a warning says how much once stdout takes lines again. Unbounded, the
 * router's heap grew by every line.
 */
export const MAX_UNWRITTEN_LOG_BYTES = 16 * 1024 * 1024;

/** stdout as pino's asynchronous destination (sonic-boom), holding at most {@link MAX_UNWRITTEN_LOG_BYTES}. */
export function stdoutDestination(): DestinationStream {
  return pino.destination({ dest: process.stdout.fd, minLength: 0, maxLength: MAX_UNWRITTEN_LOG_BYTES });
}

/** JSON lines on stdout, or on `destination` (the demo's pretty printer, a test's capture). */
export function createLogger(level: LogLevel, destination: DestinationStream = stdoutDestination()): Logger {
  const options = { level, base: BASE, redact: { paths: ['req.headers.authorization', 'headers.authorization', 'authorization'], censor: '[redacted]' } };
  const logger = pino(options, destination);
  const batch = new LineBatch(destination);
  // sonic-boom's 'drop': text it did not take (over maxLength); counted for the warning
  const events = destination as DestinationStream & { on?: (event: string, listener: (data: string) => void) => unknown };
  events.on?.('drop', (data: string) => batch.dropped(Buffer.byteLength(data)));
  sinks.set(logger, { write: (line) => batch.write(line), flush: () => batch.flush(), bindings: JSON.stringify(BASE).slice(1, -1) });
  return logger;
}

/** The destination of a logger made by {@link createLogger}; undefined for other loggers. */
export function lineSinkOf(logger: Logger): LineSink | undefined {
  return sinks.get(logger);
}

/** Batches with lines not yet written: the process writes them (and flushes its destinations) when it exits. */
const unwritten = new Set<LineBatch>();
let exitHooked = false;

/** Lines joined for at most {@link LINE_BATCH_MS} or {@link LINE_BATCH_BYTES}, then written to the destination in one call. */
class LineBatch {
  private pending = '';
  private timer: NodeJS.Timeout | undefined;
  /** Bytes the destination dropped since the last warning. */
  private lost = 0;

  constructor(private readonly destination: DestinationStream & { flushSync?: () => void }) {}

  write(line: string): void {
    if (this.pending === '') {
      // unref'd: a pending line keeps no process alive (the exit hook writes it)
      this.timer = setTimeout(() => this.flush(), LINE_BATCH_MS).unref();
      unwritten.add(this);
      if (!exitHooked) {
        exitHooked = true;
        process.on('exit', () => {
          for (const batch of unwritten) batch.flush(true);
        });
      }
    }
    this.pending += line;
    if (this.pending.length >= LINE_BATCH_BYTES) this.flush();
  }

  /** The destination dropped `bytes` of text: the next write starts with a warning that says so. */
  dropped(bytes: number): void {
    this.lost += bytes;
    if (this.pending === '') this.write('');
  }

  /** `sync`: at exit, when no asynchronous write will finish any more. */
  flush(sync = false): void {
    let lines = this.pending;
    if (this.lost > 0) {
      lines = `{"level":40,"time":${Date.now()},${JSON.stringify(BASE).slice(1, -1)},"droppedBytes":${this.lost},"msg":"log lines dropped: stdout took none while more than ${MAX_UNWRITTEN_LOG_BYTES} bytes waited"}\n${lines}`;
      this.lost = 0;
    }
    if (lines === '') return;
    this.pending = '';
    clearTimeout(this.timer);
    this.timer = undefined;
    unwritten.delete(this);
    try {
      this.destination.write(lines);
      if (sync) this.destination.flushSync?.();
    } catch {
      // the destination was closed under the router (ended, or its file descriptor gone): the lines are
      // dropped. This runs from a timer, where a throw would end the process; no log line is worth that
    }
  }
}
