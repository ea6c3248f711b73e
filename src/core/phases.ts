/**
 * Where an inference request is on its critical path, for diagnostics. Each step publishes on the
 * `modelgate:request.phase` diagnostics channel (node:diagnostics_channel) as the request passes it;
 * with nobody subscribed a step costs one `hasSubscribers` check and publishes nothing. The path
 * benchmark (bench/path.ts) loads a subscriber into the router that times the gaps between steps, so
 * that the added latency can be split into the router's steps and Node's own, and the next thing to
 * cut chosen from data. The steps, in the order a request passes them:
 *
 * - `received`: the request's context is opened (Node has parsed its head);
 * - `authenticated`: its key is known good;
 * - `body_read`: its body is in;
 * - `validated`: the body is parsed and validated;
 * - `planned`: its model is resolved, its limits passed and its route planned;
 * - `picked`: admission let it in and a replica was picked (again on a retry);
 * - `sent`: the request to the engine is being written (with undici: as it starts writing it on a
 *   connection, after any wait for one);
 * - `responded`: the engine's response head has come (again on a retry);
 * - `first_byte`: the first body chunk is written to the client.
 *
 * The response's `finish` event ends the path; a subscriber listens for it itself.
 */
import { channel } from 'node:diagnostics_channel';
import type { ServerResponse } from 'node:http';

export const PHASES = ['received', 'authenticated', 'body_read', 'validated', 'planned', 'picked', 'sent', 'responded', 'first_byte'] as const;
export type Phase = (typeof PHASES)[number];

/** What the channel carries: the client's response (one per request) and the step it passed. */
export interface PhaseMessage {
  res: ServerResponse;
  phase: Phase;
}

export const PHASE_CHANNEL = 'modelgate:request.phase';
const phases = channel(PHASE_CHANNEL);

/** The request answered by `res` passed `phase` (published only when someone listens). */
export function passed(res: ServerResponse, phase: Phase): void {
  if (phases.hasSubscribers) phases.publish({ res, phase } satisfies PhaseMessage);
}
