/** Shared shapes of the routing model. Pure data: no behaviour, no I/O. */

export type Engine = 'vllm' | 'sglang' | 'tgi' | 'tei' | 'llamacpp' | 'openai';
export type Capability = 'chat' | 'embeddings';

export const ENGINES: readonly Engine[] = ['vllm', 'sglang', 'tgi', 'tei', 'llamacpp', 'openai'];
export const CAPABILITIES: readonly Capability[] = ['chat', 'embeddings'];

/** A group of interchangeable replicas serving one model. */
export interface PoolSpec {
  name: string;
  engine: Engine;
  /** The `model` value the replicas expect; requests are rewritten to it. */
  servedModelName: string;
  capabilities: readonly Capability[];
  /** Sent upstream as `Authorization: Bearer …` instead of the client's key. */
  backendKey?: string;
}

/** One replica that can take traffic right now. */
export interface Endpoint {
  /** Stable identity: the pod (`namespace/name`) in Kubernetes, the URL in static mode. */
  id: string;
  pool: string;
  /** Base URL, e.g. `http://10.0.0.7:8000`. */
  url: URL;
  /** Relative share of traffic, > 0. */
  weight: number;
}

export interface DeploymentTarget {
  pool: string;
  weight: number;
}

/** What clients call: a model name, a deployment ID or an alias, sent to weighted pools. */
export interface Deployment {
  id: string;
  model: string;
  aliases: readonly string[];
  targets: readonly DeploymentTarget[];
  /** Unix seconds, shown as `created` in /v1/models. */
  created: number;
}

/** Read side of discovery: the current routable endpoints of a pool (an immutable snapshot). */
export interface EndpointSource {
  snapshot(pool: string): readonly Endpoint[];
}

/** Something that must have loaded its initial state before the router is ready. */
export interface Syncable {
  hasSynced(): boolean;
}
