/**
 * Runs the helm binary that `scripts/fetch-tools.mjs` puts in .tools/bin (execFile, no shell) against
 * charts/modelgate, and parses what `helm template` renders.
 */
import { execFile } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';

export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const CHART_DIR = join(REPO_ROOT, 'charts/modelgate');
export const HELM = join(REPO_ROOT, '.tools/bin/helm');
/** The release every test renders: its name contains the chart's, so the full name is just "modelgate". */
export const RELEASE = 'modelgate';
export const NAMESPACE = 'ai-gateway';

/** A rendered Kubernetes object, as plain data. */
export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [field: string]: unknown;
}

export interface HelmResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** One API key, for renders that need nothing else (the chart refuses to render without keys). */
export const A_KEY = { name: 'ci', key: 'sk-ci-0123456789' };

/** Values given with `--set-json path=JSON` (any type, merged over the values files). */
export type SetValues = Record<string, unknown>;

/** Runs helm with `args`; resolves with its exit code and output, whatever the code. */
export function helm(args: string[]): Promise<HelmResult> {
  return new Promise((resolve, reject) => {
    execFile(
      HELM,
      args,
      {
        maxBuffer: 64 * 1024 * 1024,
        env: { ...process.env, HELM_CACHE_HOME: '/tmp/modelgate-helm/cache', HELM_CONFIG_HOME: '/tmp/modelgate-helm/config', HELM_DATA_HOME: '/tmp/modelgate-helm/data' },
      },
      (err, stdout, stderr) => {
        if (err && typeof err.code !== 'number') return reject(new Error(`cannot run ${HELM} (npm run fetch-tools puts it there): ${err.message}`));
        resolve({ code: err ? Number(err.code) : 0, stdout, stderr });
      },
    );
  });
}

/** The ci/*-values.yaml files, as paths relative to the chart (e.g. `ci/full-values.yaml`). */
export function ciValuesFiles(): string[] {
  return readdirSync(join(CHART_DIR, 'ci'))
    .filter((f) => f.endsWith('-values.yaml'))
    .sort()
    .map((f) => `ci/${f}`);
}

function valueArgs(valuesFiles: string[], set: SetValues): string[] {
  return [...valuesFiles.flatMap((f) => ['-f', join(CHART_DIR, f)]), ...Object.entries(set).flatMap(([path, value]) => ['--set-json', `${path}=${JSON.stringify(value)}`])];
}

/** `helm template` with values files (relative to the chart) and `--set-json` values; the raw result. */
export function render(valuesFiles: string[], set: SetValues = {}): Promise<HelmResult> {
  return helm(['template', RELEASE, CHART_DIR, '--namespace', NAMESPACE, ...valueArgs(valuesFiles, set)]);
}

/** Every document of helm's output, as plain data; throws on a YAML error. */
export function parseObjects(text: string, version: '1.1' | '1.2' = '1.2'): K8sObject[] {
  return parseAllDocuments(text, { version }).flatMap((doc) => {
    if (doc.errors.length > 0) throw new Error(`helm output: ${doc.errors.map((e) => e.message).join('; ')}`);
    const value = doc.toJS() as K8sObject | null;
    return value === null ? [] : [value];
  });
}

/** `helm template` parsed into objects; throws with helm's message when it fails. */
export async function template(valuesFiles: string[], set: SetValues = {}): Promise<K8sObject[]> {
  const result = await render(valuesFiles, set);
  if (result.code !== 0) throw new Error(`helm template ${valuesFiles.join(' ')} failed: ${result.stderr}`);
  return parseObjects(result.stdout);
}

/** `helm lint --strict` with values files and `--set-json` values. */
export function lint(valuesFiles: string[], set: SetValues = {}): Promise<HelmResult> {
  return helm(['lint', '--strict', CHART_DIR, '--namespace', NAMESPACE, ...valueArgs(valuesFiles, set)]);
}

/** The one object of `kind` (and `name`, if given); throws when there is not exactly one. */
export function only(objects: K8sObject[], kind: string, name?: string): K8sObject {
  const found = objects.filter((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
  if (found.length !== 1) throw new Error(`expected one ${kind}${name ? ` ${name}` : ''}, found ${found.length}`);
  return found[0] as K8sObject;
}

export const ofKind = (objects: K8sObject[], kind: string): K8sObject[] => objects.filter((o) => o.kind === kind);

type WithData = K8sObject & { data?: Record<string, string> };

/** The router's config file as the chart renders it (the ConfigMap key modelgate.yaml), unparsed. */
export function routerConfigText(objects: K8sObject[]): string {
  const texts = (ofKind(objects, 'ConfigMap') as WithData[]).flatMap((c) => (c.data?.['modelgate.yaml'] === undefined ? [] : [c.data['modelgate.yaml']]));
  if (texts.length !== 1) throw new Error(`expected one ConfigMap with modelgate.yaml, found ${texts.length}`);
  return texts[0] as string;
}

/** The API keys file of the chart's Secret (decoded), or undefined when the chart renders no Secret. */
export function keysFileText(objects: K8sObject[]): string | undefined {
  const secrets = ofKind(objects, 'Secret') as WithData[];
  if (secrets.length === 0) return undefined;
  if (secrets.length > 1) throw new Error(`expected at most one Secret, found ${secrets.length}`);
  const data = secrets[0]?.data?.['keys.yaml'];
  if (data === undefined) throw new Error('the Secret has no keys.yaml');
  return Buffer.from(data, 'base64').toString('utf8');
}

/**
 * Chart renders made together in a `beforeAll` (helm runs in parallel) and read by name in the tests.
 * Each variant is its values files and `--set` values.
 */
export class Variants {
  private rendered: Record<string, K8sObject[]> = {};

  async render(variants: Record<string, [string[], SetValues]>): Promise<void> {
    const entries = await Promise.all(Object.entries(variants).map(async ([name, [files, set]]) => [name, await template(files, set)] as const));
    this.rendered = Object.fromEntries(entries);
  }

  get(name: string): K8sObject[] {
    const objects = this.rendered[name];
    if (!objects) throw new Error(`variant ${name} was not rendered`);
    return objects;
  }
}
