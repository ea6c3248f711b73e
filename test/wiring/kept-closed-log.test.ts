/** The warning a breaker kept closed writes: at most one line a minute per replica, with how many more since. */
import { describe, expect, it } from '@jest/globals';
import { keptClosedLog } from '../../src/wiring/log-watches.js';
import { captureLogs } from '../helpers/router.js';

describe('keptClosedLog', () => {
  it('writes the first verdict for a replica, then none for a minute, then one that says how many it left out', () => {
    const { logs, logger } = captureLogs();
    let now = 0;
    const log = keptClosedLog(logger, () => now);
    log('llm', 'http://a', ['mallory'], 5);
    now = 30_000;
    log('llm', 'http://a', ['mallory'], 5);
    log('llm', 'http://a', ['mallory', 'eve'], 6);
    log('llm', 'http://b', ['mallory'], 5); // another replica: its own line
    now = 60_000;
    log('llm', 'http://a', ['mallory'], 5);
    const lines = logs.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.map((l) => [l.endpoint, l.keys, l.alsoSince])).toEqual([
      ['http://a', ['mallory'], undefined],
      ['http://b', ['mallory'], undefined],
      ['http://a', ['mallory'], 2],
    ]);
    expect(lines.every((l) => l.level === 40 && l.msg === 'circuit breaker kept closed: server errors from a replica that passes its health check')).toBe(true);
  });
});
