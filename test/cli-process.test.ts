/**
 * The built executable as users run it (`node dist/cli.js …`, which `npm test` builds first): the
 * runtime check, the V8 flags `serve` re-executes itself with, and listen failures.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { createInterface } from 'node:readline';
import { unsupportedNode } from '../src/runtime.js';

const cli = new URL('../dist/cli.js', import.meta.url).pathname;
let dir: string;

beforeAll(async () => {
  if (!existsSync(cli)) throw new Error('dist/cli.js is missing: run `npm run build` (npm test does it first)');
  dir = await mkdtemp(join(tmpdir(), 'modelgate-cli-process-'));
  await writeFile(join(dir, 'keys.yaml'), '- name: t\n  key: sk-cli-process\n');
});
afterAll(() => rm(dir, { recursive: true, force: true }));

async function config(name: string, server: object): Promise<string> {
  const file = join(dir, name);
  await writeFile(file, JSON.stringify({ server: { host: '127.0.0.1', port: 0, shutdownDelayMs: 0, ...server }, admin: { host: '127.0.0.1', port: 0 }, auth: { keysFile: 'keys.yaml' } }));
  return file;
}

/** Runs the CLI to its exit; resolves with the exit code and what it printed. */
function run(args: string[], env: NodeJS.ProcessEnv = process.env, node = process.execPath): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(node, [cli, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** Starts `serve`, waits for its "listening" line; returns the pid, its command line and a stop. */
async function serve(file: string, env: NodeJS.ProcessEnv): Promise<{ pid: number; argv: string[]; api: string; stop: () => Promise<number | null> }> {
  const child = spawn(process.execPath, [cli, 'serve', '--config', file], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const api = await new Promise<string>((resolve, reject) => {
    createInterface(child.stdout).on('line', (line) => {
      const entry = JSON.parse(line) as { msg?: string; api?: string };
      if (entry.msg === 'modelgate listening') resolve(entry.api ?? '');
    });
    void exit.then((code) => reject(new Error(`modelgate exited early with ${code}`)));
  });
  const argv = readFileSync(`/proc/${child.pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
  return {
    pid: child.pid ?? 0,
    argv,
    api,
    stop: () => {
      child.kill('SIGTERM');
      return exit;
    },
  };
}

/** A node on PATH outside node_modules (the machine's own), with its version. */
function systemNode(): { path: string; version: string } | undefined {
  for (const folder of (process.env.PATH ?? '').split(delimiter)) {
    const path = join(folder, 'node');
    if (folder.includes('node_modules') || !existsSync(path)) continue;
    return { path, version: execFileSync(path, ['--version'], { encoding: 'utf8' }).trim() };
  }
  return undefined;
}

describe('the Node version check', () => {
  it('on the machine’s own Node: one line and exit 2 when it is too old, the usage otherwise', async () => {
    const node = systemNode() ?? { path: process.execPath, version: process.version };
    const result = await run(['--help'], process.env, node.path);
    if (unsupportedNode(node.version)) {
      expect(result.code).toBe(2);
      expect(result.stderr).toBe(`modelgate: ${unsupportedNode(node.version)}\n`);
      expect(result.stdout).toBe('');
    } else {
      expect(result.code).toBe(0);
      expect(result.stdout).toContain('Usage: modelgate <command>');
    }
  });
});

describe('modelgate serve', () => {
  it('re-executes itself in place with the router’s V8 flags', async () => {
    const { pid, argv, api, stop } = await serve(await config('plain.json', {}), process.env);
    expect(argv).toEqual(expect.arrayContaining(['--max-semi-space-size=4', '--no-parallel-scavenge', '--no-allocation-site-pretenuring', '--liftoff-only']));
    expect(argv.slice(-3)).toEqual(['serve', '--config', join(dir, 'plain.json')]);
    expect(api).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(pid).toBeGreaterThan(0); // the same process the signal goes to
    expect(await stop()).toBe(0);
  });

  it('in static mode never loads the Kubernetes client', async () => {
    // a module hook (node:module registerHooks) that reports every module resolved from @kubernetes/*
    const hook = `data:text/javascript,${encodeURIComponent("import { registerHooks } from 'node:module'; registerHooks({ resolve(s, c, next) { const r = next(s, c); if (r.url.includes('@kubernetes')) process.stderr.write('LOADED ' + r.url + '\\n'); return r; } });")}`;
    const child = spawn(process.execPath, ['--import', hook, cli, 'serve', '--config', await config('static.json', {})], { env: process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    await new Promise<void>((resolve, reject) => {
      createInterface(child.stdout).on('line', (line) => {
        if ((JSON.parse(line) as { msg?: string }).msg === 'modelgate listening') resolve();
      });
      void exit.then((code) => reject(new Error(`modelgate exited early with ${code}`)));
    });
    child.kill('SIGTERM');
    const code = await exit;
    expect(stderr).not.toContain('LOADED');
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
  });

  it('keeps a semi-space size the operator set in NODE_OPTIONS', async () => {
    const { argv, stop } = await serve(await config('own-flags.json', {}), { ...process.env, NODE_OPTIONS: '--max-semi-space-size=8' });
    expect(argv.some((a) => a.startsWith('--max-semi-space-size'))).toBe(false);
    expect(await stop()).toBe(0);
  });

  it('exits 2 with one line naming the field when its port is taken', async () => {
    const blocker = net.createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const port = (blocker.address() as net.AddressInfo).port;
    try {
      const result = await run(['serve', '--config', await config('taken.json', { port })]);
      expect(result.code).toBe(2);
      expect(result.stderr).toBe(`modelgate: server.port: 127.0.0.1:${port} is already in use (another process, or the other of server.port and admin.port)\n`);
    } finally {
      await new Promise((resolve) => blocker.close(resolve));
    }
  });

  it('names server.host, not server.port, for an address that is not this machine’s; a host that is no address at all is refused by the config check', async () => {
    // TEST-NET-1 (RFC 5737): never an address of this machine; binding to it sends nothing
    const elsewhere = await run(['serve', '--config', await config('elsewhere.json', { host: '192.0.2.1' })]);
    expect({ code: elsewhere.code, stderr: elsewhere.stderr }).toEqual({ code: 2, stderr: 'modelgate: server.host: 192.0.2.1 is not an address of this machine\n' });
    const nonsense = await run(['validate', '--config', await config('nonsense.json', { host: 'not a host!!' })]);
    expect(nonsense.code).toBe(2);
    expect(nonsense.stderr).toMatch(/^modelgate: server\.host must match/);
  });

  it('prints the usage and exits 0 for help, and for --help or -h after a command', async () => {
    for (const args of [['help'], ['serve', '--help'], ['validate', '--config', 'x.yaml', '-h'], ['demo', '--help']]) {
      const result = await run(args);
      expect({ args, code: result.code, stderr: result.stderr }).toEqual({ args, code: 0, stderr: '' });
      expect(result.stdout).toContain('Usage: modelgate <command> [flags]');
    }
    const sim = await run(['sim', '--help']);
    expect(sim.code).toBe(0);
    expect(sim.stdout).toContain('--max-num-seqs');
  });

  it('validate and serve refuse the same port for the API and the admin endpoints', async () => {
    const file = join(dir, 'same-port.json');
    await writeFile(file, JSON.stringify({ server: { port: 18123 }, admin: { port: 18123 }, auth: { keysFile: 'keys.yaml' } }));
    for (const command of ['validate', 'serve']) {
      const result = await run([command, '--config', file]);
      expect(result.code).toBe(2);
      expect(result.stderr).toBe('modelgate: admin.port: must differ from server.port (both are 18123)\n');
    }
  });
});
