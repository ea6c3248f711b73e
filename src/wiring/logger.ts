/**
 * The router's logger: pino JSON lines, the key's header redacted wherever it could appear.
 *
 * The access log writes one line per request, the hottest line by far: it is rendered by
 * `server/access-log.ts` and written straight to the logger's destination (the profile showed pino's
 * general object serialisation at a tenth of the router's allocations per request). The logger's
 * destination and line prefix are kept here (`lineSinkOf`), so the line is exactly what pino writes.
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
  sinks.set(logger, { destination, bindings: JSON.stringify(BASE).slice(1, -1) });
  return logger;
}

/** The destination of a logger made by {@link createLogger}; undefined for other loggers. */
export function lineSinkOf(logger: Logger): LineSink | undefined {
  return sinks.get(logger);
}
