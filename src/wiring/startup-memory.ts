/**
 * Gives back what start-up used and left behind. Compiling the config and API schemas and loading
 * the modules grow V8's heap (the young generation to its full `--max-semi-space-size`, the old one
 * with garbage no collection has reclaimed yet), and V8 keeps those pages: a static-mode router
 * stayed at ~98 MiB RSS while idle. One memory-reducing full collection before the router listens
 * brings it to ~84 MiB (bench/results/scale.md), at the cost of one pause of tens of milliseconds
 * before the first request can arrive.
 *
 * Node has no public call for V8's memory-reducing collection, so this leans on V8: the `gc`
 * function that `--expose-gc` installs, taken from a fresh context (no global `gc` appears in the
 * router's own) with its `flavor: 'last-resort'` option, the collection V8 runs itself when memory
 * is short. test/wiring/startup-memory.test.ts pins that it collects, so an upgrade that drops the
 * option fails there.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** V8's gc extension (src/extensions/gc-extension.cc): `type`, `execution` and `flavor` as below. */
type V8Gc = (options: { type: 'major'; execution: 'sync'; flavor: 'last-resort' }) => void;

/** Runs one synchronous memory-reducing full collection. */
export function releaseStartupMemory(): void {
  const own = (globalThis as { gc?: V8Gc }).gc; // the operator ran node with --expose-gc
  if (own) return own({ type: 'major', execution: 'sync', flavor: 'last-resort' });
  setFlagsFromString('--expose-gc');
  let gc: V8Gc;
  try {
    gc = runInNewContext('gc') as V8Gc;
  } finally {
    setFlagsFromString('--no-expose-gc'); // contexts made later (vm, libraries) get no `gc`
  }
  gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
}
