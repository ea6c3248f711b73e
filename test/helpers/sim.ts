import { afterEach } from '@jest/globals';
import { defaultSimOptions, type SimOptions } from '../../src/sim/options.js';
import { startSim, type SimServer, type SimServerDeps } from '../../src/sim/server.js';

/**
 * A simulator on 127.0.0.1 and a free port; close it in afterAll/afterEach. With `loadTimeMs` it
 * starts loading: await `sim.loaded` for the end. Its "model loaded" line is dropped unless `deps.log` is given.
 */
export function startTestSim(overrides: Partial<SimOptions> = {}, deps: SimServerDeps = {}): Promise<SimServer> {
  return startSim({ ...defaultSimOptions(), port: 0, host: '127.0.0.1', ...overrides }, { log: () => undefined, ...deps });
}

/**
 * `startTestSim` for a test file: call it at the file's top level; every simulator the returned function
 * starts (over `defaults`) is closed after each test.
 */
export function simsClosedAfterEach(defaults: Partial<SimOptions> = {}): (overrides?: Partial<SimOptions>, deps?: SimServerDeps) => Promise<SimServer> {
  const sims: SimServer[] = [];
  afterEach(async () => {
    await Promise.all(sims.splice(0).map((s) => s.close()));
  });
  return async (overrides = {}, deps) => {
    const started = await startTestSim({ ...defaults, ...overrides }, deps);
    sims.push(started);
    return started;
  };
}

/** Polls `predicate` until it holds or `timeoutMs` passes (then throws with `what`). */
export async function waitFor(predicate: () => boolean | Promise<boolean>, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
