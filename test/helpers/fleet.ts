/** Three simulated replicas behind one router pool, for tests that kill one of them under traffic. */
import { type RunningRouter } from '../../src/main.js';
import { type SimServer } from '../../src/sim/server.js';
import { startTestRouter, type TestRouter } from './router.js';
import { startTestSim } from './sim.js';

export interface KillableFleet {
  replicas: SimServer[];
  /** The replica a test kills (the first), and its URL (still known after it closed). */
  victim: SimServer;
  victimUrl: string;
  g: TestRouter<RunningRouter>;
}

/**
 * Replicas r0–r2 serving `served/llm` in pool `llm` for deployment `deployment` (model `llm`), with
 * quick retries and a breaker that opens after 3 failures and stays open `cooldownMs`. Everything
 * started is handed to `cleanups`.
 */
export async function startKillableFleet(cooldownMs: number, deployment: string, cleanups: Array<() => Promise<unknown>>): Promise<KillableFleet> {
  const replicas: SimServer[] = await Promise.all([0, 1, 2].map((i) => startTestSim({ model: ['served/llm'], name: `r${i}`, itlMs: 5 })));
  cleanups.push(() => Promise.all(replicas.map((s) => s.close())));
  const victim = replicas[0] as SimServer;
  const g = await startTestRouter({
    pools: [
      {
        name: 'llm',
        servedModelName: 'served/llm',
        endpoints: replicas.map((s) => s.url),
        resilience: { retries: { maxRetries: 2, initialBackoffMs: 5, maxBackoffMs: 20 }, breaker: { failureThreshold: 3, cooldownMs, closeAfterSuccesses: 1 } },
      },
    ],
    deployments: [{ id: deployment, model: 'llm', targets: [{ pool: 'llm' }] }],
  });
  cleanups.push(() => g.close());
  return { replicas, victim, victimUrl: victim.url, g };
}
