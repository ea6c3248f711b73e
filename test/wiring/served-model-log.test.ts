/** The warning a replica without its pool's model writes: at most one line a minute per pool and replica, with how many more since. */
import { describe, expect, it } from '@jest/globals';
import { servedModelLog } from '../../src/wiring/log-watches.js';
import { captureLogs } from '../helpers/router.js';

const pool = (name: string) => ({ name, servedModelName: 'Llama-3-8B', engine: 'vllm' }) as Parameters<ReturnType<typeof servedModelLog>>[0];
const SAID = 'The model `Llama-3-8B` does not exist.';

describe('servedModelLog', () => {
  it('writes a pool and replica’s first refusal, then none for a minute, then one that says how many it left out', () => {
    const { logs, logger } = captureLogs();
    let now = 0;
    const log = servedModelLog(logger, () => now);
    log(pool('p'), 'http://a', SAID);
    now = 30_000;
    log(pool('p'), 'http://a', SAID);
    log(pool('p'), 'http://a', SAID);
    log(pool('p'), 'http://b', SAID); // another replica: its own line
    log(pool('q'), 'http://a', SAID); // another pool on the same replica: its own line
    now = 60_000;
    log(pool('p'), 'http://a', 'x'.repeat(1000));
    const lines = logs.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.map((l) => [l.pool, l.endpoint, l.alsoSince])).toEqual([
      ['p', 'http://a', undefined],
      ['p', 'http://b', undefined],
      ['q', 'http://a', undefined],
      ['p', 'http://a', 2],
    ]);
    expect(lines[0]).toMatchObject({ level: 40, servedModelName: 'Llama-3-8B', engine: 'vllm', said: SAID });
    expect((lines[3]?.said as string).length).toBe(300);
  });

  it('keeps a bounded record of the replicas it warned of', () => {
    const { logs, logger } = captureLogs();
    const log = servedModelLog(logger, () => 0);
    for (let i = 0; i < 10_002; i++) log(pool('p'), `http://ep-${i}`, SAID);
    // the record was cleared past 10,000: the first replica is warned of again within its minute
    log(pool('p'), 'http://ep-0', SAID);
    expect(logs).toHaveLength(10_003);
  });
});
