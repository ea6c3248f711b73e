/**
 * Real servers the tests start as child processes (redis-server, prometheus): waiting until one
 * answers, and stopping it. A missing binary, an early exit and a slow start each reject with the
 * process's last output, so a failing test says why.
 */
import { type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import net, { type AddressInfo } from 'node:net';

export interface ReadyOptions {
  /** The binary, as the errors name it. */
  name: string;
  /** What to do when it is not installed. */
  installHint: string;
  timeoutMs: number;
  pollMs: number;
  /** What "ready" means, for the timeout error (e.g. `did not answer PING on port 6379`). */
  readiness: string;
  /** Whether it answers now (never rejects). */
  probe: () => Promise<boolean>;
  /** Its output so far. */
  output: () => string;
}

/** Resolves once `probe` says the child answers; rejects if it exits first, is missing, or takes longer than `timeoutMs`. */
export function untilReady(child: ChildProcess, options: ReadyOptions): Promise<void> {
  const { name, output } = options;
  return new Promise<void>((resolve, reject) => {
    let done = false;
    let timer: NodeJS.Timeout | undefined;
    const finish = (err?: Error): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      clearTimeout(deadline);
      child.removeListener('error', onError);
      child.removeListener('exit', onExit);
      if (err) reject(err);
      else resolve();
    };
    const onError = (err: NodeJS.ErrnoException): void => finish(err.code === 'ENOENT' ? new Error(`${name} is not installed (not on PATH): ${options.installHint}`) : err);
    const onExit = (code: number | null, signal: NodeJS.Signals | null): void => finish(new Error(`${name} exited (code ${code}, signal ${signal}) before it was ready:\n${output()}`));
    const deadline = setTimeout(() => finish(new Error(`${name} ${options.readiness} within ${options.timeoutMs} ms:\n${output()}`)), options.timeoutMs);
    child.once('error', onError);
    child.once('exit', onExit);
    const attempt = (): void => {
      if (done) return;
      void options.probe().then((ok) => {
        if (ok) finish();
        else if (!done) timer = setTimeout(attempt, options.pollMs);
      });
    };
    attempt();
  });
}

/** SIGTERM, then SIGKILL after `timeoutMs`; resolves once it has exited (at once if it already has). */
export async function stopChild(child: ChildProcess, timeoutMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  await exited;
  clearTimeout(timer);
}

/** A port nothing listens on right now on 127.0.0.1 (the kernel's pick for port 0). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  server.close();
  await once(server, 'close');
  return port;
}
