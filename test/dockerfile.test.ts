/**
 * The Dockerfile's properties, checked by parsing it (no Docker engine runs here; .ci/run also
 * rehearses the build stage's commands): multi-stage, dev dependencies only in the build stage, a slim
 * Node 24 base, NODE_ENV=production, a non-root user, exec-form entrypoint `modelgate serve`, no
 * secrets, and a .dockerignore that keeps secrets and bulk out of the context.
 */
import { describe, expect, it } from '@jest/globals';
import { DockerfileParser, type Copy, type Instruction } from 'dockerfile-ast';
import { readFileSync } from 'node:fs';

const text = readFileSync(new URL('../Dockerfile', import.meta.url), 'utf8');
const dockerfile = DockerfileParser.parse(text);
const instructions = dockerfile.getInstructions();
const stages = dockerfile.getFROMs();
const finalStage = instructions.slice(instructions.indexOf(stages.at(-1) as unknown as Instruction));
const args = (i: Instruction): string => i.getArgumentsContent() ?? '';
const final = (keyword: string): Instruction[] => finalStage.filter((i) => i.getKeyword() === keyword);

describe('Dockerfile', () => {
  it('has a build stage and a final stage on a slim Node 24 base', () => {
    expect(stages).toHaveLength(2);
    for (const from of stages) expect(from.getImage()).toMatch(/^node:24-[a-z]+-slim$/);
    expect(stages[0]!.getBuildStage()).toBe('build');
  });

  it('installs dev dependencies only in the build stage and ships dist/ with production dependencies', () => {
    const buildRuns = instructions
      .slice(0, instructions.indexOf(stages[1] as unknown as Instruction))
      .filter((i) => i.getKeyword() === 'RUN')
      .map(args);
    expect(buildRuns.join('\n')).toMatch(/npm ci/);
    expect(buildRuns.join('\n')).toMatch(/npm prune --omit=dev/);
    expect(final('RUN')).toHaveLength(0);
    const copies = final('COPY') as Copy[];
    expect(copies.map(args)).toEqual(['/app/package.json ./', '/app/node_modules ./node_modules', '/app/dist ./dist']);
    expect(copies.map((c) => c.getFromFlag()?.getValue())).toEqual(['build', 'build', 'build']);
  });

  it('runs as a non-root user with NODE_ENV=production', () => {
    const user = final('USER').map(args);
    expect(user).toHaveLength(1);
    expect(user[0]).toMatch(/^[1-9]\d*(:[1-9]\d*)?$/);
    expect(final('ENV').map(args)).toContain('NODE_ENV=production');
  });

  it('starts `modelgate serve` in exec form, so node itself receives SIGTERM', () => {
    const [entrypoint] = final('ENTRYPOINT');
    const [cmd] = final('CMD');
    // no V8 flags here: `serve` adds its own (src/runtime.ts), however it is started
    expect(JSON.parse(args(entrypoint!))).toEqual(['node', 'dist/cli.js']);
    expect((JSON.parse(args(cmd!)) as string[])[0]).toBe('serve');
    expect(final('EXPOSE').map(args)).toEqual(['8080 9090']);
  });

  it('bakes in no secrets', () => {
    for (const i of instructions.filter((x) => ['ENV', 'ARG', 'LABEL'].includes(x.getKeyword()))) {
      expect(args(i)).not.toMatch(/key|token|secret|password|credential/i);
    }
    for (const i of instructions.filter((x) => ['COPY', 'ADD'].includes(x.getKeyword()))) expect(args(i)).not.toMatch(/keys|\.env|\.pem|kubeconfig/);
    expect(instructions.filter((x) => x.getKeyword() === 'ADD')).toHaveLength(0);
  });

  it('has a .dockerignore that excludes secrets, dependencies and build output', () => {
    const ignore = readFileSync(new URL('../.dockerignore', import.meta.url), 'utf8').split('\n');
    for (const entry of ['.git', 'node_modules', 'dist', '.env', '**/keys*.yaml', '**/*.pem', '.tools']) expect(ignore).toContain(entry);
  });
});
