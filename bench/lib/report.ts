/** Benchmark reports: bench/results/<name>.md (machine, versions, tables) and an SVG chart. */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';

export const RESULTS = new URL('../results/', import.meta.url).pathname.replace('/.bench/bench/', '/bench/');

/** First line a tool prints about its version (nginx prints it on stderr). */
function version(cmd: string, args: string[]): string {
  const run = spawnSync(cmd, args, { encoding: 'utf8' });
  if (run.error) return `${cmd}: not installed`;
  return `${run.stdout}${run.stderr}`.split('\n')[0]!.trim();
}

export function machine(): string[] {
  const cpu = os.cpus();
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url).pathname.replace('/.bench/', '/'), 'utf8')) as { version: string };
  return [
    `- machine: ${cpu[0]?.model ?? 'unknown CPU'}, ${cpu.length} cores, ${Math.round(os.totalmem() / 2 ** 30)} GiB, Linux ${os.release()}`,
    `- modelgate ${pkg.version}, Node ${process.version}`,
    `- run at ${new Date().toISOString()}`,
  ];
}

/** The commit measured, and whether src/ had uncommitted changes when dist/ was built. */
export function source(): string {
  const git = (...args: string[]): string => spawnSync('git', args, { encoding: 'utf8', cwd: new URL('../../', import.meta.url).pathname.replace('/.bench/', '/') }).stdout?.trim() ?? '';
  const commit = git('rev-parse', '--short', 'HEAD');
  if (!commit) return '- source: not a git checkout';
  const dirty = git('status', '--porcelain', '--', 'src').split('\n').filter(Boolean).length;
  return `- source: commit ${commit}${dirty ? ` with ${dirty} uncommitted file(s) in src/` : ''}`;
}

export function tools(): string[] {
  return [`- ${version('nginx', ['-v'])}`, `- ${version('haproxy', ['-v'])}`];
}

export function table(header: string[], rows: Array<Array<string | number>>): string {
  const cell = (v: string | number): string => (typeof v === 'number' ? (Number.isInteger(v) ? String(v) : v.toFixed(v < 10 ? 2 : 1)) : v);
  return [`| ${header.join(' | ')} |`, `| ${header.map(() => '---').join(' | ')} |`, ...rows.map((r) => `| ${r.map(cell).join(' | ')} |`)].join('\n');
}

export interface BarGroup {
  label: string;
  values: Array<{ name: string; value: number }>;
}

/** A grouped bar chart as SVG: one group per label, one bar per series. */
export function barChart(title: string, unit: string, groups: BarGroup[]): string {
  const series = [...new Set(groups.flatMap((g) => g.values.map((v) => v.name)))];
  const colours = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#edc948', '#b07aa1'];
  const max = Math.max(1e-9, ...groups.flatMap((g) => g.values.map((v) => v.value)));
  const barW = 18;
  const groupW = series.length * barW + 24;
  // legend: up to four series a row, each column wide enough for the longest name (~6.5 px a character)
  const legendW = Math.max(150, Math.ceil(Math.max(0, ...series.map((n) => n.length)) * 6.5) + 24);
  const width = Math.max(420, 70 + groups.length * groupW + 20, 10 + Math.min(4, series.length) * legendW);
  const height = 320;
  const plotH = 220;
  const y = (v: number): number => 40 + plotH - (v / max) * plotH;
  const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;');
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height + 20 * Math.ceil(series.length / 4)}" font-family="sans-serif" font-size="11">`,
    `<text x="10" y="20" font-size="14" font-weight="bold">${esc(title)}</text>`,
    `<line x1="60" y1="${40 + plotH}" x2="${width - 10}" y2="${40 + plotH}" stroke="#333"/>`,
    `<text x="10" y="44">${esc(max.toPrecision(3))} ${esc(unit)}</text>`,
    `<text x="10" y="${40 + plotH}">0</text>`,
  ];
  groups.forEach((g, gi) => {
    const x0 = 70 + gi * groupW;
    g.values.forEach((v) => {
      const si = series.indexOf(v.name);
      const x = x0 + si * barW;
      parts.push(
        `<rect x="${x}" y="${y(v.value)}" width="${barW - 3}" height="${40 + plotH - y(v.value)}" fill="${colours[si % colours.length]}"><title>${esc(`${g.label} ${v.name}: ${v.value.toPrecision(4)} ${unit}`)}</title></rect>`,
      );
    });
    parts.push(`<text x="${x0}" y="${40 + plotH + 16}">${esc(g.label)}</text>`);
  });
  series.forEach((name, si) => {
    const lx = 10 + (si % 4) * legendW;
    const ly = height + Math.floor(si / 4) * 20;
    parts.push(`<rect x="${lx}" y="${ly - 10}" width="10" height="10" fill="${colours[si % colours.length]}"/><text x="${lx + 14}" y="${ly}">${esc(name)}</text>`);
  });
  parts.push('</svg>');
  return parts.join('\n') + '\n';
}

/** Writes a report and its chart; a smoke run (BENCH_OUT set) writes elsewhere, so committed reports stay. */
export function write(name: string, markdown: string, svg: string): { md: string; svg: string } {
  const dir = process.env.BENCH_OUT ?? RESULTS;
  mkdirSync(dir, { recursive: true });
  const md = join(dir, `${name}.md`);
  const chart = join(dir, `${name}.svg`);
  writeFileSync(md, markdown);
  writeFileSync(chart, svg);
  return { md, svg: chart };
}

export function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

/** Several charts one above the other in one SVG image. */
export function stack(svgs: string[]): string {
  let y = 0;
  let width = 0;
  const parts: string[] = [];
  for (const svg of svgs) {
    const w = Number(/width="(\d+)"/.exec(svg)?.[1] ?? 0);
    const h = Number(/height="(\d+)"/.exec(svg)?.[1] ?? 0);
    parts.push(svg.replace('<svg ', `<svg y="${y}" `));
    y += h + 10;
    width = Math.max(width, w);
  }
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${y}">\n<rect width="100%" height="100%" fill="white"/>\n${parts.join('')}</svg>\n`;
}

export interface Summary {
  requests: number;
  errors: number;
  /** Completed requests per second over the measured window. */
  rps: number;
  ttfb: { p50: number; p99: number };
  ttlb: { p50: number; p99: number };
  /** SSE events received per second over the window. */
  eventsPerSecond: number;
}

export function summarize(samples: ReadonlyArray<{ status: number; ttfbMs: number; ttlbMs: number; events: number }>, windowMs: number): Summary {
  const ok = samples.filter((s) => s.status === 200 && s.ttfbMs >= 0);
  const ttfb = ok.map((s) => s.ttfbMs).sort((a, b) => a - b);
  const ttlb = ok.map((s) => s.ttlbMs).sort((a, b) => a - b);
  return {
    requests: samples.length,
    errors: samples.length - ok.length,
    rps: (ok.length * 1000) / windowMs,
    ttfb: { p50: percentile(ttfb, 0.5), p99: percentile(ttfb, 0.99) },
    ttlb: { p50: percentile(ttlb, 0.5), p99: percentile(ttlb, 0.99) },
    eventsPerSecond: (ok.reduce((n, s) => n + s.events, 0) * 1000) / windowMs,
  };
}

export const SMOKE = process.env.BENCH_SMOKE === '1';

/** Busy CPU time of the whole machine and of this process with all its children, living and reaped (seconds). */
function cpuNow(): { machine: number; ours: number } {
  const hz = 100;
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal: busy is all but idle and iowait
  const machineTicks = fields.slice(0, 8).reduce((a, b) => a + b, 0) - fields[3]! - fields[4]!;
  const children = new Map<number, number[]>();
  const times = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const raw = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const stat = raw.slice(raw.lastIndexOf(')') + 2).split(' ');
      // ppid [1]; utime [11], stime [12], cutime [13], cstime [14] (reaped children's time lands in the parent's c*time)
      children.set(Number(stat[1]), [...(children.get(Number(stat[1])) ?? []), Number(entry)]);
      times.set(Number(entry), Number(stat[11]) + Number(stat[12]) + Number(stat[13]) + Number(stat[14]));
    } catch {
      // gone meanwhile
    }
  }
  let ours = 0;
  const todo = [process.pid];
  for (let i = 0; i < todo.length; i++) {
    ours += times.get(todo[i]!) ?? 0;
    todo.push(...(children.get(todo[i]!) ?? []));
  }
  return { machine: machineTicks / hz, ours: ours / hz };
}

/**
 * Measures how busy the rest of the machine was: call it, run something, call the returned function
 * for the CPU other processes (not this benchmark nor its children) used meanwhile, in cores on
 * average (1 = one core busy all along).
 */
export function othersCpu(): () => number {
  const t0 = performance.now();
  const a = cpuNow();
  return () => {
    const b = cpuNow();
    const seconds = (performance.now() - t0) / 1000;
    return seconds > 0 ? Math.max(0, b.machine - a.machine - (b.ours - a.ours)) / seconds : 0;
  };
}
