/**
 * The README's reference tables are generated from code tables, the Markdown documents link only
 * inside the repository, and docs/architecture.md matches src/: this keeps them from drifting.
 */
import { describe, expect, it } from '@jest/globals';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { configSchema } from '../src/config/schema.js';
import { ERROR_CODES } from '../src/core/errors.js';
import { BOUNDED_LABELS } from '../src/metrics/labels.js';
import { SIM_FLAGS } from '../src/sim/options.js';
import { RESILIENCE_DEFAULTS, resilienceOverridesSchema } from '../src/resilience/settings.js';
import { ROUTING_DEFAULTS, routingOverridesSchema } from '../src/balancer/settings.js';

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const kebab = (key: string): string => key.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase());

function simFlagsTable(): string {
  const rows = Object.entries(SIM_FLAGS).map(([key, spec]) => {
    const def = Array.isArray(spec.default) ? spec.default.join(',') : String(spec.default);
    return `| \`--${kebab(key)}\` | ${def === '' ? '(none)' : '`' + def + '`'} | ${spec.help.replaceAll('|', '\\|')} |`;
  });
  return ['| flag | default | meaning |', '| --- | --- | --- |', ...rows].join('\n');
}

describe('README', () => {
  it('lists every simulator flag with the default from SIM_FLAGS', () => {
    const between = readme.split('<!-- sim-flags:start -->\n')[1]?.split('\n<!-- sim-flags:end -->')[0];
    expect(between).toBe(simFlagsTable());
  });

  it('documents every config field', () => {
    const table = readme.split('<!-- config-fields:start -->')[1]?.split('<!-- config-fields:end -->')[0] ?? '';
    const paths: string[] = [];
    const walk = (schema: { properties?: Record<string, unknown>; items?: unknown }, prefix: string): void => {
      for (const [name, child] of Object.entries(schema.properties ?? {})) {
        const sub = child as { properties?: Record<string, unknown>; items?: { properties?: Record<string, unknown> } };
        if (child === resilienceOverridesSchema || child === routingOverridesSchema)
          paths.push(`${prefix}${name}`); // its fields have their own table
        else if (sub.properties) walk(sub, `${prefix}${name}.`);
        else if (sub.items?.properties && prefix === '') walk(sub.items, `${prefix}${name}[].`);
        else paths.push(`${prefix}${name}`);
      }
    };
    walk(configSchema, '');
    expect(paths.length).toBeGreaterThan(15);
    for (const path of paths) expect(table).toContain(`\`${path}\``);
  });

  it('gives each config field the default the schema fills in', () => {
    const table = readme.split('<!-- config-fields:start -->')[1]?.split('<!-- config-fields:end -->')[0] ?? '';
    const schemaAt = (path: string): { default?: unknown; type?: string } | undefined => {
      let node: unknown = configSchema;
      for (const step of path.replaceAll('[]', '').split('.')) {
        const here = node as { properties?: Record<string, unknown>; items?: { properties?: Record<string, unknown> } };
        node = (here.properties ?? here.items?.properties)?.[step];
        if (node === undefined) return undefined;
      }
      return node as { default?: unknown; type?: string };
    };
    const shown = (value: unknown): string => (Array.isArray(value) ? `[${value.join(', ')}]` : String(value));
    let compared = 0;
    for (const row of table.split('\n').filter((l) => l.startsWith('| `'))) {
      const [fields = '', defaults = ''] = row.split(' | ').map((c) => c.replace(/^\| /, ''));
      // a row whose default is only code spans, one per field, each a value the schema fills in
      if (!/^`[^`]*`(, `[^`]*`)*$/.test(defaults)) continue;
      const paths = [...fields.matchAll(/`([^`]+)`/g)].map((m) => m[1] as string);
      const values = [...defaults.matchAll(/`([^`]*)`/g)].map((m) => m[1] as string);
      if (paths.length !== values.length) continue;
      paths.forEach((path, i) => {
        const spec = schemaAt(path);
        // a switch the schema leaves unset is off (`resumeStreams`)
        const unset = spec?.type === 'boolean' ? 'false' : 'no default';
        expect([path, spec === undefined ? 'not in the schema' : 'default' in spec ? shown(spec.default) : unset]).toEqual([path, values[i]]);
        compared += 1;
      });
    }
    expect(compared).toBeGreaterThan(40);
  });

  it('names every part of src/ in the Development layout', () => {
    const layout = readme.split('## Development')[1]?.split('### Container image')[0] ?? '';
    const parts = readdirSync(join(fileURLToPath(new URL('../', import.meta.url)), 'src'), { withFileTypes: true })
      .filter((e) => e.isDirectory() || e.name.endsWith('.ts'))
      .map((e) => e.name);
    expect(parts.length).toBeGreaterThan(10);
    for (const part of parts) expect(layout).toContain(`\`src/${part}`);
  });

  it('names every value of every bounded metric label in the metrics table', () => {
    const table = readme.split('\n### Metrics\n')[1]?.split('\n### Logs\n')[0] ?? '';
    const rows = new Map(table.split('\n').flatMap((line) => (line.startsWith('| `modelgate_') ? [[line.slice(3, line.indexOf('`', 3)), line] as const] : [])));
    const missing: string[] = [];
    for (const [series, labels] of Object.entries(BOUNDED_LABELS)) {
      for (const [label, values] of Object.entries(labels)) {
        if (!Array.isArray(values)) continue; // a pattern (status codes, upstream_<status>)
        // the API names and Kubernetes kinds are listed once below the table, not in each row
        // the resumption reasons are listed in their own section, which the row links to
        const where =
          label === 'route' || label === 'kind'
            ? table
            : series === 'modelgate_stream_resumptions_total'
              ? (readme.split('\n### Streams that survive a dying replica\n')[1]?.split('\n## ')[0] ?? '')
              : (rows.get(series) ?? '');
        for (const value of values as readonly string[]) if (!where.includes(`\`${value}\``) && !where.includes(`${label}="${value}"`)) missing.push(`${series}{${label}="${value}"}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it('lists every resilience default with the value in RESILIENCE_DEFAULTS', () => {
    const table = readme.split('<!-- resilience-defaults:start -->')[1]?.split('<!-- resilience-defaults:end -->')[0] ?? '';
    const leaves: Array<[string, unknown]> = [];
    const walk = (value: object, prefix: string): void => {
      for (const [k, v] of Object.entries(value)) {
        if (typeof v === 'object' && v !== null) walk(v as object, `${prefix}${k}.`);
        else leaves.push([`${prefix}${k}`, v]);
      }
    };
    walk(RESILIENCE_DEFAULTS, '');
    expect(leaves.length).toBeGreaterThan(15);
    for (const [path, value] of leaves) expect(table).toContain(`| \`${path}\` | \`${String(value)}\` |`);
  });

  it('lists every routing default with the value in ROUTING_DEFAULTS', () => {
    const table = readme.split('<!-- routing-defaults:start -->')[1]?.split('<!-- routing-defaults:end -->')[0] ?? '';
    const profile = ROUTING_DEFAULTS.scorers.map((s) => `\`${s.name}\`×${s.weight}`).join(', ');
    expect(table).toContain(`| \`scorers\` | ${profile} |`);
    const { scorers: _profile, ...groups } = ROUTING_DEFAULTS;
    for (const [group, fields] of Object.entries(groups)) {
      for (const [field, value] of Object.entries(fields as object)) expect(table).toContain(`| \`${group}.${field}\` | \`${String(value)}\` |`);
    }
  });

  it('lists every error code the router can answer with', () => {
    for (const code of Object.keys(ERROR_CODES)) {
      if (code === 'INTERNAL_ERROR') continue;
      expect(readme).toContain(`\`${code.toLowerCase()}\``);
    }
  });

  it('gives each code in the Errors table the status ERROR_CODES answers it with', () => {
    const section = readme.split('\n### Errors\n')[1]?.split('\n## ')[0] ?? '';
    const rows: string[] = [];
    for (const line of section.split('\n')) {
      const row = /^\| ([\d /]+) \| ([^|]+) \|/.exec(line);
      if (!row) continue;
      const statuses = (row[1] as string).split(' / ').map((s) => s.trim());
      const codes = [...(row[2] as string).matchAll(/`([a-z_]+)`/g)].map((m) => m[1] as string);
      codes.forEach((code, i) => {
        const spec = (ERROR_CODES as Record<string, { status: number }>)[code.toUpperCase()];
        rows.push(`${statuses[statuses.length === 1 ? 0 : i]} ${code} (code: ${spec?.status ?? 'none'})`);
      });
    }
    expect(rows.length).toBeGreaterThan(25);
    expect(rows.filter((r) => !/^(\d+) \w+ \(code: \1\)$/.test(r))).toEqual([]);
  });

  it('shows the two commands a newcomer needs', () => {
    expect(readme).toContain('npm ci && npm start');
    expect(readme).toContain('npm test');
  });
});

/*
 * Links: the project's Markdown documents link only to their own headings and to files inside the
 * repository, never outside it (no `../` past the root, no http(s) targets). Fenced code blocks and
 * inline code are examples, not links.
 */
const REPO_ROOT = fileURLToPath(new URL('../', import.meta.url));
const linkedDocs = (): string[] => [
  'README.md',
  ...readdirSync(join(REPO_ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
  ...['bench/README.md', 'charts/modelgate/README.md', 'manifests/README.md'].filter((f) => existsSync(join(REPO_ROOT, f))),
];

/** The text outside fenced code blocks, one entry per line (fence and code lines blanked; inline code too unless kept). */
function proseLines(markdown: string, keepInlineCode = false): string[] {
  let fence: { char: string; length: number } | undefined;
  return markdown.split('\n').map((line) => {
    const marker = /^ {0,3}(`{3,}|~{3,})/.exec(line)?.[1];
    if (fence === undefined && marker !== undefined) {
      fence = { char: marker.charAt(0), length: marker.length };
      return '';
    }
    if (fence !== undefined) {
      if (marker !== undefined && marker.charAt(0) === fence.char && marker.length >= fence.length && line.trim() === marker) fence = undefined;
      return '';
    }
    return keepInlineCode ? line : line.replace(/(`+)(?:(?!\1)[\s\S])*?\1/g, 'code');
  });
}

/** GitHub's anchor for each heading: lower case, punctuation dropped, spaces to hyphens, repeats numbered. */
function headingAnchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const line of proseLines(markdown, true)) {
    const heading = /^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const base = heading
      .replaceAll('`', '')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

/** Every link target in the prose: inline links and images, reference definitions, autolinks, HTML href/src. */
function linkTargets(markdown: string): Array<{ line: number; target: string }> {
  const found: Array<{ line: number; target: string }> = [];
  proseLines(markdown).forEach((text, i) => {
    const onLine = new Set<string>();
    const add = (raw: string | undefined): void => {
      const target = raw?.replace(/^<|>$/g, '');
      if (target === undefined || onLine.has(target)) return;
      onLine.add(target);
      found.push({ line: i + 1, target });
    };
    for (const m of text.matchAll(/\]\(\s*(<[^>]*>|[^)\s]*)/g)) add(m[1]);
    add(/^ {0,3}\[[^\]]+\]:\s*(\S+)/.exec(text)?.[1]);
    for (const m of text.matchAll(/<((?:https?|ftp|mailto):[^>\s]*)>/gi)) add(m[1]);
    for (const m of text.matchAll(/\b(?:href|src)\s*=\s*["']([^"']*)["']/gi)) add(m[1]);
    for (const m of text.matchAll(/(?<![<("'=])\bhttps?:\/\/\S+/gi)) add(m[0]); // bare URLs, which GitHub links too
  });
  return found;
}

/** Why a link target is not allowed, or undefined when it is fine. */
function badLink(doc: string, target: string, anchorsOf: (file: string) => Set<string>): string | undefined {
  if (/^[a-z][a-z\d+.-]*:/i.test(target) || target.startsWith('//')) return 'points outside the repository';
  const [path = '', anchor] = target.split('#', 2);
  if (path === '') return anchor !== undefined && anchorsOf(doc).has(anchor) ? undefined : `no heading with the anchor #${anchor ?? ''}`;
  if (path.startsWith('/')) return 'is an absolute path; use a path relative to the document';
  const resolved = resolve(dirname(join(REPO_ROOT, doc)), decodeURIComponent(path));
  const inside = relative(REPO_ROOT, resolved);
  if (inside.startsWith('..') || isAbsolute(inside)) return 'leaves the repository';
  if (!existsSync(resolved)) return `names ${inside}, which does not exist`;
  if (anchor !== undefined && inside.endsWith('.md') && !anchorsOf(inside).has(anchor)) return `${inside} has no heading with the anchor #${anchor}`;
  return undefined;
}

/** `../` paths written in inline code (e.g. "see `../other/NOTES.md`"): a document naming a file must name one it ships with. */
function inlineCodePaths(markdown: string): Array<{ line: number; path: string }> {
  return proseLines(markdown, true).flatMap((text, i) =>
    [...text.matchAll(/(`+)([\s\S]*?)\1/g)].flatMap((span) => [...(span[2] ?? '').matchAll(/(?:^|[\s(=:'"])(\.\.\/[^\s'")]*)/g)].map((m) => ({ line: i + 1, path: m[1] ?? '' }))),
  );
}

describe('Markdown links', () => {
  it('finds links in prose and ignores code', () => {
    const sample = [
      'See [a](#x), ![b](img.png) and <https://example.com>.',
      '```sh',
      'curl [c](http://127.0.0.1:8080) # not a heading',
      '```',
      'Not `[d](../e)` nor `https://f`.',
      '[g]: https://g.h',
      'bare https://x.y/z',
    ].join('\n');
    expect(linkTargets(sample).map((l) => l.target)).toEqual(['#x', 'img.png', 'https://example.com', 'https://g.h', 'https://x.y/z']);
    expect(headingAnchors('# The simulated engine: `modelgate sim`\n## A\n## A')).toEqual(new Set(['the-simulated-engine-modelgate-sim', 'a', 'a-1']));
    const ownAnchors = (): Set<string> => new Set(['quick-start']);
    expect(badLink('README.md', '#quick-start', ownAnchors)).toBeUndefined();
    expect(badLink('README.md', 'docs/architecture.md', ownAnchors)).toBeUndefined();
    expect(badLink('docs/architecture.md', '../README.md', ownAnchors)).toBeUndefined();
    expect(badLink('README.md', '#nowhere', ownAnchors)).toMatch(/no heading/);
    expect(badLink('README.md', '../shared/ARCHITECTURE.md', ownAnchors)).toMatch(/leaves the repository/);
    expect(badLink('README.md', 'docs/missing.md', ownAnchors)).toMatch(/does not exist/);
    expect(badLink('README.md', 'https://example.com/', ownAnchors)).toMatch(/outside the repository/);
    expect(badLink('README.md', '/etc/passwd', ownAnchors)).toMatch(/absolute path/);
    expect(inlineCodePaths('Map: (`../shared/A.md`), `cd ../x`\n```\n`../in-a-fence`\n```').map((p) => p.path)).toEqual(['../shared/A.md', '../x']);
  });

  const anchors = new Map<string, Set<string>>();
  const anchorsOf = (file: string): Set<string> => {
    let set = anchors.get(file);
    if (!set) anchors.set(file, (set = headingAnchors(readFileSync(join(REPO_ROOT, file), 'utf8'))));
    return set;
  };

  it.each(linkedDocs())('%s links only to its own headings and to files inside the repository', (doc) => {
    const problems = linkTargets(readFileSync(join(REPO_ROOT, doc), 'utf8')).flatMap(({ line, target }) => {
      const why = badLink(doc, target, anchorsOf);
      return why === undefined ? [] : [`${doc}:${line}: ${target} ${why}`];
    });
    expect(problems).toEqual([]);
  });

  it.each(linkedDocs())('%s names no path outside the repository, even in inline code', (doc) => {
    const outside = inlineCodePaths(readFileSync(join(REPO_ROOT, doc), 'utf8')).filter(({ path }) => {
      const inside = relative(REPO_ROOT, resolve(dirname(join(REPO_ROOT, doc)), path));
      return inside.startsWith('..') || isAbsolute(inside);
    });
    expect(outside.map(({ line, path }) => `${doc}:${line}: ${path}`)).toEqual([]);
  });
});

/*
 * docs/architecture.md is the map of src/: it names every part (each folder and top-level file of
 * src/), and its import table is what the imports in src/ really are.
 */
const SRC = join(REPO_ROOT, 'src');
const architecture = readFileSync(join(REPO_ROOT, 'docs/architecture.md'), 'utf8');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

/** The part a source file belongs to: its top-level folder under src/, or the file itself. */
const partOf = (file: string): string => relative(SRC, file).split(sep)[0] ?? '';

interface PartImports {
  /** Part → whether any import of it is a value import (false: `import type` only). */
  parts: Map<string, boolean>;
  packages: Set<string>;
}

/** Every import of every part, read with the TypeScript parser (static, re-exports and dynamic `import()`). */
function actualImports(): Map<string, PartImports> {
  const byPart = new Map<string, PartImports>();
  for (const file of sourceFiles(SRC)) {
    const from = partOf(file);
    const entry = byPart.get(from) ?? { parts: new Map<string, boolean>(), packages: new Set<string>() };
    byPart.set(from, entry);
    const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
    const record = (specifier: string, typeOnly: boolean): void => {
      if (specifier.startsWith('node:')) return;
      if (!specifier.startsWith('.')) {
        entry.packages.add(
          specifier
            .split('/')
            .slice(0, specifier.startsWith('@') ? 2 : 1)
            .join('/'),
        );
        return;
      }
      const to = partOf(resolve(dirname(file), specifier.replace(/\.js$/, '.ts')));
      if (to !== from) entry.parts.set(to, (entry.parts.get(to) ?? false) || !typeOnly);
    };
    const visit = (node: ts.Node): void => {
      if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
        const clause = node.importClause;
        const named = clause?.namedBindings && ts.isNamedImports(clause.namedBindings) ? clause.namedBindings.elements : undefined;
        const typeOnly = clause !== undefined && (clause.isTypeOnly || (clause.name === undefined && named !== undefined && named.length > 0 && named.every((e) => e.isTypeOnly)));
        record(node.moduleSpecifier.text, typeOnly);
      } else if (ts.isExportDeclaration(node) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) {
        const named = node.exportClause && ts.isNamedExports(node.exportClause) ? node.exportClause.elements : undefined;
        record(node.moduleSpecifier.text, node.isTypeOnly || (named !== undefined && named.length > 0 && named.every((e) => e.isTypeOnly)));
      } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword && node.arguments[0] && ts.isStringLiteral(node.arguments[0])) {
        record(node.arguments[0].text, false);
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return byPart;
}

/** The import table of docs/architecture.md, in the same shape. */
function documentedImports(): Map<string, PartImports> {
  const table = architecture.split('<!-- imports:start -->')[1]?.split('<!-- imports:end -->')[0] ?? '';
  const byPart = new Map<string, PartImports>();
  for (const row of table.split('\n').filter((l) => l.startsWith('| `'))) {
    const [part = '', parts = '', packages = ''] = row
      .split('|')
      .slice(1, 4)
      .map((c) => c.trim());
    const names = (cell: string): string[] => [...cell.matchAll(/`([^`]+)`( \(types\))?/g)].map((m) => (m[2] ? `${m[1]} (types)` : (m[1] as string)));
    byPart.set(part.replaceAll('`', ''), {
      parts: new Map(names(parts).map((n) => [n.replace(' (types)', ''), !n.endsWith('(types)')])),
      packages: new Set(names(packages)),
    });
  }
  return byPart;
}

/** A stable, readable form of an import table for comparison: one line per part. */
const describeTable = (table: Map<string, PartImports>): string[] =>
  [...table]
    .map(([part, { parts, packages }]) => {
      const uses = [...parts].sort(([a], [b]) => a.localeCompare(b)).map(([p, value]) => (value ? p : `${p} (types)`));
      return `${part}: ${uses.join(', ') || '—'} | ${[...packages].sort().join(', ') || '—'}`;
    })
    .sort();

describe('docs/architecture.md', () => {
  const parts = readdirSync(SRC, { withFileTypes: true })
    .filter((e) => e.isDirectory() || e.name.endsWith('.ts'))
    .map((e) => e.name);

  it('names every folder and top-level file of src/', () => {
    expect(parts.length).toBeGreaterThan(10);
    for (const part of parts) expect(architecture).toContain(`src/${part}`);
  });

  it('has an import table that matches the imports in src/', () => {
    const actual = actualImports();
    expect(describeTable(documentedImports())).toEqual(describeTable(actual));
    expect([...actual.keys()].sort()).toEqual([...parts].sort());
  });

  /**
   * The layering rules the map states, as allow-lists: a part may import only these parts. A new
   * import outside them fails here by name, whatever the table says.
   */
  const LAYERS: Record<string, readonly string[]> = {
    core: [],
    api: ['core'],
    balancer: ['core'],
    registry: ['core'],
    metrics: ['core'],
    limits: ['core'],
    'engine-metrics': ['core'],
    'kv-events': ['core'],
    sim: ['core'],
    // discovery reads pools and endpoints as plain data; the pool resolver (config) applies the policy
    discovery: ['config', 'core', 'registry'],
    // moving bytes: no routing, no resilience policy, no server
    proxy: ['core'],
    // the director owns a request: planning, scheduling (through the picker), forwarding
    director: ['api', 'balancer', 'core', 'proxy', 'registry', 'resilience'],
    // the composition root's adapters: everything but the request path
    wiring: ['balancer', 'config', 'controller', 'core', 'discovery', 'limits', 'metrics', 'registry'],
    // the server parses, authenticates, checks the key's limits and hands over: it makes no routing decision
    server: ['api', 'auth', 'core', 'director', 'limits', 'metrics', 'proxy', 'registry'],
  };

  it.each(Object.entries(LAYERS))('%s imports only what its layer allows', (part, allowed) => {
    const imported = [...(actualImports().get(part)?.parts.keys() ?? [])];
    expect(imported.filter((p) => !allowed.includes(p))).toEqual([]);
  });

  it('describes a part graph without cycles, as it says', () => {
    const table = actualImports();
    const state = new Map<string, 'visiting' | 'done'>();
    const cycle = (part: string, path: string[]): string[] | undefined => {
      if (state.get(part) === 'done') return undefined;
      if (state.get(part) === 'visiting') return [...path, part];
      state.set(part, 'visiting');
      for (const next of table.get(part)?.parts.keys() ?? []) {
        const found = cycle(next, [...path, part]);
        if (found) return found;
      }
      state.set(part, 'done');
      return undefined;
    };
    for (const part of table.keys()) expect(cycle(part, [])).toBeUndefined();
  });
});
