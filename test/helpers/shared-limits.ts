/**
 * Two router processes (`modelgate serve`, as users start them) in front of one simulator, sharing
 * their per-key limits through one real redis-server: the set-up of the tests of shared limits.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type SimOptions } from '../../src/sim/options.js';
import { type SimServer } from '../../src/sim/server.js';
import { startRedisServer, type RedisServer } from './redis-server.js';
import { serveRouter, type ServedRouter } from './serve.js';
import { startTestSim } from './sim.js';

export interface SharedLimitsRig {
  /** The temporary directory of the config and keys files. */
  dir: string;
  redis: RedisServer;
  sim: SimServer;
  routers: ServedRouter[];
  /** A router's config file (JSON) in front of the simulator, with these `limits.redis` settings (the keys file is `keys.yaml` in `dir`). */
  routerConfig: (redisSettings: object) => string;
  stop: () => Promise<void>;
}

/**
 * Starts Redis, a simulator of `meta/llama` (with `sim`'s options) and two routers, whose keys file
 * holds `keys` (YAML lines). The routers' Redis timeout is raised from its 50 ms default: on a loaded
 * 2-core CI machine Redis sometimes answers later than that, and these tests are about shared counting,
 * not about a slow Redis (the limiter's own tests cover slow answers).
 */
export async function startSharedLimits(name: string, keys: readonly string[], simOptions: Partial<SimOptions> = {}): Promise<SharedLimitsRig> {
  const dir = await mkdtemp(join(tmpdir(), `modelgate-${name}-`));
  let redis: RedisServer | undefined;
  let server: SimServer | undefined;
  const routers: ServedRouter[] = [];
  const stop = async (): Promise<void> => {
    await Promise.all(routers.map((r) => r.stop()));
    await server?.close();
    await redis?.stop();
    await rm(dir, { recursive: true, force: true });
  };
  try {
    redis = await startRedisServer();
    const sim = (server = await startTestSim({ model: ['meta/llama'], name: 'replica', ttftMs: 0, itlMs: 0, ...simOptions }));
    const routerConfig = (redisSettings: object): string =>
      JSON.stringify({
        server: { host: '127.0.0.1', port: 0, shutdownDelayMs: 0 },
        admin: { host: '127.0.0.1', port: 0 },
        log: { level: 'info' },
        auth: { keysFile: 'keys.yaml' },
        pools: [{ name: 'llama', servedModelName: 'meta/llama', endpoints: [sim.url] }],
        deployments: [{ id: 'llama-prod', model: 'llama', targets: [{ pool: 'llama' }] }],
        limits: { redis: redisSettings },
      });
    await writeFile(join(dir, 'keys.yaml'), keys.join('\n'));
    await writeFile(join(dir, 'modelgate.yaml'), routerConfig({ url: redis.url, timeoutMs: 1000 }));
    for (let i = 0; i < 2; i++) routers.push(await serveRouter(join(dir, 'modelgate.yaml')));
    return { dir, redis, sim, routers, routerConfig, stop };
  } catch (err) {
    await stop(); // nothing started is left behind
    throw err;
  }
}
