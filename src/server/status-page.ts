/**
 * The status page's HTML: one self-contained document rendered from a {@link StatusSnapshot}. Inline
 * CSS and one inline script (no external asset at all); every string from config, CRDs or
 * discovery goes through {@link escapeHtml}. The script re-fetches the page every two seconds and
 * swaps its `<main>`, so the page refreshes without flicker and without a second renderer in JS;
 * without JS a `<noscript>` meta refresh does the same every five seconds.
 */
import { createHash } from 'node:crypto';
import { type DeploymentStatus, type LatencyBucket, type PoolStatus, type ReplicaStatus, type StatusSnapshot } from './status.js';

export const REFRESH_MS = 2000;

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Text safe in element content and in quoted attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

const STYLE = `
:root{color-scheme:light dark;--ok:#1a7f37;--warn:#9a6700;--bad:#cf222e;--mute:#6e7781;--line:#d0d7de;--card:#f6f8fa}
@media (prefers-color-scheme:dark){:root{--ok:#3fb950;--warn:#d29922;--bad:#f85149;--mute:#8b949e;--line:#30363d;--card:#161b22}}
body{font:14px/1.4 system-ui,sans-serif;margin:0 auto;padding:16px 24px;max-width:1400px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:17px;margin:20px 0 8px}h3{font-size:15px;margin:0}
.meta,.mute{color:var(--mute)}.meta span{margin-right:16px}
.pool{border:1px solid var(--line);border-radius:6px;background:var(--card);padding:10px 12px;margin:8px 0}
.pool header{display:flex;flex-wrap:wrap;gap:6px 18px;align-items:center;margin-bottom:6px}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:3px 8px;border-top:1px solid var(--line);white-space:nowrap}
th{font-weight:600;color:var(--mute)}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:var(--ok)}.warn{color:var(--warn)}.bad{color:var(--bad);font-weight:600}
.spark{vertical-align:middle}.p50{stroke:var(--ok)}.p95{stroke:var(--warn)}
#conn{float:right}`;

const SCRIPT = `
(() => {
  const conn = document.getElementById('conn');
  const tick = async () => {
    try {
      const res = await fetch(location.href, { cache: 'no-store' });
      if (!res.ok) throw new Error(String(res.status));
      const next = new DOMParser().parseFromString(await res.text(), 'text/html').querySelector('main');
      const main = document.querySelector('main');
      if (next && main) main.replaceWith(next);
      conn.textContent = 'live';
      conn.className = 'ok';
    } catch {
      conn.textContent = 'router unreachable';
      conn.className = 'bad';
    }
    setTimeout(tick, ${REFRESH_MS});
  };
  setTimeout(tick, ${REFRESH_MS});
})();`;

const sha256 = (text: string): string => `'sha256-${createHash('sha256').update(text).digest('base64')}'`;

/** The page's Content-Security-Policy: nothing but its own inline style and script, and fetches of itself. */
export const STATUS_PAGE_CSP = `default-src 'none'; style-src ${sha256(STYLE)}; script-src ${sha256(SCRIPT)}; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`;

const fmt = (n: number, digits = 0): string => n.toFixed(digits);
const count = (n: number, noun: string): string => `${n} ${noun}${n === 1 ? '' : 's'}`;
const percent = (ratio: number | null): string => (ratio === null ? '–' : `${fmt(ratio * 100, ratio < 0.1 && ratio > 0 ? 1 : 0)} %`);
const ms = (value: number | null): string => (value === null ? '–' : value >= 1000 ? `${fmt(value / 1000, 1)} s` : `${fmt(value)} ms`);

const BREAKER_CLASS: Record<ReplicaStatus['breaker'], string> = { closed: 'ok', 'half-open': 'warn', open: 'bad' };
const HEALTH_CLASS: Record<ReplicaStatus['health'], string> = { passing: 'ok', failing: 'bad', unprobed: 'warn', off: 'mute' };

function replicaRow(r: ReplicaStatus): string {
  const e = r.engine;
  const engineCells = e
    ? `<td class="num">${e.waiting}</td><td class="num">${e.running}</td><td class="num">${percent(e.kvCacheUsage)}</td><td class="num">${ms(e.ageMs)}</td>`
    : `<td class="num mute" colspan="4">no fresh engine sample</td>`;
  return (
    `<tr class="replica" data-replica="${escapeHtml(r.id)}" data-ready="${r.ready}" data-breaker="${r.breaker}" data-health="${r.health}">` +
    `<td>${escapeHtml(r.id)}</td>` +
    `<td class="${r.ready ? 'ok' : 'bad'}">${r.ready ? 'ready' : 'not ready'}</td>` +
    `<td class="${HEALTH_CLASS[r.health]}">${r.health}</td>` +
    `<td class="breaker ${BREAKER_CLASS[r.breaker]}">${r.breaker}</td>` +
    `<td class="num">${r.inFlight}</td>${engineCells}</tr>`
  );
}

const SPARK_W = 180;
const SPARK_H = 36;

/** Polylines of p50 and p95 over the buckets, broken where a bucket had no request. */
export function sparkline(buckets: readonly LatencyBucket[], bucketSeconds: number): string {
  const max = buckets.reduce((m, b) => Math.max(m, b.p95Ms ?? 0, b.p50Ms ?? 0), 0);
  const step = buckets.length > 1 ? SPARK_W / (buckets.length - 1) : 0;
  const y = (v: number): string => fmt(SPARK_H - 2 - (max > 0 ? (v / max) * (SPARK_H - 4) : 0), 1);
  const lines = (pick: (b: LatencyBucket) => number | null, cls: string): string => {
    const runs: string[][] = [[]];
    buckets.forEach((b, i) => {
      const v = pick(b);
      if (v === null) runs.push([]);
      else runs.at(-1)!.push(`${fmt(i * step, 1)},${y(v)}`);
    });
    return runs
      .filter((run) => run.length > 0)
      .map((run) =>
        run.length === 1
          ? `<circle class="${cls}" cx="${run[0]!.split(',')[0]}" cy="${run[0]!.split(',')[1]}" r="1.5" fill="currentColor"/>`
          : `<polyline class="${cls}" fill="none" stroke-width="1.5" points="${run.join(' ')}"/>`,
      )
      .join('');
  };
  const minutes = fmt((buckets.length * bucketSeconds) / 60);
  const title = `Latency p50 and p95 per ${bucketSeconds} s over the last ${minutes} min; top of the scale ${ms(max > 0 ? max : null)}`;
  return `<svg class="spark" width="${SPARK_W}" height="${SPARK_H}" viewBox="0 0 ${SPARK_W} ${SPARK_H}" role="img" aria-label="${escapeHtml(title)}"><title>${escapeHtml(title)}</title><rect width="${SPARK_W}" height="${SPARK_H}" fill="none" stroke="currentColor" stroke-opacity="0.15"/>${lines((b) => b.p95Ms, 'p95')}${lines((b) => b.p50Ms, 'p50')}</svg>`;
}

/** A pool whose replicas said they do not serve its `servedModelName`: what the operator must mend, and since when. */
function mismatchLine(p: PoolStatus): string {
  const m = p.servedModelMismatch;
  if (m === null) return '';
  const others = m.replicas.length > 1 ? ` (${count(m.replicas.length, 'replica')} so far: ${m.replicas.map(escapeHtml).join(', ')})` : '';
  return (
    `<p class="bad" data-mismatch>served model mismatch seen at <time datetime="${escapeHtml(m.seenAt)}">${escapeHtml(m.seenAt)}</time> from ${escapeHtml(m.replica)}${others}: ` +
    `the replica does not serve the pool's servedModelName, and requests it cannot take elsewhere are answered 502 served_model_mismatch</p>`
  );
}

function poolCard(p: PoolStatus, bucketSeconds: number, weight?: number): string {
  const queue = `${p.queue.depth}${p.queue.limit === null ? '' : ` / ${p.queue.limit}`}`;
  const errorClass = p.recent.errors > 0 ? 'bad' : 'ok';
  const peak = p.latency.reduce((m, b) => Math.max(m, b.p95Ms ?? 0), 0);
  return (
    `<section class="pool" data-pool="${escapeHtml(p.name)}"><header>` +
    `<h3>${escapeHtml(p.name)}</h3><span class="mute">${escapeHtml(p.engine)}${weight === undefined ? '' : `, weight ${weight}`}</span>` +
    `<span class="${p.readyReplicas > 0 ? 'ok' : 'bad'}">${p.readyReplicas} / ${p.replicas.length} ready</span>` +
    `<span>in flight <b>${p.inFlight}</b></span><span>queue <b>${queue}</b></span><span>held <b>${p.held}</b></span>` +
    `<span>5xx, last ${p.recent.windowSeconds} s: <b class="${errorClass}">${p.recent.errors} of ${p.recent.requests}</b> (${percent(p.recent.errorRate)})</span>` +
    `<span>${sparkline(p.latency, bucketSeconds)} <span class="mute">p50 <span class="ok">━</span> p95 <span class="warn">━</span> peak ${ms(peak > 0 ? peak : null)}</span></span>` +
    `</header>` +
    mismatchLine(p) +
    `<table><thead><tr><th>replica</th><th>ready</th><th>health</th><th>breaker</th><th class="num">in flight</th>` +
    `<th class="num">engine waiting</th><th class="num">running</th><th class="num">KV cache</th><th class="num">sample age</th></tr></thead><tbody>` +
    (p.replicas.length === 0 ? `<tr><td colspan="9" class="mute">no replica discovered</td></tr>` : p.replicas.map(replicaRow).join('')) +
    `</tbody></table></section>`
  );
}

function deploymentSection(d: DeploymentStatus, pools: ReadonlyMap<string, PoolStatus>, bucketSeconds: number): string {
  const fallbacks = d.fallbacks.length === 0 ? '' : ` <span class="mute">falls back to ${d.fallbacks.map(escapeHtml).join(', ')}</span>`;
  const cards = d.targets.map((t) => {
    const pool = pools.get(t.pool);
    return pool ? poolCard(pool, bucketSeconds, t.weight) : `<p class="bad">pool ${escapeHtml(t.pool)} is not known</p>`;
  });
  const namespace = d.namespace === undefined ? '' : ` <span class="mute">in ${escapeHtml(d.namespace)}</span>`;
  // the deployment's label in the metrics and the access log: `namespace/name` in Kubernetes mode (two namespaces may each have one of a name)
  const label = d.namespace === undefined ? d.name : `${d.namespace}/${d.name}`;
  return `<section class="deployment" data-deployment="${escapeHtml(label)}"><h2>${escapeHtml(d.name)}${namespace} <span class="mute">model ${escapeHtml(d.model)}</span>${fallbacks}</h2>${cards.join('')}</section>`;
}

/** The status page for `s`. */
export function renderStatusPage(s: StatusSnapshot): string {
  const pools = new Map(s.pools.map((p) => [p.name, p]));
  const targeted = new Set(s.deployments.flatMap((d) => d.targets.map((t) => t.pool)));
  const untargeted = s.pools.filter((p) => !targeted.has(p.name));
  const readiness = s.notReady.length === 0 ? `<span class="ok">ready</span>` : `<span class="bad">not ready: ${s.notReady.map(escapeHtml).join('; ')}</span>`;
  return (
    `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">` +
    `<title>modelgate status</title><noscript><meta http-equiv="refresh" content="5"></noscript><style>${STYLE}</style></head><body>` +
    `<span id="conn" class="mute">refreshes every ${REFRESH_MS / 1000} s</span><h1>modelgate status</h1>` +
    `<main><p class="meta"><span>${readiness}</span><span>${count(s.deployments.length, 'deployment')}, ${count(s.pools.length, 'pool')}, ` +
    `${count(
      s.pools.reduce((n, p) => n + p.replicas.length, 0),
      'replica',
    )}</span><span>prefix index ${s.prefixIndexBlocks} blocks</span>` +
    `<span>as of <time datetime="${escapeHtml(s.generatedAt)}">${escapeHtml(s.generatedAt)}</time></span><span><a href="status.json">status.json</a></span></p>` +
    s.deployments.map((d) => deploymentSection(d, pools, s.bucketSeconds)).join('') +
    (untargeted.length === 0 ? '' : `<section class="deployment"><h2>Pools no deployment targets</h2>${untargeted.map((p) => poolCard(p, s.bucketSeconds)).join('')}</section>`) +
    `</main><script>${SCRIPT}</script></body></html>`
  );
}
