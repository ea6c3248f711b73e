/**
 * The status page's HTML: names from config and CRDs are escaped everywhere, each breaker state and
 * health shows as such, the sparkline breaks where a bucket had no request, and the page names no
 * external asset.
 */
import { describe, expect, it } from '@jest/globals';
import { type LatencyBucket, type PoolStatus, type ReplicaStatus, type StatusSnapshot } from '../../src/server/status.js';
import { escapeHtml, renderStatusPage, sparkline, STATUS_PAGE_CSP } from '../../src/server/status-page.js';

const EVIL = `<img src=x onerror="alert('x')">&`;

const empty = (): LatencyBucket => ({ requests: 0, p50Ms: null, p95Ms: null });

function replica(id: string, breaker: ReplicaStatus['breaker'], extra: Partial<ReplicaStatus> = {}): ReplicaStatus {
  return { id, ready: true, health: 'passing', breaker, inFlight: 1, engine: null, ...extra };
}

function pool(name: string, replicas: ReplicaStatus[], extra: Partial<PoolStatus> = {}): PoolStatus {
  return {
    name,
    engine: 'vllm',
    readyReplicas: replicas.filter((r) => r.ready).length,
    inFlight: 0,
    queue: { depth: 0, limit: null },
    held: 0,
    recent: { windowSeconds: 60, requests: 0, errors: 0, errorRate: null },
    latency: Array.from({ length: 30 }, empty),
    servedModelMismatch: null,
    replicas,
    ...extra,
  };
}

function snapshot(pools: PoolStatus[], extra: Partial<StatusSnapshot> = {}): StatusSnapshot {
  return {
    version: 1,
    generatedAt: '2030-01-02T03:04:05.000Z',
    notReady: [],
    prefixIndexBlocks: 0,
    bucketSeconds: 10,
    deployments: [{ name: 'dep', model: 'chat', targets: pools.map((p) => ({ pool: p.name, weight: 1 })), fallbacks: [] }],
    pools,
    ...extra,
  };
}

describe('escapeHtml', () => {
  it('escapes the five characters that matter in content and quoted attributes', () => {
    expect(escapeHtml(`<a href="x" title='y'>&</a>`)).toBe('&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;');
  });
});

describe('renderStatusPage', () => {
  it('escapes deployment, model, pool, replica names, fallbacks and readiness reasons', () => {
    const html = renderStatusPage({
      ...snapshot([pool(EVIL, [replica(EVIL, 'closed')])]),
      deployments: [{ name: EVIL, namespace: EVIL, model: EVIL, targets: [{ pool: EVIL, weight: 1 }], fallbacks: [EVIL] }],
      notReady: [EVIL],
    });
    expect(html).not.toContain('<img');
    expect(html).not.toContain(`onerror="`);
    const escaped = escapeHtml(EVIL);
    // heading, namespace, model, fallback, pool heading, pool attribute, replica cell, replica attribute, readiness
    expect(html.split(escaped).length - 1).toBeGreaterThanOrEqual(9);
  });

  it('tells deployments of one name in two namespaces apart (Kubernetes mode), and shows no namespace in static mode', () => {
    const base = snapshot([pool('p', [])]);
    const html = renderStatusPage({
      ...base,
      deployments: [
        { name: 'llm', namespace: 'team-a', model: 'm', targets: [], fallbacks: [] },
        { name: 'llm', namespace: 'team-b', model: 'm', targets: [], fallbacks: [] },
      ],
    });
    expect(html).toContain('<h2>llm <span class="mute">in team-a</span> <span class="mute">model m</span></h2>');
    expect(html).toContain('<h2>llm <span class="mute">in team-b</span> <span class="mute">model m</span></h2>');
    // each section's attribute is the deployment's label in the metrics and the access log
    expect(html).toContain('data-deployment="team-a/llm"');
    expect(html).toContain('data-deployment="team-b/llm"');
    expect(renderStatusPage(base)).toContain('<h2>dep <span class="mute">model chat</span></h2>');
    expect(renderStatusPage(base)).toContain('data-deployment="dep"');
  });

  it('shows each breaker state, health and readiness of a replica, in text and as data attributes', () => {
    const html = renderStatusPage(
      snapshot([
        pool('p', [
          replica('r-closed', 'closed'),
          replica('r-half', 'half-open', { health: 'unprobed' }),
          replica('r-open', 'open', { ready: false, health: 'failing', engine: { waiting: 4, running: 9, kvCacheUsage: 0.815, ageMs: 1250 } }),
        ]),
      ]),
    );
    expect(html).toContain(`data-replica="r-closed" data-ready="true" data-breaker="closed" data-health="passing"`);
    expect(html).toContain(`data-replica="r-half" data-ready="true" data-breaker="half-open" data-health="unprobed"`);
    expect(html).toContain(`data-replica="r-open" data-ready="false" data-breaker="open" data-health="failing"`);
    expect(html).toContain('<td class="breaker ok">closed</td>');
    expect(html).toContain('<td class="breaker warn">half-open</td>');
    expect(html).toContain('<td class="breaker bad">open</td>');
    expect(html).toContain('<td class="bad">not ready</td>');
    expect(html).toContain('<td class="num">4</td><td class="num">9</td><td class="num">82 %</td><td class="num">1.3 s</td>');
    expect(html).toContain('2 / 3 ready');
  });

  it('shows the queue against its limit, held requests, the 5xx share and a pool no deployment targets', () => {
    const busy = pool('busy', [], { queue: { depth: 7, limit: 50 }, held: 2, recent: { windowSeconds: 60, requests: 40, errors: 2, errorRate: 0.05 } });
    const html = renderStatusPage({ ...snapshot([busy, pool('spare', [])]), deployments: [{ name: 'dep', model: 'chat', targets: [{ pool: 'busy', weight: 1 }], fallbacks: [] }] });
    expect(html).toContain('queue <b>7 / 50</b>');
    expect(html).toContain('held <b>2</b>');
    expect(html).toContain('<b class="bad">2 of 40</b> (5.0 %)');
    expect(html).toContain('no replica discovered');
    expect(html).toMatch(/Pools no deployment targets<\/h2><section class="pool" data-pool="spare">/);
  });

  it("says when a pool's replicas answered that they do not serve its servedModelName, and from which, escaped; nothing for a pool without", () => {
    const seenAt = '2030-01-02T03:04:01.000Z';
    const one = pool('one', [], { servedModelMismatch: { seenAt, replica: 'http://10.0.0.7:8000', replicas: ['http://10.0.0.7:8000'] } });
    const two = pool('two', [], { servedModelMismatch: { seenAt, replica: EVIL, replicas: ['http://10.0.0.8:8000', EVIL] } });
    const html = renderStatusPage(snapshot([one, two, pool('fine', [])]));
    expect(html).toContain(`served model mismatch seen at <time datetime="${seenAt}">${seenAt}</time> from http://10.0.0.7:8000: `);
    expect(html).toContain(`from ${escapeHtml(EVIL)} (2 replicas so far: http://10.0.0.8:8000, ${escapeHtml(EVIL)})`);
    expect(html).not.toContain('<img');
    expect(html.split('data-mismatch').length - 1).toBe(2);
  });

  it('names no external asset and carries its script and style under the CSP hashes', () => {
    const html = renderStatusPage(snapshot([pool('p', [replica('r', 'closed')])]));
    expect(html).not.toMatch(/(src|href)="(https?:)?\/\//);
    expect(html).not.toMatch(/<link|@import|url\(/);
    expect(html.match(/<script>/g)).toHaveLength(1);
    expect(STATUS_PAGE_CSP).toContain(`default-src 'none'`);
  });
});

describe('sparkline', () => {
  it('draws p50 and p95 as polylines, broken where a bucket had no request, scaled to the highest p95', () => {
    const buckets: LatencyBucket[] = [{ requests: 3, p50Ms: 10, p95Ms: 40 }, { requests: 2, p50Ms: 20, p95Ms: 80 }, empty(), { requests: 1, p50Ms: 30, p95Ms: 30 }];
    const svg = sparkline(buckets, 10);
    expect(svg.match(/<polyline class="p95"/g)).toHaveLength(1);
    expect(svg.match(/<polyline class="p50"/g)).toHaveLength(1);
    // the lone last bucket is a dot, one per percentile
    expect(svg.match(/<circle class="p(50|95)"/g)).toHaveLength(2);
    // the highest p95 (80 ms) touches the top (y = 2), zero would sit at the bottom (y = 34)
    expect(svg).toContain('60.0,2.0');
    expect(svg).toContain('top of the scale 80 ms');
  });

  it('draws an empty frame without requests', () => {
    const svg = sparkline(Array.from({ length: 30 }, empty), 10);
    expect(svg).not.toMatch(/polyline|circle/);
    expect(svg).toContain('<rect');
  });
});
