/** The router's logger: pino JSON lines, the key's header redacted wherever it could appear. */
import { pino, type DestinationStream, type Logger } from 'pino';
import { type LogLevel } from '../config/schema.js';

/** JSON lines on stdout, or on `destination` (the demo's pretty printer). */
export function createLogger(level: LogLevel, destination?: DestinationStream): Logger {
  const options = { level, base: { service: 'modelgate' }, redact: { paths: ['req.headers.authorization', 'headers.authorization', 'authorization'], censor: '[redacted]' } };
  return destination ? pino(options, destination) : pino(options);
}
