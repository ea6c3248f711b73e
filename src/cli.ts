#!/usr/bin/env node
/**
 * `modelgate <command>`. Bad flags or config print one clear message and exit with code 2.
 */
import { startSim } from './sim/server.js';
import { parseSimArgs, simHelp, SimOptionsError } from './sim/options.js';

const USAGE = `Usage: modelgate <command> [flags]

Commands:
  sim     run a simulated vLLM-compatible engine (modelgate sim --help)
`;

class UsageError extends Error {}

function onSignals(stop: () => Promise<void>): void {
  let stopping = false;
  const handler = (): void => {
    if (stopping) return;
    stopping = true;
    stop().then(
      () => process.exit(0),
      (err: unknown) => {
        process.stderr.write(`modelgate: shutdown failed: ${String(err)}\n`);
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', handler);
  process.on('SIGINT', handler);
}

async function runSim(args: string[]): Promise<void> {
  if (args.includes('--help') || args.includes('-h')) {
    process.stdout.write(simHelp() + '\n');
    return;
  }
  const options = parseSimArgs(args);
  const sim = await startSim(options);
  process.stdout.write(`modelgate sim listening on ${sim.url} (models: ${options.model.join(', ')})\n`);
  onSignals(() => sim.close());
}

async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  switch (command) {
    case 'sim':
      return runSim(rest);
    case undefined:
    case '--help':
    case '-h':
      process.stdout.write(USAGE);
      if (command === undefined) process.exitCode = 2;
      return;
    default:
      throw new UsageError(`unknown command "${command}"\n\n${USAGE}`);
  }
}

main(process.argv.slice(2)).catch((err: unknown) => {
  if (err instanceof UsageError || err instanceof SimOptionsError) {
    process.stderr.write(`modelgate: ${err.message}\n`);
    process.exit(2);
  }
  const code = (err as NodeJS.ErrnoException).code;
  process.stderr.write(`modelgate: ${code === 'EADDRINUSE' ? 'the port is already in use' : String(err)}\n`);
  process.exit(1);
});
