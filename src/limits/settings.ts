/**
 * What an API key may spend: requests and tokens per minute, concurrent requests, and token budgets
 * per day and per month (UTC). A key's entry in the keys file sets any of them; what it leaves out
 * comes from the config's `limits.defaults`; `unlimited` lifts a default for one key. A key may also
 * hold tighter per-minute and concurrency limits on single deployments (`deployments`), counted on
 * top of its key-wide ones.
 */

/** The limits a keys-file entry or `limits.defaults` may set. */
export interface LimitFields {
  requestsPerMinute?: number | 'unlimited';
  tokensPerMinute?: number | 'unlimited';
  concurrentRequests?: number | 'unlimited';
  tokensPerDay?: number | 'unlimited';
  tokensPerMonth?: number | 'unlimited';
}

/** The limits a key may hold on one deployment. */
export type DeploymentLimitFields = Pick<LimitFields, 'requestsPerMinute' | 'tokensPerMinute' | 'concurrentRequests'>;

/** A keys-file entry's `limits`. */
export interface KeyLimitFields extends LimitFields {
  /** Deployment ID → tighter limits on that deployment. */
  deployments?: Record<string, DeploymentLimitFields>;
}

/** One scope's limits after defaults: a number, or undefined for none. */
export interface ScopeLimits {
  requestsPerMinute?: number;
  tokensPerMinute?: number;
  concurrentRequests?: number;
}

/** A key's limits in force. */
export interface KeyLimits extends ScopeLimits {
  tokensPerDay?: number;
  tokensPerMonth?: number;
  deployments: ReadonlyMap<string, ScopeLimits>;
}

const limit = { description: 'a whole number of at least 1, or "unlimited"', anyOf: [{ type: 'integer', minimum: 1 }, { const: 'unlimited' }] } as const;
const scopeProperties = { requestsPerMinute: limit, tokensPerMinute: limit, concurrentRequests: limit } as const;
const keyWideProperties = { ...scopeProperties, tokensPerDay: limit, tokensPerMonth: limit } as const;

/** JSON Schema of `limits.defaults`. */
export const defaultLimitsSchema = { type: 'object', additionalProperties: false, default: {}, properties: keyWideProperties } as const;

/** JSON Schema of a keys-file entry's `limits`. */
export const keyLimitsSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    ...keyWideProperties,
    deployments: { type: 'object', propertyNames: { minLength: 1 }, additionalProperties: { type: 'object', additionalProperties: false, properties: scopeProperties } },
  },
} as const;

const FIELDS = ['requestsPerMinute', 'tokensPerMinute', 'concurrentRequests', 'tokensPerDay', 'tokensPerMonth'] as const;

function pick(value: number | 'unlimited' | undefined, fallback: number | 'unlimited' | undefined): number | undefined {
  const chosen = value ?? fallback;
  return typeof chosen === 'number' ? chosen : undefined;
}

/** A key's limits: its own fields, else the defaults'. Undefined when the key has none at all. */
export function keyLimits(own: KeyLimitFields | undefined, defaults: LimitFields): KeyLimits | undefined {
  const result: KeyLimits = { deployments: new Map() };
  let limited = false;
  for (const field of FIELDS) {
    const value = pick(own?.[field], defaults[field]);
    if (value !== undefined) {
      result[field] = value;
      limited = true;
    }
  }
  const deployments = new Map<string, ScopeLimits>();
  for (const [id, fields] of Object.entries(own?.deployments ?? {})) {
    const scope: ScopeLimits = {};
    for (const field of ['requestsPerMinute', 'tokensPerMinute', 'concurrentRequests'] as const) {
      const value = pick(fields[field], undefined);
      if (value !== undefined) scope[field] = value;
    }
    if (Object.keys(scope).length > 0) deployments.set(id, scope);
  }
  if (deployments.size > 0) {
    result.deployments = deployments;
    limited = true;
  }
  return limited ? result : undefined;
}
