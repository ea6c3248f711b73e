/**
 * A replay of missed KV-event batches against a replay socket that goes silent before its end marker:
 * what came back is kept, and the wait is timed on the monotonic clock (a wall-clock step back while it
 * waits does not stretch it by the step).
 */
import { afterEach, describe, expect, it, jest } from '@jest/globals';
import { Router } from 'zeromq';
import { replayFrom } from '../../src/kv-events/zmq-transport.js';
import { seqFrame } from '../../src/kv-events/wire.js';

const HOUR = 3_600_000;

/** A replay socket that answers the first request with one batch (seq 5) and then nothing, no end marker (a publisher that went away mid-replay). */
async function silentAfterOne(replay: (endpoint: string) => Promise<Array<readonly [bigint, Uint8Array]>>, beforeAnswer: () => void = () => undefined): Promise<Array<[bigint, string]>> {
  const router = new Router({ linger: 0 });
  try {
    await router.bind('tcp://127.0.0.1:*');
    const served = (async () => {
      const [identity] = await router.receive(); // [identity, '', start]
      beforeAnswer();
      await router.send([identity as Buffer, Buffer.alloc(0), seqFrame(5n), Buffer.from('batch')]);
    })();
    const frames = await replay(router.lastEndpoint as string);
    await served;
    return frames.map(([seq, payload]) => [seq, Buffer.from(payload).toString()]);
  } finally {
    router.close();
  }
}

describe('replayFrom', () => {
  afterEach(() => {
    jest.restoreAllMocks();
  });

  it('keeps the batches that came when the time runs out before the end marker', async () => {
    expect(await silentAfterOne((endpoint) => replayFrom(endpoint, 5n))).toEqual([[5n, 'batch']]);
  });

  it('ends at its time limit when the wall clock steps back an hour while it waits', async () => {
    const wall = Date.now;
    const stepBack = (): void => void jest.spyOn(Date, 'now').mockImplementation(() => wall.call(Date) - HOUR); // NTP steps the clock back
    expect(await silentAfterOne((endpoint) => replayFrom(endpoint, 5n), stepBack)).toEqual([[5n, 'batch']]);
  });
});
