#!/usr/bin/env node
// Keeps package-lock.json acceptable to `npm ci` when the registry lacks some optional platform
// packages (this workplace's registry has only the Linux builds of e.g. @unrs/resolver-binding-*).
// `npm install` then leaves those optional dependencies out of the lockfile, and `npm ci` rejects the
// file as out of sync (npm/cli#9846). A record with the version and `optional: true` is enough for
// `npm ci`: it skips an optional package it cannot install. Idempotent; runs as `postinstall`.
import { readFileSync, writeFileSync } from 'node:fs';

const file = new URL('../package-lock.json', import.meta.url);
let lock;
try {
  lock = JSON.parse(readFileSync(file, 'utf8'));
} catch {
  process.exit(0); // no lockfile (e.g. installed as a dependency): nothing to do
}
const packages = lock.packages ?? {};
let added = 0;
for (const [path, entry] of Object.entries(packages)) {
  for (const [name, version] of Object.entries(entry.optionalDependencies ?? {})) {
    const nested = `${path ? path + '/' : ''}node_modules/${name}`;
    if (packages[nested] || packages[`node_modules/${name}`]) continue;
    packages[`node_modules/${name}`] = { version, ...(entry.dev ? { dev: true } : {}), optional: true };
    added++;
  }
}
if (added > 0) {
  writeFileSync(file, JSON.stringify(lock, null, 2) + '\n');
  console.log(`lock-unpublished-optionals: recorded ${added} optional packages the registry does not serve`);
}
