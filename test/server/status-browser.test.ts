/**
 * The status page in a real browser (headless Chromium, the system's): under steady traffic to three
 * simulated replicas the page lists each replica, with its engine sample, and draws the pool's
 * latency sparkline; after one replica is killed, the page — refreshing itself — shows its breaker
 * open. Takes the README's screenshot (docs/status-page.png) on the way.
 *
 * With `UPDATE_SCREENSHOT=1` the fleet first runs under a changing load for `HISTORY_MS` (four
 * minutes), so the screenshot shows minutes of sparkline history; the ordinary run takes seconds.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Page } from 'puppeteer-core';
import { launchChromium } from '../helpers/chromium.js';
import { rawRequest } from '../helpers/http.js';
import { startKillableFleet } from '../helpers/fleet.js';
import { KEY } from '../helpers/router.js';
import { waitFor } from '../helpers/sim.js';

/**
 * The README's screenshot is taken again only on request (`UPDATE_SCREENSHOT=1`): a test run never
 * writes into the repository. Otherwise it goes to a temp file, and must be a real image.
 */
const SCREENSHOT = process.env.UPDATE_SCREENSHOT === '1' ? new URL('../../docs/status-page.png', import.meta.url).pathname : join(tmpdir(), `modelgate-status-${process.pid}.png`);
/** How long the fleet runs under traffic before the page is opened: minutes of history for the README's screenshot, none otherwise. */
const HISTORY_MS = process.env.UPDATE_SCREENSHOT === '1' ? 4 * 60_000 : 0;
/** The number of clients sending during each 20 s of the history: a load that rises and falls, for the sparkline to show. */
const HISTORY_LOAD = [2, 3, 5, 6, 4, 2, 1, 3, 6, 6, 5, 3];
/** Bounds on what the page must show: two or three of its refreshes on a loaded machine. */
const DOM_TIMEOUT_MS = 15_000;

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Waits until `predicate`, run in the page against its current DOM, holds. */
async function waitForDom(page: Page, predicate: string, what: string): Promise<void> {
  try {
    await page.waitForFunction(predicate, { timeout: DOM_TIMEOUT_MS, polling: 'mutation' });
  } catch (err) {
    throw new Error(`timed out waiting for the page to show ${what}`, { cause: err });
  }
}

/** Each replica row's id, readiness and breaker state as the DOM shows them (evaluated as text: the tests compile without the DOM's types). */
async function replicaRows(page: Page): Promise<string[][]> {
  const rows: unknown = await page.evaluate(
    `[...document.querySelectorAll('tr.replica')].map((r) => [r.getAttribute('data-replica'), r.getAttribute('data-ready'), r.querySelector('td.breaker')?.textContent])`,
  );
  return rows as string[][];
}

describe('the status page in headless Chromium', () => {
  it(
    'lists every replica under traffic, and shows a killed replica’s breaker open',
    async () => {
      // a long cool-down: the breaker stays open while the page is looked at
      const { replicas, victim, victimUrl, g } = await startKillableFleet(60_000, 'chat', cleanups);

      let running = true;
      let succeeded = 0;
      const historyEnds = Date.now() + HISTORY_MS;
      /** While the history runs, whether client `id` sends now (HISTORY_LOAD's count for this 20 s). */
      const idle = (id: number): boolean => Date.now() < historyEnds && id >= HISTORY_LOAD[Math.floor((historyEnds - Date.now()) / 20_000) % HISTORY_LOAD.length]!;
      const client = async (id: number): Promise<void> => {
        for (let i = 0; running; i++) {
          if (idle(id)) {
            await new Promise((resolve) => setTimeout(resolve, 250)); // pacing the load, not waiting on an outcome
            continue;
          }
          const stream = (i + id) % 3 === 0;
          const res = await rawRequest(`${g.router.apiUrl}/v1/chat/completions`, {
            headers: { authorization: `Bearer ${KEY}` },
            body: { model: 'llm', messages: [{ role: 'user', content: `client ${id} asks ${i}` }], max_tokens: stream ? 40 : 8, ignore_eos: true, stream },
          });
          if (res.status === 200) succeeded += 1;
        }
      };
      const load = Promise.all([0, 1, 2, 3, 4, 5].map((id) => client(id)));
      cleanups.push(async () => {
        running = false;
        await load;
      });

      const chromium = await launchChromium();
      cleanups.push(() => chromium.close());
      const page = await chromium.page(1200, 800);
      const errors: string[] = [];
      page.on('pageerror', (err) => errors.push(String(err)));
      page.on('console', (msg) => {
        if (msg.type() === 'error') errors.push(msg.text()); // a CSP violation would land here
      });

      await waitFor(() => succeeded >= 30 && Date.now() >= historyEnds, 'steady load before the page is opened', HISTORY_MS + 15_000);
      const res = await page.goto(`${g.router.adminUrl}/status`, { waitUntil: 'load' });
      expect(res?.status()).toBe(200);
      expect(await replicaRows(page)).toEqual(replicas.map((s) => [s.url, 'true', 'closed']));
      // the page refreshes itself: engine samples and the latency sparkline show up without a reload
      await waitForDom(page, `document.querySelectorAll('tr.replica td.num.mute').length === 0`, 'an engine sample for every replica');
      await waitForDom(page, `document.querySelector('section.pool svg.spark polyline.p50, section.pool svg.spark circle.p50') !== null`, 'the latency sparkline');

      await victim.close(); // the pod dies: connections cut, port refuses
      await waitForDom(page, `document.querySelector('tr.replica[data-replica="${victimUrl}"]')?.getAttribute('data-breaker') === 'open'`, 'the killed replica’s breaker open');
      // no health checks in this pool: the dead replica is still listed as ready, its breaker keeps traffic off it
      expect(await replicaRows(page)).toEqual([
        [victimUrl, 'true', 'open'],
        [replicas[1]!.url, 'true', 'closed'],
        [replicas[2]!.url, 'true', 'closed'],
      ]);
      expect(await page.evaluate(`document.getElementById('conn').textContent`)).toBe('live');
      await page.screenshot({ path: SCREENSHOT, type: 'png' });
      expect(readFileSync(SCREENSHOT).subarray(1, 4).toString('latin1')).toBe('PNG');
      if (process.env.UPDATE_SCREENSHOT !== '1') rmSync(SCREENSHOT, { force: true });
      expect(errors).toEqual([]);
    },
    HISTORY_MS > 0 ? HISTORY_MS + 60_000 : undefined,
  );
});
