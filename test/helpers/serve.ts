/**
 * `modelgate serve --config FILE` as a separate process, exactly as users start it (the built
 * dist/cli.js, which `npm test` builds first). Its JSON log lines are kept; `stop()` sends SIGTERM
 * and waits for the exit.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';

const CLI = new URL('../../dist/cli.js', import.meta.url).pathname;
const START_TIMEOUT_MS = 20_000;

export interface ServedRouter {
  api: string;
  admin: string;
  /** Every log line so far, parsed. */
  logs: Array<Record<string, unknown>>;
  stop(): Promise<void>;
}

/** `env`: variables added to the router's environment (as an operator sets them on its Deployment). */
export async function serveRouter(configFile: string, env: NodeJS.ProcessEnv = {}): Promise<ServedRouter> {
  if (!existsSync(CLI)) throw new Error('dist/cli.js is missing: run `npm run build` (npm test does it first)');
  const child = spawn(process.execPath, [CLI, 'serve', '--config', configFile], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, ...env } });
  const logs: Array<Record<string, unknown>> = [];
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const listening = new Promise<{ api: string; admin: string }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('modelgate did not start listening in time')), START_TIMEOUT_MS);
    createInterface(child.stdout).on('line', (line) => {
      let entry: Record<string, unknown>;
      try {
        entry = JSON.parse(line) as Record<string, unknown>;
      } catch {
        return;
      }
      logs.push(entry);
      if (entry.msg === 'modelgate listening') {
        clearTimeout(timer);
        resolve({ api: String(entry.api), admin: String(entry.admin) });
      }
    });
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`modelgate exited before listening: ${JSON.stringify(logs.slice(-3))}`));
    });
  });
  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
  };
  try {
    return { ...(await listening), logs, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
