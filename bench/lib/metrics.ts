/**
 * Prometheus text read by the harnesses: the simulators' vLLM series (prefix-cache hits, queue and
 * batch) and the router's admin /metrics. Also a poller that samples every replica's queue and batch
 * through a run, to see requests waiting on one replica while another has a free slot.
 */

export interface Series {
  labels: Record<string, string>;
  value: number;
}

/** Every sample of `name` in a Prometheus text exposition. */
export function series(text: string, name: string): Series[] {
  const out: Series[] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith(name) || (line[name.length] !== '{' && line[name.length] !== ' ')) continue;
    const labelled = line[name.length] === '{';
    const close = labelled ? line.lastIndexOf('}') : name.length - 1;
    const labels: Record<string, string> = {};
    for (const m of line.slice(name.length + 1, close).matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[m[1]!] = m[2]!;
    out.push({
      labels,
      value: Number(
        line
          .slice(close + 1)
          .trim()
          .split(' ')[0],
      ),
    });
  }
  return out;
}

/** Sum of `name` over the samples whose labels include `match`. */
export function sum(text: string, name: string, match: Record<string, string> = {}): number {
  return series(text, name)
    .filter((s) => Object.entries(match).every(([k, v]) => s.labels[k] === v))
    .reduce((n, s) => n + s.value, 0);
}

export async function scrape(url: string): Promise<string> {
  const res = await fetch(`${url}/metrics`);
  return res.text();
}

export interface EngineCounters {
  prefixHits: number;
  prefixQueries: number;
  running: number;
  waiting: number;
}

/** A simulator's (vLLM's) prefix-cache counters and its batch and queue right now. */
export async function engineCounters(simUrl: string): Promise<EngineCounters> {
  const text = await scrape(simUrl);
  return {
    prefixHits: sum(text, 'vllm:prefix_cache_hits_total'),
    prefixQueries: sum(text, 'vllm:prefix_cache_queries_total'),
    running: sum(text, 'vllm:num_requests_running'),
    waiting: sum(text, 'vllm:num_requests_waiting'),
  };
}

/** Prefix-cache hit rate (cached prompt tokens / prompt tokens) over the fleet between two readings. */
export function hitRate(before: readonly EngineCounters[], after: readonly EngineCounters[]): number {
  let hits = 0;
  let queries = 0;
  after.forEach((a, i) => {
    hits += a.prefixHits - (before[i]?.prefixHits ?? 0);
    queries += a.prefixQueries - (before[i]?.prefixQueries ?? 0);
  });
  return queries > 0 ? hits / queries : NaN;
}

export interface QueueStats {
  /** Polls taken. */
  polls: number;
  /** Mean requests waiting per replica (by replica, in the order given). */
  meanWaiting: number[];
  /** Mean requests running per replica. */
  meanRunning: number[];
  /** Share of polls where some replica had requests waiting while another had a free batch slot. */
  misplaced: number;
}

/**
 * Samples each replica's queue and batch every `everyMs` until `stop()`. A request waiting on one
 * replica while another has a free slot is a routing miss that outstanding counts alone can hide.
 */
export function pollQueues(simUrls: readonly string[], maxNumSeqs: number, everyMs: number): { stop(): Promise<QueueStats> } {
  const waiting = simUrls.map(() => 0);
  const running = simUrls.map(() => 0);
  let polls = 0;
  let misplaced = 0;
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const started = performance.now();
      try {
        const now = await Promise.all(simUrls.map((u) => engineCounters(u)));
        polls++;
        now.forEach((c, i) => {
          waiting[i]! += c.waiting;
          running[i]! += c.running;
        });
        if (now.some((c) => c.waiting > 0) && now.some((c) => c.running < maxNumSeqs)) misplaced++;
      } catch {
        // a replica busy restarting: skip this poll
      }
      await new Promise((r) => setTimeout(r, Math.max(0, everyMs - (performance.now() - started))));
    }
  })();
  return {
    async stop() {
      stopped = true;
      await loop;
      return { polls, meanWaiting: waiting.map((w) => w / Math.max(1, polls)), meanRunning: running.map((r) => r / Math.max(1, polls)), misplaced: misplaced / Math.max(1, polls) };
    },
  };
}
