/**
 * Kill a replica under steady load: every non-streamed request still succeeds (retried elsewhere);
 * only streams already on the dead replica end, each with an SSE error event; the breaker opens, and
 * closes again once the replica is back. The counts are printed for the record.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { rawRequest, sseData } from '../helpers/http.js';
import { startKillableFleet } from '../helpers/fleet.js';
import { KEY } from '../helpers/router.js';
import { startTestSim, waitFor } from '../helpers/sim.js';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe('killing a replica under steady load', () => {
  it('loses no non-streamed request, ends only its own streams cleanly, opens and later closes its breaker', async () => {
    const { victim, victimUrl, g } = await startKillableFleet(400, 'llm', cleanups);

    const counts = { sent: 0, succeeded: 0, failed: 0, streams: 0, streamsEndedWithError: 0, streamsTruncated: 0 };
    let running = true;
    const client = async (id: number): Promise<void> => {
      for (let i = 0; running; i++) {
        const stream = (i + id) % 3 === 0;
        counts.sent += 1;
        const res = await rawRequest(`${g.router.apiUrl}/v1/chat/completions`, {
          headers: { authorization: `Bearer ${KEY}` },
          body: { model: 'llm', messages: [{ role: 'user', content: 'hi' }], max_tokens: stream ? 80 : 8, ignore_eos: true, stream },
        });
        if (res.status !== 200) {
          counts.failed += 1;
          continue;
        }
        counts.succeeded += 1;
        if (!stream) continue;
        counts.streams += 1;
        const events = sseData(res.body);
        if (events.at(-1) !== '[DONE]') counts.streamsTruncated += 1;
        else if (events.some((e) => e.startsWith('{"error"'))) counts.streamsEndedWithError += 1;
      }
    };
    const load = Promise.all([0, 1, 2, 3, 4, 5, 6, 7].map((id) => client(id)));

    // Steps wait on progress, not on the clock: a busy machine gets fewer requests per second.
    await waitFor(() => counts.succeeded >= 40, 'steady load before the kill', 15_000);
    const sentAtKill = counts.sent;
    await victim.close(); // the pod dies: connections cut, port refuses
    await waitFor(() => [...g.router.breakers.states()].some((b) => b.endpoint === victimUrl && b.state === 'open'), 'the dead replica’s breaker to open');
    await waitFor(() => counts.sent >= sentAtKill + 20, 'load to go on while the replica is down', 15_000);
    const revived = await startTestSim({ model: ['served/llm'], name: 'r0-revived', itlMs: 5, port: Number(new URL(victimUrl).port) });
    cleanups.push(() => revived.close());
    await waitFor(() => [...g.router.breakers.states()].some((b) => b.endpoint === victimUrl && b.state === 'closed'), 'the breaker to close once the replica is back', 8000);
    await waitFor(() => revived.engine.stats.finished.length + revived.engine.stats.finished.stop > 0, 'the revived replica to serve again');
    running = false;
    await load;

    const metrics = (await rawRequest(`${g.router.adminUrl}/metrics`)).body;
    const retried = metrics
      .split('\n')
      .filter((l) => l.startsWith('modelgate_retries_total{'))
      .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
    console.log(`kill-a-replica: ${JSON.stringify({ ...counts, retried })}`);

    expect(counts.failed).toBe(0);
    expect(counts.succeeded).toBe(counts.sent);
    expect(counts.streamsTruncated).toBe(0);
    expect(retried).toBeGreaterThan(0);
    expect(counts.sent).toBeGreaterThanOrEqual(sentAtKill + 20);
    expect(g.logs.join('')).toContain('circuit breaker open');
    await waitFor(() => g.router.inFlight.total() === 0, 'no request outstanding');
  });
});
