/**
 * The balancing fleet shared by balance.ts and multi-router.ts: four simulator replicas, two of them
 * twice as slow, and the long-tailed request mix (no shared prefix) they are fed.
 */
import { load } from './loadgen.js';
import { startSim, type Proc } from './procs.js';
import { logNormal, mulberry32 } from './random.js';

export const MAX_NUM_SEQS = 8;
export const FAST = ['--ttft-ms', '10', '--prefill-ms-per-token', '0.05', '--itl-ms', '4'];
export const SLOW = ['--ttft-ms', '20', '--prefill-ms-per-token', '0.1', '--itl-ms', '8'];
export const REPLICAS: Array<{ name: string; args: string[] }> = [
  { name: 'fast-0', args: FAST },
  { name: 'fast-1', args: FAST },
  { name: 'slow-0', args: SLOW },
  { name: 'slow-1', args: SLOW },
];

export function startFleet(model: string): Promise<Proc[]> {
  return Promise.all(REPLICAS.map((r) => startSim(r.name, ['--model', model, '--max-num-seqs', String(MAX_NUM_SEQS), '--max-waiting', '100000', ...r.args])));
}

/** Long-tailed request mix: log-normal prompt (median 256 tokens) and output (median 48 tokens) lengths. */
export function mixBodies(model: string, tag: string, count: number): string[] {
  const random = mulberry32(42);
  return Array.from({ length: count }, (_, i) => {
    const promptWords = Math.min(3000, Math.max(8, Math.round(logNormal(random, 256, 0.9))));
    const output = Math.min(512, Math.max(1, Math.round(logNormal(random, 48, 0.9))));
    // a unique first word per run keeps one policy from reusing another's prefix cache
    const content =
      `${tag}-${i} ` +
      'lorem ipsum dolor sit amet '
        .repeat(Math.ceil(promptWords / 5))
        .split(' ')
        .slice(0, promptWords)
        .join(' ');
    return JSON.stringify({ model, messages: [{ role: 'user', content }], max_tokens: output, ignore_eos: true, stream: true });
  });
}

/** Capacity of one replica (requests/s): closed loop with its batch full, on the same request mix. */
export async function capacity(replica: Proc, mix: string[], warmupMs: number, durationMs: number): Promise<number> {
  const result = await load({ url: `${replica.url}/v1/chat/completions`, headers: {}, bodies: mix, mode: 'closed', concurrency: MAX_NUM_SEQS, warmupMs, durationMs });
  return result.samples.filter((s) => s.status === 200).length / (durationMs / 1000);
}

/** Every replica's capacity on the mix (each alone, in turn) and the fleet's total, logged under `label`. */
export async function fleetCapacity(
  sims: readonly Proc[],
  model: string,
  warmupMs: number,
  durationMs: number,
  label: string,
): Promise<{ perReplica: Array<{ name: string; rps: number }>; fleet: number }> {
  const perReplica: Array<{ name: string; rps: number }> = [];
  for (const [i, sim] of sims.entries()) {
    const rps = await capacity(sim, mixBodies(model, `calibrate${i}`, 500), warmupMs, durationMs);
    perReplica.push({ name: sim.name, rps });
    console.error(`${label}: ${sim.name} capacity ${rps.toFixed(1)} req/s`);
  }
  return { perReplica, fleet: perReplica.reduce((sum, r) => sum + r.rps, 0) };
}
