#!/usr/bin/env node
// Rehearses the Dockerfile's build stage without a Docker engine: in a scratch directory, the same
// npm ci --ignore-scripts, compile (tsc, then the validators ahead of time) and prune to production dependencies; then the pruned app must
// start on Node 24 (this process's) and validate a config. This catches a runtime import of a dev
// dependency, which the image would only reveal when it runs.
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'modelgate-image-'));
const run = (cmd, args, opts = {}) => execFileSync(cmd, args, { cwd: dir, stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8', ...opts });
try {
  for (const file of ['package.json', 'package-lock.json', 'tsconfig.json', 'tsconfig.build.json']) cpSync(join(root, file), join(dir, file));
  cpSync(join(root, 'src'), join(dir, 'src'), { recursive: true });
  cpSync(join(root, 'scripts/precompile-validators.mjs'), join(dir, 'scripts/precompile-validators.mjs'));
  run('npm', ['ci', '--ignore-scripts', '--no-audit', '--no-fund']);
  run(process.execPath, ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.build.json']);
  run(process.execPath, ['scripts/precompile-validators.mjs']);
  run('npm', ['prune', '--omit=dev', '--no-audit', '--no-fund']);
  writeFileSync(join(dir, 'keys.yaml'), '- name: probe\n  key: sk-rehearsal-key\n');
  writeFileSync(
    join(dir, 'config.yaml'),
    'auth: { keysFile: keys.yaml }\npools: [{ name: p, servedModelName: m, endpoints: [http://127.0.0.1:9] }]\ndeployments: [{ id: d, model: m, targets: [{ pool: p }] }]\n',
  );
  const out = run(process.execPath, ['dist/cli.js', 'validate', '--config', 'config.yaml'], { env: { PATH: process.env.PATH, NODE_ENV: 'production' } });
  const help = run(process.execPath, ['dist/cli.js', 'sim', '--help'], { env: { PATH: process.env.PATH, NODE_ENV: 'production' } });
  if (!out.startsWith('config OK') || !help.includes('--max-num-seqs')) throw new Error(`unexpected output: ${out}`);
  if (!existsSync(join(dir, 'dist/api/precompiled-validators-config.cjs'))) throw new Error('the build stage wrote no precompiled validators');
  console.log(`image rehearsal: production dependencies only, Node ${process.version}: ${out.trim()}`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
