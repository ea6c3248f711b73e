#!/usr/bin/env node
/**
 * The `modelgate` executable. Before anything else is loaded it (1) checks the Node version, so an
 * old Node gets one line saying what is needed instead of a stack trace from a dependency, and (2) for
 * the long-running commands, re-executes itself in place (same PID, same signals) with the V8 flags
 * the router's latency depends on, so `modelgate serve`, `npm start` and the image all run alike.
 * Everything else is in commands.ts, loaded only after both.
 */
import { routerNodeFlags, unsupportedNode } from './runtime.js';

const problem = unsupportedNode(process.versions.node);
if (problem) {
  process.stderr.write(`modelgate: ${problem}\n`);
  process.exit(2);
}

const [command, ...rest] = process.argv.slice(2);
const missing = routerNodeFlags(command, process.execArgv, process.env.NODE_OPTIONS);
const script = process.argv[1];
if (missing.length > 0 && script !== undefined && typeof process.execve === 'function') {
  // Replaces this process image: nothing runs after it on success.
  process.execve(process.execPath, [process.execPath, ...missing, ...process.execArgv, script, ...(command === undefined ? [] : [command]), ...rest], process.env);
}

const { runCli } = await import('./commands.js');
await runCli(process.argv.slice(2));
