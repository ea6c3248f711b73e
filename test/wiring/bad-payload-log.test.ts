/** The warning a skipped KV-event message writes: a replica's first, then at most one line a minute that says how many it left out (regression: a flood wrote a line per message). */
import { describe, expect, it } from '@jest/globals';
import { badPayloadLog } from '../../src/wiring/log-watches.js';
import { captureLogs } from '../helpers/router.js';

describe('badPayloadLog', () => {
  it("writes a replica's first skipped message, then none for a minute however many come, then one that says how many it left out", () => {
    const { logs, logger } = captureLogs();
    let now = 0;
    const log = badPayloadLog(logger, () => now);
    log('chat', 'http://a', 'not msgpack: a');
    for (let i = 0; i < 10_000; i++) log('chat', 'http://a', 'not msgpack: flood');
    log('chat', 'http://b', 'not msgpack: b'); // another replica: its own first line
    now = 59_999;
    log('chat', 'http://a', 'not msgpack: flood');
    now = 60_000;
    log('chat', 'http://a', 'not msgpack: later');
    now = 60_001;
    log('chat', 'http://a', 'not msgpack: again');
    const lines = logs.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.map((l) => [l.endpoint, l.error, l.alsoSkipped])).toEqual([
      ['http://a', 'not msgpack: a', undefined],
      ['http://b', 'not msgpack: b', undefined],
      ['http://a', 'not msgpack: later', 10_001],
    ]);
    expect(lines.every((l) => l.level === 40 && l.pool === 'chat' && l.msg === 'KV-event message skipped: not a KVEventBatch')).toBe(true);
  });

  it('keeps the same endpoint of two pools apart', () => {
    const { logs, logger } = captureLogs();
    const log = badPayloadLog(logger, () => 0);
    log('chat', 'http://a', 'x');
    log('embed', 'http://a', 'x');
    log('chat', 'http://a', 'x');
    expect(logs).toHaveLength(2);
  });

  it('says a replica whose batches wait for their share of the loop apart from its malformed messages, each in its own words', () => {
    const { logs, logger } = captureLogs();
    const log = badPayloadLog(logger, () => 0);
    log('chat', 'http://a', 'not msgpack', 'malformed');
    log('chat', 'http://a', 'a batch waited 90 ms', 'throttled');
    log('chat', 'http://a', 'a batch waited 95 ms', 'throttled');
    const lines = logs.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.map((l) => [l.reason, l.msg])).toEqual([
      ['malformed', 'KV-event message skipped: not a KVEventBatch'],
      ['throttled', "KV-event messages read late: the replica's batches take more than their share of the event loop (what its publisher cannot queue is dropped: a gap)"],
    ]);
  });
});
