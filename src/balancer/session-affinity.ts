/**
 * Session affinity: a session key maps to a replica by rendezvous (highest-random-weight) hashing, a
 * consistent hash — a replica that leaves moves only its own sessions, one that joins takes only a
 * fair share — with bounded load (after Mirrokni et al.): a replica whose load (per unit of weight)
 * is at least `loadFactor` × the mean load + 1 is passed over for the session's next choice, so hot
 * sessions cannot bury one replica. The "+ 1" keeps a nearly idle fleet from moving a session for a
 * single request in flight. Pure.
 */
import { hash53 } from '../core/hash.js';
import { type Endpoint } from '../core/types.js';

/**
 * The index in `candidates` that serves `key`, or -1 when there is no candidate. `load` is per unit of
 * weight. Only the first `count` candidates take part (default: all).
 */
export function sessionTarget(candidates: readonly Endpoint[], key: string, load: (i: number) => number, loadFactor: number, count = candidates.length): number {
  if (count === 0) return -1;
  let totalWeight = 0;
  let totalLoad = 0;
  for (let i = 0; i < count; i++) {
    const { weight } = candidates[i] as Endpoint;
    totalWeight += weight;
    totalLoad += load(i) * weight;
  }
  const bound = (loadFactor * totalLoad) / totalWeight + 1;
  const seed = hash53(key) % 4294967296;
  // the highest rendezvous score under the load bound, else the highest of all; ties to the earlier
  let best = -1;
  let bestScore = -Infinity;
  let bounded = -1;
  let boundedScore = -Infinity;
  for (let i = 0; i < count; i++) {
    const ep = candidates[i] as Endpoint;
    // weighted rendezvous: −w / ln(u) with u uniform in (0,1) from the hash of (key, replica)
    const u = (hash53(ep.id, seed) + 1) / (2 ** 53 + 2);
    const score = -ep.weight / Math.log(u);
    if (score > bestScore) {
      best = i;
      bestScore = score;
    }
    if (score > boundedScore && load(i) < bound) {
      bounded = i;
      boundedScore = score;
    }
  }
  return bounded >= 0 ? bounded : best;
}
