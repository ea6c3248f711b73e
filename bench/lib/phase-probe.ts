/**
 * A subscriber to the request-phase channel (src/core/phases.ts), loaded into a router process with
 * `--import` by the path benchmark (bench/path.ts): a diagnostic run, never a latency run. For each
 * request it notes when each step was passed (process.hrtime) and, when the response finishes, the
 * gap from the step before. SIGUSR2 writes what it gathered since the last SIGUSR2 to the file
 * BENCH_PHASE_OUT names (JSON, {@link ProbeDump}) and starts again.
 *
 * The Node floor (node-proxy.ts) publishes the steps it has on the same channel, so both are timed
 * by the same code. A request that passed a step twice (a retry) is counted apart and left out of
 * the gaps.
 */
import { subscribe } from 'node:diagnostics_channel';
import { writeFileSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { PHASE_CHANNEL, PHASES, type PhaseMessage } from '../../src/core/phases.js';

/** Every step of the path: the router's, then the response's `finish`. */
export const STEPS = [...PHASES, 'finished'] as const;
export type Step = (typeof STEPS)[number];

export interface ProbeDump {
  /** Requests timed whole. */
  requests: number;
  /** Requests left out: a step passed twice (a retry). */
  leftOut: number;
  /** Per step, µs from the last step passed before it, one entry per request that passed it. */
  gaps: Partial<Record<Step, number[]>>;
  /** Per request, µs from `received` to `finished` less the wait for the engine (`sent` to `responded`): the process's own time. */
  own: number[];
  /** The same, from `received` to `first_byte` only: the process's share of the time to first byte. */
  ownToFirstByte: number[];
}

/** One request's passage: when it passed each step, and whether it passed one twice. */
interface Passage {
  at: Array<bigint | undefined>;
  repeated: boolean;
}

const out = process.env.BENCH_PHASE_OUT;
if (out) {
  const index = new Map<string, number>(STEPS.map((step, i) => [step, i]));
  const RESPONDED = STEPS.indexOf('responded');
  const FIRST_BYTE = STEPS.indexOf('first_byte');
  const passages = new WeakMap<ServerResponse, Passage>();
  let dump: ProbeDump = { requests: 0, leftOut: 0, gaps: {}, own: [], ownToFirstByte: [] };
  const finished = (passage: Passage): void => {
    const { at } = passage;
    at[STEPS.length - 1] = process.hrtime.bigint();
    if (passage.repeated) {
      dump.leftOut += 1;
      return;
    }
    dump.requests += 1;
    let before = at[0] as bigint;
    let own = 0;
    for (let i = 1; i < STEPS.length; i++) {
      const now = at[i];
      if (now === undefined) continue;
      const gap = Number(now - before) / 1000;
      (dump.gaps[STEPS[i] as Step] ??= []).push(gap);
      if (i !== RESPONDED) own += gap;
      if (i === FIRST_BYTE) dump.ownToFirstByte.push(own);
      before = now;
    }
    dump.own.push(own);
  };
  subscribe(PHASE_CHANNEL, (message) => {
    const { res, phase } = message as PhaseMessage;
    const now = process.hrtime.bigint();
    if (phase === 'received') {
      const passage: Passage = { at: new Array<bigint | undefined>(STEPS.length), repeated: false };
      passage.at[0] = now;
      passages.set(res, passage);
      res.once('finish', () => finished(passage));
      return;
    }
    const passage = passages.get(res);
    if (!passage) return; // (every request is received first)
    const i = index.get(phase) as number;
    if (passage.at[i] !== undefined) passage.repeated = true;
    else passage.at[i] = now;
  });
  process.on('SIGUSR2', () => {
    writeFileSync(out, JSON.stringify(dump));
    dump = { requests: 0, leftOut: 0, gaps: {}, own: [], ownToFirstByte: [] };
  });
}
