/**
 * src/metrics/prom.ts loads prom-client's classes from their files, skipping the package's entry
 * point (its Pushgateway and cluster modules): pin that each is the class the package exports, so a
 * prom-client release that moves or replaces one fails here.
 */
import { describe, expect, it } from '@jest/globals';
import { createRequire } from 'node:module';
import * as prom from '../../src/metrics/prom.js';

const pkg = createRequire(import.meta.url)('prom-client') as Record<string, unknown>;

describe("prom-client's classes as the router loads them", () => {
  it.each(['Registry', 'Counter', 'Gauge', 'Histogram'] as const)('%s is the class prom-client exports', (name) => {
    expect(prom[name]).toBe(pkg[name]);
  });

  it('counts into a registry like the package’s own classes', async () => {
    const registry = new prom.Registry();
    new prom.Counter({ name: 'pinned_total', help: 'h', registers: [registry] }).inc(2);
    expect(await registry.metrics()).toContain('pinned_total 2');
  });
});
