/**
 * A real `redis-server` for tests: 127.0.0.1, a free port, no persistence, a temp dir of its own.
 * `stop()` kills it (a test can take Redis away mid-run); `restart()` brings it back, empty, on the
 * same port. Call `stop()` in afterAll: it also removes the temp dir. Should the test process exit
 * without it, an exit hook still kills the server.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net, { type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stopChild, untilReady } from './child-process.js';

const BINARY = 'redis-server';
/** How long a start may take before the test fails (a loaded 2-core CI machine is slow, not this slow). */
const START_TIMEOUT_MS = 15_000;
const PING_INTERVAL_MS = 25;
const STOP_TIMEOUT_MS = 5_000;
/** Starts tried on fresh ports when the chosen one was taken meanwhile. */
const START_ATTEMPTS = 3;
/** The lowest port picked (above the ports system services usually take). */
const LOW_PORT = 20_000;

export interface RedisServer {
  /** `redis://127.0.0.1:<port>` */
  readonly url: string;
  readonly port: number;
  /** Kills the server and waits for it to exit; safe to call when already stopped. */
  stop(): Promise<void>;
  /** Starts the server again on the same port (empty: nothing is persisted). */
  restart(): Promise<void>;
}

/** Starts `redis-server`; rejects (does not skip) when it is not installed. */
export async function startRedisServer(): Promise<RedisServer> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await serve(await freePort());
    } catch (err) {
      // another process took the port between the probe and the server's bind: try another one
      if (attempt >= START_ATTEMPTS || !(err instanceof Error && err.message.includes('Address already in use'))) throw err;
    }
  }
}

async function serve(port: number): Promise<RedisServer> {
  let child: ChildProcess | undefined;
  let dir: string | undefined;
  const killOnExit = (): void => {
    child?.kill('SIGKILL');
  };

  const start = async (): Promise<void> => {
    dir = mkdtempSync(join(tmpdir(), 'modelgate-redis-'));
    const started = spawn(BINARY, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no', '--dir', dir, '--logfile', ''], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child = started;
    process.once('exit', killOnExit);
    let output = '';
    started.stdout?.on('data', (chunk: Buffer) => (output = (output + chunk.toString()).slice(-4000)));
    started.stderr?.on('data', (chunk: Buffer) => (output = (output + chunk.toString()).slice(-4000)));
    try {
      await untilReady(started, {
        name: BINARY,
        installHint: 'the Redis limit-store tests need a real Redis 7. .ci/run installs it (apt-get install redis-server); install it the same way to run them locally.',
        timeoutMs: START_TIMEOUT_MS,
        pollMs: PING_INTERVAL_MS,
        readiness: `did not answer PING on port ${port}`,
        probe: () => answers(port, started.pid),
        output: () => output,
      });
    } catch (err) {
      await stop();
      throw err;
    }
  };

  const stop = async (): Promise<void> => {
    const running = child;
    child = undefined;
    process.removeListener('exit', killOnExit);
    if (running) await stopChild(running, STOP_TIMEOUT_MS);
    if (dir) rmSync(dir, { recursive: true, force: true });
    dir = undefined;
  };

  await start();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    stop,
    restart: async () => {
      await stop();
      await start();
    },
  };
}

/**
 * A port nothing listens on right now, below the kernel's ephemeral range when there is room: no
 * process's `listen(0)` or outgoing connection can then take it while the server is down between
 * `stop()` and `restart()`. Else the kernel's pick for port 0.
 */
async function freePort(): Promise<number> {
  const low = ephemeralLow();
  for (let i = 0; i < 20 && low - LOW_PORT > 1_000; i++) {
    const port = LOW_PORT + Math.floor(Math.random() * (low - LOW_PORT));
    if ((await listenOn(port)) !== undefined) return port;
  }
  return (await listenOn(0)) ?? Promise.reject(new Error('no free TCP port on 127.0.0.1'));
}

/** The first port of the kernel's ephemeral range (Linux's default when it cannot be read). */
function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) ? low : 32_768;
  } catch {
    return 32_768;
  }
}

/** Listens on `port` (0: any) for a moment; the port it got, or undefined when that one is taken. */
async function listenOn(port: number): Promise<number | undefined> {
  const server = net.createServer();
  const listening = once(server, 'listening').then(
    () => (server.address() as AddressInfo).port,
    () => undefined,
  );
  server.listen(port, '127.0.0.1');
  const got = await listening;
  if (got !== undefined) {
    server.close();
    await once(server, 'close');
  }
  return got;
}

/**
 * Whether the Redis on `port` answers, and is process `pid`: its `INFO server` names that process
 * (another test process's Redis on the same port must never be taken for ours, and flushed).
 * False on any connection failure.
 */
function answers(port: number, pid: number | undefined): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    let reply = '';
    const end = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1_000, () => end(false));
    socket.on('error', () => end(false));
    socket.on('connect', () => socket.write('INFO server\r\n'));
    socket.on('data', (chunk: Buffer) => {
      reply += chunk.toString();
      const match = /process_id:(\d+)\r\n/.exec(reply);
      if (match) end(Number(match[1]) === pid);
      else if (reply.startsWith('-')) end(false);
    });
    socket.on('close', () => end(false));
  });
}
