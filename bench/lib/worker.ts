/** A harness's job run in a fresh child process (the load generators), so its own GC and event loop never slow the process measured. */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** Forks `moduleUrl` with `flag` (`--max-semi-space-size=4`, like the router) and resolves with what its worker answers to `job`. */
export function inWorker<J, R>(moduleUrl: string, flag: string, job: J): Promise<R> {
  return new Promise((resolve, reject) => {
    const child = fork(fileURLToPath(moduleUrl), [flag], { execArgv: ['--max-semi-space-size=4'], serialization: 'advanced', stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    child.once('message', (msg: R | { error: string }) => {
      if (typeof msg === 'object' && msg !== null && 'error' in msg) reject(new Error(msg.error));
      else resolve(msg);
      child.disconnect();
    });
    child.once('exit', (code) => code !== 0 && reject(new Error(`load generator exited with ${code}`)));
    child.send(job as object);
  });
}

/** In the forked process (started with `flag`): runs the job the parent sends and answers with its result or error. */
export function serveWorker<J, R>(flag: string, run: (job: J) => Promise<R>): void {
  if (!process.argv.includes(flag)) return;
  process.once('message', (job: J) => {
    run(job).then(
      (result) => process.send?.(result),
      (err: Error) => process.send?.({ error: err.message }),
    );
  });
}
