/**
 * The fallback hops the metrics start at 0 (issue 20): every move the route plan can make from one
 * pool of a route to the next — between a deployment's own pools in either order, from each own pool
 * to each fallback pool, onward through the fallbacks in order, and from "no own pool ready" ('').
 */
import { describe, expect, it } from '@jest/globals';
import { type Deployment, type PoolSpec } from '../../src/core/types.js';
import { type ModelCatalog } from '../../src/registry/registry.js';
import { fallbackHops } from '../../src/wiring/gauges.js';

function catalog(deployments: Deployment[], pools: string[]): ModelCatalog {
  const known = new Map(pools.map((name) => [name, { name } as PoolSpec]));
  return {
    resolve: (model) => deployments.find((d) => d.id === model),
    pool: (name) => known.get(name),
    targetPool: (_d, t) => known.get(t.pool),
    deployments: () => deployments,
    namesOf: (d) => [d.id],
    fallbackOf: (_d, id) => deployments.find((d) => d.id === id),
    labelled: (label) => deployments.find((d) => (d.label ?? d.id) === label),
  };
}
const deployment = (id: string, pools: Array<[string, number]>, fallbacks: string[] = []): Deployment => ({
  id,
  model: id,
  aliases: [],
  targets: pools.map(([pool, weight]) => ({ pool, weight })),
  fallbacks,
  created: 0,
});
const hop = (fromDeployment: string, fromPool: string, toDeployment: string, toPool: string): object => ({ fromDeployment, fromPool, toDeployment, toPool });

describe('fallbackHops', () => {
  it('lists the hops of two own pools and a fallback, leaving out a pool at weight 0, a missing pool and a missing fallback', () => {
    const hops = fallbackHops(
      catalog(
        [
          deployment(
            'llm',
            [
              ['a', 80],
              ['b', 20],
              ['drained', 0],
              ['gone', 10],
            ],
            ['backup', 'no-such'],
          ),
          deployment('backup', [
            ['c', 100],
            ['a', 10],
          ]),
        ],
        ['a', 'b', 'c', 'drained'],
      ),
    );
    const llm = hops.filter((h) => h.fromDeployment === 'llm' || h.toDeployment === 'llm' || h.fromPool === '');
    expect(llm).toEqual(
      expect.arrayContaining([hop('llm', 'a', 'llm', 'b'), hop('llm', 'b', 'llm', 'a'), hop('llm', 'a', 'backup', 'c'), hop('llm', 'b', 'backup', 'c'), hop('llm', '', 'backup', 'c')]),
    );
    // backup's own route: c and a, in either order; `a` is not listed again as llm's fallback pool
    expect(hops).toEqual(expect.arrayContaining([hop('backup', 'c', 'backup', 'a'), hop('backup', 'a', 'backup', 'c')]));
    expect(hops).toHaveLength(7);
    expect(hops.some((h) => ['drained', 'gone'].includes(h.fromPool) || ['drained', 'gone'].includes(h.toPool))).toBe(false);
  });

  it('has none for a deployment with one pool and no fallback', () => {
    expect(fallbackHops(catalog([deployment('llm', [['a', 100]])], ['a']))).toEqual([]);
  });

  it('names the deployments by their labels (`namespace/name` in Kubernetes mode), as the route plan does', () => {
    const main: Deployment = { ...deployment('llm', [['team-a/a', 100]], ['backup']), namespace: 'team-a', label: 'team-a/llm' };
    const backup: Deployment = { ...deployment('backup', [['team-a/b', 100]]), namespace: 'team-a', label: 'team-a/backup' };
    expect(fallbackHops(catalog([main, backup], ['team-a/a', 'team-a/b']))).toEqual([hop('team-a/llm', 'team-a/a', 'team-a/backup', 'team-a/b'), hop('team-a/llm', '', 'team-a/backup', 'team-a/b')]);
  });
});
