/**
 * The router's logger: pino JSON lines, the key's header redacted wherever it could appear.
 *
 * The access log writes one line per request, the hottest line by far: it is rendered by
 * `server/access-log.ts` and written straight to the logger's destination (the profile showed pino's
 * general object serialisation at a tenth of the router's allocations per request). The logger's
 * destination and line prefix are kept here (`lineSinkOf`), so the line is exactly what pino writes.
 *
 * Access-log lines reach the destination a turn of the event loop at a time (`LineBatch`): pino's
 * destination (sonic-boom) measures the text it still holds on every write, which flattens it, so
 * while one write was in flight each further line cost a copy of every line before it (4 KB
 * allocated a request at 6,000 requests/s). Other log lines are written as they come, so within one
 * turn an access-log line may follow a line logged after it; each line carries its own time.
 */
import { pino, type DestinationStream, type Logger } from 'pino';
import { type LogLevel } from '../config/schema.js';
import { type LineSink } from '../core/types.js';

const sinks = new WeakMap<Logger, LineSink>();
const BASE = { service: 'modelgate' };

/** JSON lines on stdout, or on `destination` (the demo's pretty printer, a test's capture). */
export function createLogger(level: LogLevel, destination: DestinationStream = pino.destination()): Logger {
  const options = { level, base: BASE, redact: { paths: ['req.headers.authorization', 'headers.authorization', 'authorization'], censor: '[redacted]' } };
  const logger = pino(options, destination);
  const batch = new LineBatch(destination);
  sinks.set(logger, { write: (line) => batch.write(line), bindings: JSON.stringify(BASE).slice(1, -1) });
  return logger;
}

/** The destination of a logger made by {@link createLogger}; undefined for other loggers. */
export function lineSinkOf(logger: Logger): LineSink | undefined {
  return sinks.get(logger);
}

/** Batches with lines not yet written: the process writes them (and flushes its destinations) when it exits. */
const unwritten = new Set<LineBatch>();
let exitHooked = false;

/** Lines joined until the event loop's next check phase, then written to the destination in one call. */
class LineBatch {
  private pending = '';

  constructor(private readonly destination: DestinationStream & { flushSync?: () => void }) {}

  write(line: string): void {
    if (this.pending === '') {
      setImmediate(() => this.flush());
      unwritten.add(this);
      if (!exitHooked) {
        exitHooked = true;
        process.on('exit', () => {
          for (const batch of unwritten) batch.flush(true);
        });
      }
    }
    this.pending += line;
  }

  /** `sync`: at exit, when no asynchronous write will finish any more. */
  flush(sync = false): void {
    const lines = this.pending;
    if (lines === '') return;
    this.pending = '';
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
