/**
 * What routing decides from: the endpoints each pool and deployment can use and this router's
 * in-flight count per endpoint (read at scrape time), the engines' own load samples and how their
 * scrapes went, and how often prefix affinity found a replica that likely had the prompt cached.
 */
import { Gauge } from './prom.js';
import type { Registry } from 'prom-client';
import { type EngineLoad, type PreviousResponseOutcome } from '../core/types.js';
import { HotCounter } from './hot-counter.js';
import { PREVIOUS_RESPONSE_OUTCOMES, type LoraLoadResult, type LoraPlacement, type ScrapeResult } from './labels.js';

/** Live state the routing gauges read at scrape time. */
export interface RoutingStateSources {
  /** Outstanding requests per endpoint. */
  inFlight(): Iterable<{ pool: string; endpoint: string; count: number }>;
  /** Routable endpoints per pool. */
  readyEndpoints(): Iterable<{ pool: string; count: number }>;
  /** Endpoints discovery lists per pool, ready or not (none: the series is not exported). */
  discoveredEndpoints?(): Iterable<{ pool: string; count: number }>;
  /** Routable endpoints per deployment, over the pools it targets with a weight above 0. */
  deploymentReadyEndpoints(): Iterable<{ deployment: string; count: number }>;
}

/** What {@link observeRoutingGauges} reads at scrape time. */
export interface RoutingSources {
  engine: () => Iterable<{ pool: string; endpoint: string; load: EngineLoad }>;
  prefixBlocks: () => number;
}

export interface RoutingMetrics {
  prefixBlocks: HotCounter<'pool' | 'result', [pool: string, result: 'hit' | 'miss']>;
  engineScrapes: HotCounter<'pool' | 'result', [pool: string, result: ScrapeResult]>;
  previousResponses: HotCounter<'outcome', [outcome: PreviousResponseOutcome]>;
  loraPlacements: HotCounter<'pool' | 'placement', [pool: string, placement: LoraPlacement]>;
  loraLoads: HotCounter<'pool' | 'result', [pool: string, result: LoraLoadResult]>;
}

export function routingMetrics(registers: Registry[], sources: RoutingStateSources): RoutingMetrics {
  new Gauge({
    name: 'modelgate_deployment_ready_endpoints',
    help: 'Routable endpoints across the pools each deployment targets.',
    labelNames: ['deployment'],
    registers,
    collect() {
      this.reset();
      for (const d of sources.deploymentReadyEndpoints()) this.set({ deployment: d.deployment }, d.count);
    },
  });
  new Gauge({
    name: 'modelgate_endpoint_in_flight_requests',
    help: 'Requests this router has outstanding on each endpoint.',
    labelNames: ['pool', 'endpoint'],
    registers,
    collect() {
      this.reset();
      for (const e of sources.inFlight()) this.set({ pool: e.pool, endpoint: e.endpoint }, e.count);
    },
  });
  const discovered = sources.discoveredEndpoints?.bind(sources);
  if (discovered) {
    new Gauge({
      name: 'modelgate_pool_endpoints',
      help: 'Endpoints discovery lists for each pool, ready or not (modelgate_pool_ready_endpoints: those that can take traffic).',
      labelNames: ['pool'],
      registers,
      collect() {
        this.reset();
        for (const p of discovered()) this.set({ pool: p.pool }, p.count);
      },
    });
  }
  new Gauge({
    name: 'modelgate_pool_ready_endpoints',
    help: 'Endpoints of each pool that can take traffic.',
    labelNames: ['pool'],
    registers,
    collect() {
      this.reset();
      for (const p of sources.readyEndpoints()) this.set({ pool: p.pool }, p.count);
    },
  });
  const previousResponses = new HotCounter<'outcome', [outcome: PreviousResponseOutcome]>({
    name: 'modelgate_previous_response_requests_total',
    help: "Responses API requests naming a previous_response_id, by outcome: pinned (sent to the replica holding it), unknown (the router does not know it; routed as usual), replica_gone (its replica left; routed as usual), other_route (its pool is not one the request's model routes to; routed as usual), other_key (made by another API key: answered 404), unchecked (the routers' shared record in Redis did not answer; routed as usual).",
    labelNames: ['outcome'],
    registers,
  });
  for (const outcome of PREVIOUS_RESPONSE_OUTCOMES) previousResponses.seed(outcome);
  return {
    prefixBlocks: new HotCounter({
      name: 'modelgate_prefix_blocks_total',
      help: "Prompt blocks of routed requests with a prompt (chat, completions, responses, messages), by whether the chosen replica likely had them cached (hit) or not (miss); a prompt's trailing partial block counts as its fraction of a block, so hit / (hit + miss) compares with the engines' prefix-cache hit rate.",
      labelNames: ['pool', 'result'],
      registers,
    }),
    engineScrapes: new HotCounter({
      name: 'modelgate_engine_scrapes_total',
      help: "Scrapes of replicas' engine metrics, by result (ok, error, timeout, unparsable, empty: a TGI or TEI page without its queue gauges, as before its first request).",
      labelNames: ['pool', 'result'],
      registers,
    }),
    previousResponses,
    loraPlacements: new HotCounter({
      name: 'modelgate_lora_placements_total',
      help: 'Requests for a LoRA adapter by where they were sent, as the router saw it: held (the replica held the adapter), free_slot (it had a free adapter slot), no_slot (every slot taken: the request waits for one there).',
      labelNames: ['pool', 'placement'],
      registers,
    }),
    loraLoads: new HotCounter({
      name: 'modelgate_lora_adapter_loads_total',
      help: 'LoRA adapter loads the router asked an engine for (routing.lora.loadOnDemand), by result: loaded, already_loaded (the engine had it), failed, timeout.',
      labelNames: ['pool', 'result'],
      registers,
    }),
  };
}

/** Gauges read from the routing layer at scrape time; registered once per registry. */
export function observeRoutingGauges(registers: Registry[], sources: RoutingSources): void {
  new Gauge({
    name: 'modelgate_engine_requests',
    help: 'Requests each replica reports on its own metrics (fresh samples only), by state: waiting or running.',
    labelNames: ['pool', 'endpoint', 'state'],
    registers,
    collect() {
      this.reset();
      for (const { pool, endpoint, load } of sources.engine()) {
        this.set({ pool, endpoint, state: 'waiting' }, load.waiting);
        this.set({ pool, endpoint, state: 'running' }, load.running);
      }
    },
  });
  new Gauge({
    name: 'modelgate_engine_kv_cache_usage_ratio',
    help: 'KV-cache use each replica reports (0..1; fresh samples only).',
    labelNames: ['pool', 'endpoint'],
    registers,
    collect() {
      this.reset();
      for (const { pool, endpoint, load } of sources.engine()) if (load.kvCacheUsage !== undefined) this.set({ pool, endpoint }, load.kvCacheUsage);
    },
  });
  new Gauge({
    name: 'modelgate_prefix_index_blocks',
    help: 'Prompt block hashes the prefix-affinity index remembers, over all replicas.',
    registers,
    collect() {
      this.set(sources.prefixBlocks());
    },
  });
}
