/**
 * The chart's optional objects: NetworkPolicy, ServiceMonitor, PrometheusRule, the Grafana dashboard
 * ConfigMap, Ingress, HTTPRoute, and ModelPool / ModelDeployment objects (engine autoscaling has its
 * own file, engine-autoscaling.test.ts). Each appears only when enabled and points at what the chart
 * renders.
 */
import { beforeAll, describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { A_KEY, CHART_DIR, NAMESPACE, ofKind, only, render, type K8sObject, type SetValues, Variants } from '../helpers/helm.js';
import { schemaErrors } from '../helpers/k8s-schemas.js';

type Obj = Record<string, unknown>;
const SELECTOR = { 'app.kubernetes.io/name': 'modelgate', 'app.kubernetes.io/instance': 'modelgate' };
const OPTIONAL = ['NetworkPolicy', 'ServiceMonitor', 'PrometheusRule', 'Ingress', 'HTTPRoute', 'ModelPool', 'ModelDeployment', 'HorizontalPodAutoscaler', 'ScaledObject'];
const specOf = (o: K8sObject): Obj => o.spec as Obj;
const POOL_ROUTING = {
  scorers: [
    { name: 'prefix', weight: 3 },
    { name: 'outstanding', weight: 2 },
  ],
  session: { header: 'x-conversation-id' },
};

const variants = new Variants();
const get = (name: string): K8sObject[] => variants.get(name);

beforeAll(async () => {
  const pool = { service: { name: 'llama-8b', port: 'http' }, servedModelName: 'meta-llama/Llama-3.1-8B-Instruct' };
  const matrix: Record<string, [string[], SetValues]> = {
    base: [[], {}],
    full: [['ci/full-values.yaml'], {}],
    netpol: [[], { 'networkPolicy.enabled': true }],
    netpolAll: [[], { 'networkPolicy.enabled': true, 'watch.allNamespaces': true }],
    netpolOpen: [[], { 'networkPolicy.enabled': true, 'networkPolicy.egress.enabled': false }],
    monitoring: [[], { 'serviceMonitor.enabled': true, 'prometheusRule.enabled': true, 'grafanaDashboard.enabled': true }],
    loadBalancer: [[], { 'service.type': 'LoadBalancer', 'serviceMonitor.enabled': true }],
    nodePort: [[], { 'service.type': 'NodePort', 'serviceMonitor.enabled': true }],
    ingressPlain: [[], { 'ingress.enabled': true }],
    models: [
      [],
      {
        'watch.namespaces': [NAMESPACE, 'models'],
        modelPools: [
          { name: 'llama-8b', spec: pool },
          { name: 'llama-8b', namespace: 'models', spec: { ...pool, engine: 'vllm', capabilities: ['chat'], routing: POOL_ROUTING } },
        ],
        modelDeployments: [
          { name: 'llama-8b-prod', labels: { tier: 'prod' }, spec: { model: 'llama-3.1-8b-instruct', aliases: ['default'], targets: [{ pool: 'llama-8b', weight: 100 }] } },
          { name: 'llama-8b-next', spec: { model: 'llama-3.1-8b-instruct-next', targets: [{ pool: 'llama-8b' }], fallbacks: ['llama-8b-prod'] } },
        ],
      },
    ],
  };
  await variants.render(Object.fromEntries(Object.entries(matrix).map(([name, [files, set]]) => [name, [files, files.length > 0 ? set : { 'auth.keys': [A_KEY], ...set }]])));
});

describe('chart optional objects', () => {
  it('renders none of them by default, and only the config ConfigMap', () => {
    for (const kind of OPTIONAL) expect({ kind, found: ofKind(get('base'), kind).length }).toEqual({ kind, found: 0 });
    expect(ofKind(get('base'), 'ConfigMap').map((o) => o.metadata.name)).toEqual(['modelgate']);
  });

  it('renders all of them with ci/full-values.yaml', () => {
    for (const kind of OPTIONAL) expect({ kind, found: ofKind(get('full'), kind).length > 0 }).toEqual({ kind, found: true });
  });
});

describe('chart NetworkPolicy', () => {
  it('selects the router pods, admits any source to the API and admin ports, and nothing else, by default', () => {
    const np = only(get('netpol'), 'NetworkPolicy');
    expect(np.apiVersion).toBe('networking.k8s.io/v1');
    expect(specOf(np).podSelector).toEqual({ matchLabels: SELECTOR });
    expect(specOf(np).policyTypes).toEqual(['Ingress', 'Egress']);
    expect(specOf(np).ingress).toEqual([{ ports: [{ port: 'http', protocol: 'TCP' }] }, { ports: [{ port: 'admin', protocol: 'TCP' }] }]);
  });

  it('allows egress to DNS, the API server ports and the pods of the watched namespaces', () => {
    expect(specOf(only(get('netpol'), 'NetworkPolicy')).egress).toEqual([
      {
        ports: [
          { port: 53, protocol: 'UDP' },
          { port: 53, protocol: 'TCP' },
        ],
      },
      {
        ports: [
          { port: 443, protocol: 'TCP' },
          { port: 6443, protocol: 'TCP' },
        ],
      },
      { to: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': NAMESPACE } } }] },
    ]);
    const all = specOf(only(get('netpolAll'), 'NetworkPolicy')).egress as Obj[];
    expect(all[2]).toEqual({ to: [{ namespaceSelector: {} }] });
  });

  it('leaves egress open with egress.enabled false', () => {
    const spec = specOf(only(get('netpolOpen'), 'NetworkPolicy'));
    expect(spec.policyTypes).toEqual(['Ingress']);
    expect(spec.egress).toBeUndefined();
  });

  it('takes the peers of apiFrom, metricsFrom and the egress settings from the values', () => {
    const values = parse(readFileSync(join(CHART_DIR, 'ci/full-values.yaml'), 'utf8')) as {
      networkPolicy: { apiFrom: Obj[]; metricsFrom: Obj[]; egress: { engines: { to: Obj[] }; extraRules: Obj[] } };
    };
    const spec = specOf(only(get('full'), 'NetworkPolicy'));
    expect(spec.ingress).toEqual([
      { ports: [{ port: 'http', protocol: 'TCP' }], from: values.networkPolicy.apiFrom },
      { ports: [{ port: 'admin', protocol: 'TCP' }], from: values.networkPolicy.metricsFrom },
    ]);
    const egress = spec.egress as Obj[];
    expect(egress[1]).toEqual({
      ports: [
        { port: 443, protocol: 'TCP' },
        { port: 6443, protocol: 'TCP' },
      ],
      to: [{ ipBlock: { cidr: '10.0.0.1/32' } }, { ipBlock: { cidr: '172.20.0.10/32' } }],
    });
    expect(egress[2]).toEqual({
      to: values.networkPolicy.egress.engines.to,
      ports: [
        { port: 8000, protocol: 'TCP' },
        { port: 8080, protocol: 'TCP' },
      ],
    });
    expect(egress.slice(3)).toEqual(values.networkPolicy.egress.extraRules);
  });
});

describe('chart monitoring', () => {
  it('scrapes /metrics on the Service port named admin every 30s with a ServiceMonitor that selects the Service', () => {
    const sm = only(get('monitoring'), 'ServiceMonitor');
    const service = only(get('monitoring'), 'Service');
    expect(sm.apiVersion).toBe('monitoring.coreos.com/v1');
    expect(specOf(sm)).toEqual({ selector: { matchLabels: SELECTOR }, namespaceSelector: { matchNames: [NAMESPACE] }, endpoints: [{ port: 'admin', path: '/metrics', interval: '30s' }] });
    expect(service.metadata.labels).toMatchObject(SELECTOR);
    expect((specOf(service).ports as Obj[]).map((p) => p.name)).toContain('admin');
  });

  // The admin port asks no key (/metrics with key names and their spending, /status with every
  // replica's address): a Service that exposes the API outside the cluster must not carry it along.
  it.each(['loadBalancer', 'nodePort'])('keeps the admin port off a %s Service: a ClusterIP Service of its own carries it, which the ServiceMonitor selects', (variant) => {
    const services = ofKind(get(variant), 'Service');
    const exposed = only(get(variant), 'Service', 'modelgate');
    expect(specOf(exposed).type).not.toBe('ClusterIP');
    expect((specOf(exposed).ports as Obj[]).map((p) => p.name)).toEqual(['http']);
    const admin = only(get(variant), 'Service', 'modelgate-admin');
    expect(specOf(admin).type).toBe('ClusterIP');
    expect(specOf(admin).ports).toEqual([{ name: 'admin', port: 9090, targetPort: 'admin', protocol: 'TCP' }]);
    expect(specOf(admin).selector).toEqual(SELECTOR);
    const sm = only(get(variant), 'ServiceMonitor');
    const selected = services.filter((s) => Object.entries((specOf(sm).selector as { matchLabels: Record<string, string> }).matchLabels).every(([k, v]) => s.metadata.labels?.[k] === v));
    // what Prometheus scrapes on the port named admin: the ClusterIP Service's only
    expect(selected.filter((s) => (specOf(s).ports as Obj[]).some((p) => p.name === 'admin')).map((s) => [s.metadata.name, specOf(s).type])).toEqual([['modelgate-admin', 'ClusterIP']]);
  });

  it('keeps both ports on a ClusterIP Service, as before', () => {
    expect(ofKind(get('monitoring'), 'Service').map((s) => [s.metadata.name, (specOf(s).ports as Obj[]).map((p) => p.name)])).toEqual([['modelgate', ['http', 'admin']]]);
  });

  it('labels the ServiceMonitor and PrometheusRule for the Prometheus selectors', () => {
    expect(only(get('full'), 'ServiceMonitor').metadata.labels).toMatchObject({ release: 'kube-prometheus-stack' });
    expect(only(get('full'), 'PrometheusRule').metadata.labels).toMatchObject({ release: 'kube-prometheus-stack' });
  });

  it('ships the groups of alerts/modelgate.rules.yaml in the PrometheusRule', () => {
    const rules = parse(readFileSync(join(CHART_DIR, 'alerts/modelgate.rules.yaml'), 'utf8')) as { groups: unknown[] };
    expect(specOf(only(get('monitoring'), 'PrometheusRule')).groups).toEqual(rules.groups);
  });

  it('ships dashboards/modelgate.json unchanged in a ConfigMap labelled for the Grafana sidecar', () => {
    const dashboards = ofKind(get('monitoring'), 'ConfigMap').filter((o) => o.metadata.name === 'modelgate-dashboard') as Array<K8sObject & { data: Record<string, string> }>;
    expect(dashboards).toHaveLength(1);
    const [dashboard] = dashboards as [K8sObject & { data: Record<string, string> }];
    expect(dashboard.data).toEqual({ 'modelgate.json': readFileSync(join(CHART_DIR, 'dashboards/modelgate.json'), 'utf8') });
    expect(dashboard.metadata.labels).toMatchObject({ grafana_dashboard: '1' });
    expect(dashboard.metadata.namespace).toBe(NAMESPACE);
    const full = only(get('full'), 'ConfigMap', 'llm-gateway-dashboard');
    expect(full.metadata.namespace).toBe('monitoring');
    expect(full.metadata.annotations).toEqual({ grafana_folder: 'LLM' });
  });
});

describe('chart Ingress and HTTPRoute', () => {
  it('sends the Ingress hosts to the Service port named http, with TLS when given', () => {
    const ingress = only(get('full'), 'Ingress');
    expect(specOf(ingress)).toEqual({
      ingressClassName: 'nginx',
      tls: [{ secretName: 'llm-example-com-tls', hosts: ['llm.example.com'] }],
      rules: [{ host: 'llm.example.com', http: { paths: [{ path: '/v1', pathType: 'Prefix', backend: { service: { name: 'llm-gateway', port: { name: 'http' } } } }] } }],
    });
    expect(ingress.metadata.annotations).toMatchObject({ 'nginx.ingress.kubernetes.io/proxy-buffering': 'off' });
    expect(specOf(only(get('ingressPlain'), 'Ingress')).tls).toBeUndefined();
  });

  it('attaches the HTTPRoute to the given Gateway and sends /v1 to the API port', () => {
    const route = only(get('full'), 'HTTPRoute');
    expect(route.apiVersion).toBe('gateway.networking.k8s.io/v1');
    expect(specOf(route)).toEqual({
      parentRefs: [{ name: 'public', namespace: 'gateway-system', sectionName: 'https' }],
      hostnames: ['llm.example.com'],
      rules: [{ matches: [{ path: { type: 'PathPrefix', value: '/v1' } }], backendRefs: [{ name: 'llm-gateway', port: 80 }] }],
    });
    const service = only(get('full'), 'Service', 'llm-gateway');
    expect((specOf(service).ports as Obj[])[0]).toMatchObject({ name: 'http', port: 80 });
  });
});

describe('chart ModelPools and ModelDeployments', () => {
  it('renders them as modelgate.io/v1alpha1 objects, in the release namespace unless one is given, with their spec unchanged', () => {
    const pools = ofKind(get('models'), 'ModelPool');
    expect(pools.map((p) => [p.apiVersion, p.metadata.namespace, p.metadata.name])).toEqual([
      ['modelgate.io/v1alpha1', NAMESPACE, 'llama-8b'],
      ['modelgate.io/v1alpha1', 'models', 'llama-8b'],
    ]);
    expect(pools[0]?.spec).toEqual({ service: { name: 'llama-8b', port: 'http' }, servedModelName: 'meta-llama/Llama-3.1-8B-Instruct' });
    const deployment = only(get('models'), 'ModelDeployment', 'llama-8b-prod');
    expect(deployment.metadata).toMatchObject({ name: 'llama-8b-prod', namespace: NAMESPACE, labels: expect.objectContaining({ tier: 'prod' }) });
    expect(deployment.spec).toEqual({ model: 'llama-3.1-8b-instruct', aliases: ['default'], targets: [{ pool: 'llama-8b', weight: 100 }] });
  });

  it('passes spec.routing and spec.fallbacks through unchanged, as objects the CRD schemas accept', () => {
    const objects = [...ofKind(get('models'), 'ModelPool'), ...ofKind(get('models'), 'ModelDeployment')];
    expect(objects.flatMap((o) => schemaErrors(o))).toEqual([]);
    expect(ofKind(get('models'), 'ModelPool').map((p) => specOf(p).routing)).toEqual([undefined, POOL_ROUTING]);
    expect(specOf(only(get('models'), 'ModelDeployment', 'llama-8b-next')).fallbacks).toEqual(['llama-8b-prod']);
  });

  it('refuses an object in a namespace the router does not watch', async () => {
    const result = await render([], { 'auth.keys': [A_KEY], modelPools: [{ name: 'p', namespace: 'elsewhere', spec: { service: { name: 's' }, servedModelName: 'm' } }] });
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain('"p" is in namespace elsewhere, which the router does not watch');
  });
});
