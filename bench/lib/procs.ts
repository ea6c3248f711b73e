/**
 * Processes a benchmark runs: simulator replicas, modelgate, nginx, HAProxy, Portkey and the floor for
 * a Node router (node-proxy.ts), each as its own OS process on 127.0.0.1, with their CPU time and peak
 * RSS read from /proc.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const ROOT = new URL('../../', import.meta.url).pathname.replace('/.bench/', '/');
const CLI = join(ROOT, 'dist/cli.js');
const PHASE_PROBE = new URL('./phase-probe.js', import.meta.url).href;
export const BENCH_KEY = 'sk-bench-0123456789';

export interface Proc {
  name: string;
  url: string;
  pid: number;
  stop(): Promise<void>;
}

/**
 * `count` distinct free ports: every listener stays open until all are taken, so the kernel cannot
 * hand the same port out twice (two freePort() calls in a row can get the same one).
 */
export async function freePorts(count: number): Promise<number[]> {
  const servers: net.Server[] = [];
  try {
    for (let i = 0; i < count; i++) {
      const server = net.createServer();
      servers.push(server);
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(0, '127.0.0.1', resolve);
      });
    }
    return servers.map((server) => (server.address() as net.AddressInfo).port);
  } finally {
    await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
  }
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

function stopper(child: ChildProcess, cleanup?: () => void): () => Promise<void> {
  return () =>
    new Promise((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) {
        cleanup?.();
        return resolve();
      }
      child.once('exit', () => {
        cleanup?.();
        resolve();
      });
      child.kill('SIGTERM');
      setTimeout(() => child.kill('SIGKILL'), 3000).unref();
    });
}

/** Waits until something accepts TCP connections on 127.0.0.1:port. */
async function waitForPort(port: number, child: ChildProcess, name: string, timeoutMs = 15000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${name} exited with ${child.exitCode}`);
    const ok = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => (s.destroy(), resolve(true)));
      s.on('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`${name} did not listen on ${port}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function startSim(name: string, args: string[]): Promise<Proc> {
  const port = await freePort();
  const child = spawn(process.execPath, [CLI, 'sim', '--port', String(port), '--name', name, ...args], { stdio: ['ignore', 'ignore', 'inherit'] });
  await waitForPort(port, child, name);
  return { name, url: `http://127.0.0.1:${port}`, pid: child.pid!, stop: stopper(child) };
}

export interface ModelgateOptions {
  /** Profile the router with V8's CPU profiler (`--cpu-prof`), the .cpuprofile written to this directory at exit. */
  cpuProfileDir?: string;
  /** The keys file (default: BENCH_KEY alone, no limits). */
  keysYaml?: string;
  /** More top-level config blocks (e.g. `limits`). */
  config?: object;
  /** Time each request's steps (lib/phase-probe.ts, loaded with `--import`); SIGUSR2 writes them to this file. */
  phaseProbe?: string;
  /** Another build's `dist/cli.js` (default: this checkout's, or BENCH_ROUTER_CLI). */
  cli?: string;
}

export interface ModelgateProc extends Proc {
  adminUrl: string;
  /** How it was started: `node dist/cli.js serve --config FILE`, as a user would. */
  started: string;
  /** The running process's command line (/proc/PID/cmdline), once it listens: the flags the executable added itself. */
  running: string;
  /** NODE_OPTIONS it was started with, if any (profiling, or BENCH_ROUTER_NODE_OPTIONS for a diagnostic run). */
  nodeOptions?: string;
}

/**
 * modelgate as users start it: `node dist/cli.js serve --config FILE`, no Node flags (the executable
 * adds the V8 flags the router needs itself, src/runtime.ts), no NODE_OPTIONS from the bench's own
 * environment, the default log level (one access-log line per request, to a file as a container
 * runtime would keep it). BENCH_ROUTER_NODE_OPTIONS sets NODE_OPTIONS for the router alone, for
 * diagnostic runs (another `--max-semi-space-size`; V8 flags such as `--trace-gc` are not allowed there);
 * BENCH_ROUTER_GC_LOG=DIR records every GC pause of the router in DIR (lib/gc-log.ts); reports say when
 * either was set. BENCH_ROUTER_LOG=DIR keeps the router's stdout (its access log) in DIR.
 * BENCH_ROUTER_CLI=PATH runs another build's `dist/cli.js` (an A/B against an older commit built in a
 * worktree); the command line the report quotes shows which.
 */
export async function startModelgate(upstreams: string[], servedModel: string, extra: object = {}, options: ModelgateOptions = {}): Promise<ModelgateProc> {
  const dir = mkdtempSync(join(tmpdir(), 'mg-bench-'));
  const [port, admin] = (await freePorts(2)) as [number, number];
  writeFileSync(join(dir, 'keys.yaml'), options.keysYaml ?? `- name: bench\n  key: ${BENCH_KEY}\n`);
  writeFileSync(
    join(dir, 'config.json'),
    JSON.stringify({
      // shutdownDelayMs/gracePeriodMs only shorten the stop at the end of a run (no load balancer to drain from)
      server: { host: '127.0.0.1', port, shutdownDelayMs: 0, gracePeriodMs: 1000 },
      admin: { host: '127.0.0.1', port: admin },
      auth: { keysFile: 'keys.yaml' },
      pools: [{ name: 'bench', servedModelName: servedModel, endpoints: upstreams, ...extra }],
      deployments: [{ id: 'bench', model: servedModel, targets: [{ pool: 'bench' }] }],
      ...options.config,
    }),
  );
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env.NODE_OPTIONS;
  const gcLog = process.env.BENCH_ROUTER_GC_LOG;
  if (gcLog) mkdirSync(gcLog, { recursive: true });
  const nodeOptions = [
    ...(options.cpuProfileDir ? ['--cpu-prof', `--cpu-prof-dir=${options.cpuProfileDir}`] : []),
    ...(gcLog ? [`--import=${new URL('./gc-log.js', import.meta.url).href}`] : []),
    ...(options.phaseProbe ? [`--import=${PHASE_PROBE}`] : []),
    process.env.BENCH_ROUTER_NODE_OPTIONS ?? '',
  ]
    .join(' ')
    .trim();
  if (nodeOptions) env.NODE_OPTIONS = nodeOptions;
  if (options.phaseProbe) env.BENCH_PHASE_OUT = options.phaseProbe;
  const logDir = process.env.BENCH_ROUTER_LOG;
  if (logDir) mkdirSync(logDir, { recursive: true });
  const logFile = logDir ? join(logDir, `modelgate-${port}.log`) : join(dir, 'stdout.log');
  const out = openSync(logFile, 'w');
  const args = [options.cli ?? process.env.BENCH_ROUTER_CLI ?? CLI, 'serve', '--config', join(dir, 'config.json')];
  const child = spawn(process.execPath, args, { stdio: ['ignore', out, 'inherit'], env });
  closeSync(out);
  await waitForPort(port, child, 'modelgate');
  const shown = (argv: string[]): string => ['node', ...argv.slice(1)].map((a) => a.replace(ROOT, '').replace(dir, '…')).join(' ');
  const running = shown(readFileSync(`/proc/${child.pid}/cmdline`, 'utf8').split('\0').filter(Boolean));
  if (logDir) console.error(`modelgate ${child.pid}: stdout in ${logFile}, NODE_OPTIONS=${nodeOptions || '(none)'}, running as ${running}`);
  return {
    name: 'modelgate',
    url: `http://127.0.0.1:${port}`,
    adminUrl: `http://127.0.0.1:${admin}`,
    pid: child.pid!,
    started: shown([process.execPath, ...args]),
    running,
    ...(nodeOptions ? { nodeOptions } : {}),
    stop: stopper(child, () => rmSync(dir, { recursive: true, force: true })),
  };
}

export async function startNginx(upstreams: string[]): Promise<Proc> {
  const dir = mkdtempSync(join(tmpdir(), 'nginx-bench-'));
  const port = await freePort();
  const servers = upstreams.map((u) => `    server ${new URL(u).host};`).join('\n');
  writeFileSync(
    join(dir, 'nginx.conf'),
    `worker_processes 1;
daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 20000; }
http {
  access_log off;
  client_body_temp_path ${dir}/body; proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fcgi; uwsgi_temp_path ${dir}/uwsgi; scgi_temp_path ${dir}/scgi;
  upstream up {
    least_conn;
${servers}
    keepalive 512;
  }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 600s;
    }
  }
}
`,
  );
  const child = spawn('nginx', ['-p', dir, '-c', join(dir, 'nginx.conf')], { stdio: ['ignore', 'ignore', 'inherit'] });
  await waitForPort(port, child, 'nginx');
  return { name: 'nginx', url: `http://127.0.0.1:${port}`, pid: child.pid!, stop: stopper(child, () => rmSync(dir, { recursive: true, force: true })) };
}

/** The floor for a Node router (bench/lib/node-proxy.ts) in front of one upstream, as its own process. */
/** The Node floor (node-proxy.ts); with `phaseProbe`, its steps timed as modelgate's are (see ModelgateOptions). */
export async function startNodeProxy(upstream: string, phaseProbe?: string): Promise<Proc> {
  const port = await freePort();
  const script = new URL('./node-proxy.js', import.meta.url).pathname;
  const probe = phaseProbe ? [`--import=${PHASE_PROBE}`] : [];
  const env = phaseProbe ? { ...process.env, BENCH_PHASE_OUT: phaseProbe } : process.env;
  const child = spawn(process.execPath, [...probe, script, String(port), upstream], { stdio: ['ignore', 'ignore', 'inherit'], env });
  await waitForPort(port, child, 'node-proxy');
  return { name: 'node http proxy', url: `http://127.0.0.1:${port}`, pid: child.pid!, stop: stopper(child) };
}

export async function startHaproxy(upstreams: string[], balance: 'leastconn' | 'roundrobin' | 'random'): Promise<Proc> {
  const dir = mkdtempSync(join(tmpdir(), 'haproxy-bench-'));
  const port = await freePort();
  const servers = upstreams.map((u, i) => `  server s${i} ${new URL(u).host}`).join('\n');
  writeFileSync(
    join(dir, 'haproxy.cfg'),
    `global
  nbthread 1
  maxconn 9000
defaults
  mode http
  # send each chunk at once, as the router and nginx (proxy_buffering off) do: by default HAProxy asks the
  # kernel to hold small writes for more data (MSG_MORE), which held the first SSE event back ~115 ms
  option http-no-delay
  timeout connect 5s
  timeout client 600s
  timeout server 600s
frontend fe
  bind 127.0.0.1:${port}
  default_backend be
backend be
  balance ${balance === 'random' ? 'random(1)' : balance}
  http-reuse always
${servers}
`,
  );
  const child = spawn('haproxy', ['-db', '-f', join(dir, 'haproxy.cfg')], { stdio: ['ignore', 'ignore', 'inherit'] });
  await waitForPort(port, child, 'haproxy');
  return { name: `haproxy ${balance}`, url: `http://127.0.0.1:${port}`, pid: child.pid!, stop: stopper(child, () => rmSync(dir, { recursive: true, force: true })) };
}

/* `random(1)`: one uniform draw, like kube-proxy; HAProxy's plain `random` draws two and takes the less loaded. */

/** Portkey's gateway (pinned in bench/portkey). It binds every interface: run benchmarks in a private network namespace. */
export async function startPortkey(): Promise<Proc> {
  const port = await freePort();
  const entry = join(ROOT, 'bench/portkey/node_modules/@portkey-ai/gateway/build/start-server.js');
  const child = spawn(process.execPath, [entry, `--port=${port}`, '--headless'], { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, NODE_ENV: 'production' } });
  await waitForPort(port, child, 'portkey');
  return { name: 'portkey', url: `http://127.0.0.1:${port}`, pid: child.pid!, stop: stopper(child) };
}

/** Pids of `pid` and all its descendants (nginx's worker, for instance). */
function tree(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
    } catch {
      // gone meanwhile
    }
  }
  const out = [pid];
  for (let i = 0; i < out.length; i++) out.push(...(children.get(out[i]!) ?? []));
  return out;
}

/** CPU seconds used so far and peak RSS (MiB) of a process and its children. */
export function usage(pid: number): { cpuSeconds: number; peakRssMiB: number } {
  let ticks = 0;
  let rss = 0;
  for (const p of tree(pid)) {
    try {
      const raw = readFileSync(`/proc/${p}/stat`, 'utf8');
      // fields after "(comm)": state is [0], utime [11], stime [12]
      const stat = raw.slice(raw.lastIndexOf(')') + 2).split(' ');
      ticks += Number(stat[11]) + Number(stat[12]);
      const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${p}/status`, 'utf8'));
      rss += Number(hwm?.[1] ?? 0) / 1024;
    } catch {
      // gone meanwhile
    }
  }
  return { cpuSeconds: ticks / 100, peakRssMiB: rss };
}
