/**
 * prom-client's metric classes, loaded from their own files rather than from the package's entry
 * point. The entry point also loads the Pushgateway client (`node:https`, and with it `node:tls`) and
 * the cluster aggregator (`node:cluster`), about 2.5 MiB of resident memory in a router that uses
 * neither. Every module of `src/` takes prom-client's classes from here (eslint forbids a value import
 * of `prom-client` elsewhere; type imports are free); with `metrics/process.ts` (its default
 * collectors) this is where the router leans on prom-client's file layout, and
 * `test/metrics/prom.test.ts` pins that each class here is the one the package exports.
 */
import { createRequire } from 'node:module';
import type * as PromClient from 'prom-client';

const load = createRequire(import.meta.url);

export const Registry = load('prom-client/lib/registry.js') as typeof PromClient.Registry;
export type Registry<T extends PromClient.RegistryContentType = PromClient.PrometheusContentType> = PromClient.Registry<T>;
export const Counter = load('prom-client/lib/counter.js') as typeof PromClient.Counter;
export type Counter<T extends string = string> = PromClient.Counter<T>;
export const Gauge = load('prom-client/lib/gauge.js') as typeof PromClient.Gauge;
export type Gauge<T extends string = string> = PromClient.Gauge<T>;
export const Histogram = load('prom-client/lib/histogram.js') as typeof PromClient.Histogram;
export type Histogram<T extends string = string> = PromClient.Histogram<T>;
