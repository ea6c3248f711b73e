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

/** The index in `candidates` that serves `key`, or -1 when there is no candidate. `load` is per unit of weight. */
export function sessionTarget(candidates: readonly Endpoint[], key: string, load: (i: number) => number, loadFactor: number): number {
  if (candidates.length === 0) return -1;
  let totalWeight = 0;
  let totalLoad = 0;
  const rank: Array<{ i: number; score: number }> = [];
  candidates.forEach((ep, i) => {
    totalWeight += ep.weight;
    totalLoad += load(i) * ep.weight;
    // weighted rendezvous: −w / ln(u) with u uniform in (0,1) from the hash of (key, replica)
    const u = (hash53(ep.id, hash53(key) % 4294967296) + 1) / (2 ** 53 + 2);
    rank.push({ i, score: -ep.weight / Math.log(u) });
  });
  rank.sort((a, b) => b.score - a.score);
  const bound = (loadFactor * totalLoad) / totalWeight + 1;
  for (const { i } of rank) if (load(i) < bound) return i;
  return (rank[0] as { i: number }).i;
}
