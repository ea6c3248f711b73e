/**
 * The hub with `kvEvents.tokenizer: huggingface`: a pool is subscribed only once its tokenizer
 * directory is loaded (then its events are read and its prompts rendered with the model's template);
 * a directory that fails is reported once and the pool is read as opaque (the estimate answers).
 * The transport is a stand-in that records what each subscription was given.
 */
import { describe, expect, it } from '@jest/globals';
import { copyFile, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { type Endpoint, type PoolSpec } from '../../src/core/types.js';
import { ReplicaFeed, type ReplicaFeedOptions } from '../../src/kv-events/feed.js';
import { loadHfModel, tokenizerStamp, type HfModel } from '../../src/kv-events/hf-tokenizer.js';
import { KvEventsHub, type FeedTransport } from '../../src/kv-events/hub.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';
import { FakeTime, flush } from '../helpers/fake-time.js';
import { waitFor } from '../helpers/sim.js';

const DIR = join(process.cwd(), 'test/fixtures/hf-tokenizer');

const pool = (tokenizerDir: string): PoolSpec => ({
  name: 'p',
  engine: 'vllm',
  servedModelName: 'm',
  capabilities: ['chat'],
  resilience: RESILIENCE_DEFAULTS,
  routing: { ...ROUTING_DEFAULTS, kvEvents: { ...ROUTING_DEFAULTS.kvEvents, enabled: true, tokenizer: 'huggingface', tokenizerDir } },
});

const endpoint = { id: 'e1', url: new URL('http://10.0.0.1:8000'), weight: 1 } as Endpoint; // the fields the hub reads

function hubWith(
  spec: PoolSpec | (() => PoolSpec[]),
  loadTokenizer: (dir: string) => Promise<HfModel>,
  stampTokenizer?: (dir: string) => Promise<string>,
): { hub: KvEventsHub; given: ReplicaFeedOptions[]; errors: string[]; time: FakeTime } {
  const time = new FakeTime();
  const given: ReplicaFeedOptions[] = [];
  const errors: string[] = [];
  const transport: FeedTransport = {
    ZmqFeed: class {
      readonly feed: ReplicaFeed;
      constructor(_target: unknown, options: Omit<ReplicaFeedOptions, 'replay'>) {
        given.push(options);
        this.feed = new ReplicaFeed(options);
        this.feed.connected();
      }
      close(): void {}
    },
  };
  const hub = new KvEventsHub({
    endpoints: { snapshot: () => [endpoint] },
    pools: typeof spec === 'function' ? spec : () => [spec],
    scheduler: time,
    now: () => time.now(),
    transport: () => Promise.resolve(transport),
    loadTokenizer,
    ...(stampTokenizer ? { stampTokenizer } : {}),
    events: { onError: (_pool, _ep, err) => errors.push(err.message) },
  });
  return { hub, given, errors, time };
}

describe('KvEventsHub with a huggingface tokenizer', () => {
  it("subscribes once the model is loaded, reads the events with it and renders the pool's prompts", async () => {
    let release: (model: HfModel) => void = () => undefined;
    const loading = new Promise<HfModel>((resolve) => (release = resolve));
    const { hub, given } = hubWith(pool(DIR), () => loading);
    hub.sync();
    await flush();
    expect(given).toHaveLength(0); // the transport is there, the model not yet
    expect(hub.promptText('p', { api: 'chat', body: { messages: [{ role: 'user', content: 'hi' }] } })).toBeUndefined();
    release(await loadHfModel(DIR));
    await flush();
    expect(given).toHaveLength(1);
    expect(given[0]?.readable).toBe(true);
    expect(given[0]?.reader).toBeDefined();
    expect(hub.promptText('p', { api: 'chat', body: { messages: [{ role: 'user', content: 'hi' }] } })).toBe('<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n');
    expect(hub.promptText('other', { api: 'chat', body: { messages: [] } })).toBeUndefined();
    hub.stop();
  });

  it("renders a pool's chat only within what its prefix scorer uses: a larger one is left to the estimate", async () => {
    const spec = pool(DIR);
    // 4 blocks of 8 characters used: the template is given at most 16 times 32 characters
    const small: PoolSpec = { ...spec, routing: { ...spec.routing, prefix: { ...spec.routing.prefix, maxBlocks: 4, blockChars: 8 } } };
    const { hub } = hubWith(small, loadHfModel);
    hub.sync();
    await waitFor(() => hub.promptText('p', { api: 'chat', body: { messages: [{ role: 'user', content: 'hi' }] } }) !== undefined, 'the model loaded');
    expect(hub.promptText('p', { api: 'chat', body: { messages: [{ role: 'user', content: 'z'.repeat(16 * 32 - 15) }] } })).toBeDefined();
    expect(hub.promptText('p', { api: 'chat', body: { messages: [{ role: 'user', content: 'z'.repeat(16 * 32 - 14) }] } })).toBeUndefined();
    hub.stop();
  });

  it('reports a directory that cannot be loaded once, and reads the pool as opaque', async () => {
    const { hub, given, errors } = hubWith(pool('/nowhere'), loadHfModel);
    hub.sync();
    // the failed read is a file system call: on a busy machine it takes more than a few turns of the loop
    await waitFor(() => given.length > 0, 'the pool read as opaque');
    hub.sync();
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatch(/cannot read \/nowhere\/tokenizer\.json \(ENOENT\)/);
    expect(given).toHaveLength(1);
    expect(given[0]?.readable).toBe(false);
    expect(hub.state('p', 'e1')).toBe(0);
    expect(hub.promptText('p', { api: 'chat', body: { messages: [] } })).toBeUndefined();
    hub.stop();
  });

  /** A copy of the fixture's files in a directory of its own, to break and mend. */
  async function copyDir(): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), 'modelgate-tokenizer-'));
    for (const file of ['tokenizer.json', 'tokenizer_config.json']) await copyFile(join(DIR, file), join(dir, file));
    return dir;
  }
  const hi = { api: 'chat', body: { messages: [{ role: 'user', content: 'hi' }] } };
  /** The files' stamps the hub asks for (each load or check starts with one): how many it asked, how many it got. */
  function stamps(): { asked: number; got: number; stamp: (dir: string) => Promise<string> } {
    const counts = {
      asked: 0,
      got: 0,
      stamp: (dir: string): Promise<string> => {
        counts.asked++;
        return tokenizerStamp(dir).finally(() => void counts.got++);
      },
    };
    return counts;
  }

  // regression: a directory that failed once stayed failed (and a loaded one stale) until the router restarted
  it('tries a directory that failed again after a backoff, and reads its pool once it loads', async () => {
    const dir = await copyDir();
    try {
      await writeFile(join(dir, 'tokenizer.json'), '{"not":');
      let loads = 0;
      const checks = stamps();
      const { hub, given, errors, time } = hubWith(pool(dir), (d) => (loads++, loadHfModel(d)), checks.stamp);
      hub.sync();
      await waitFor(() => given.length === 1, 'the pool read as opaque');
      expect(given[0]?.readable).toBe(false);
      expect(errors).toHaveLength(1);
      await copyFile(join(DIR, 'tokenizer.json'), join(dir, 'tokenizer.json')); // mended
      await time.advance(999);
      hub.sync();
      expect(checks.asked).toBe(1); // not tried before its backoff
      await time.advance(1);
      hub.sync();
      expect(checks.asked).toBe(2);
      await waitFor(() => given.length === 2, 'the pool subscribed again, read');
      expect(loads).toBe(2);
      expect(given[1]?.readable).toBe(true);
      expect(hub.promptText('p', hi)).toBe('<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n');
      hub.stop();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('reads a directory again when its files change (a ConfigMap updated in place), and subscribes its replicas again with the new model', async () => {
    const dir = await copyDir();
    try {
      let loads = 0;
      const checks = stamps();
      const { hub, given, time } = hubWith(pool(dir), (d) => (loads++, loadHfModel(d)), checks.stamp);
      hub.sync();
      await waitFor(() => hub.promptText('p', hi) !== undefined, 'the model loaded');
      const config = JSON.parse(await readFile(join(dir, 'tokenizer_config.json'), 'utf8')) as Record<string, unknown>;
      await writeFile(join(dir, 'tokenizer_config.json'), JSON.stringify({ ...config, chat_template: 'NEW {{ messages[0].content }}' }));
      await time.advance(9_999);
      hub.sync();
      expect(checks.asked).toBe(1); // not checked yet
      await time.advance(1);
      hub.sync();
      expect(checks.asked).toBe(2);
      await waitFor(() => hub.promptText('p', hi) === 'NEW hi', 'the new template read');
      await waitFor(() => given.length === 2, 'the replica subscribed again');
      expect(given[1]?.reader).not.toBe(given[0]?.reader);
      // unchanged files are checked, not read again
      await time.advance(10_000);
      hub.sync();
      expect(checks.asked).toBe(3);
      await waitFor(() => checks.got === 3, 'the third check');
      await flush();
      expect(loads).toBe(2);
      expect(given).toHaveLength(2);
      hub.stop();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('after a passing failure (the files briefly unreadable, then as they were) checks them at the usual pace again, not every second', async () => {
    let transient = false;
    let asked = 0;
    let answered = 0;
    const stamp = async (): Promise<string> => {
      asked++;
      await Promise.resolve();
      answered++;
      if (transient) throw new Error('gone for a moment');
      return 'as loaded';
    };
    const load = async (d: string): Promise<HfModel> => {
      if (transient) {
        transient = false;
        throw new Error('half-written');
      }
      return loadHfModel(d);
    };
    const { hub, errors, time } = hubWith(pool(DIR), load, stamp);
    hub.sync();
    await waitFor(() => hub.promptText('p', hi) !== undefined, 'the model loaded');
    const check = async (ms: number): Promise<void> => {
      await time.advance(ms);
      hub.sync();
      await waitFor(() => answered === asked, 'the check done');
      await flush();
    };
    transient = true;
    await check(10_000);
    expect(errors).toEqual(['half-written']); // retried after 1 s
    expect(asked).toBe(2);
    await check(1_000);
    expect(asked).toBe(3); // the files as they were: the model read stands
    await check(1_000);
    expect(asked).toBe(3); // and the next check is 10 s on, not 1 s
    await check(9_000);
    expect(asked).toBe(4);
    expect(hub.promptText('p', hi)).toBe('<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n');
    hub.stop();
  });

  it('drops a directory no pool names any more: named again, it is loaded again', async () => {
    let spec = pool(DIR);
    const loads: string[] = [];
    const { hub } = hubWith(
      () => [spec],
      (d) => (loads.push(d), loadHfModel(d)),
    );
    hub.sync();
    await waitFor(() => hub.promptText('p', hi) !== undefined, 'the model loaded');
    spec = pool('/elsewhere');
    hub.sync();
    await waitFor(() => loads.length === 2, 'the other directory tried');
    spec = pool(DIR);
    hub.sync();
    await waitFor(() => loads.length === 3, 'the first directory loaded again');
    expect(loads).toEqual([DIR, '/elsewhere', DIR]);
    hub.stop();
  });
});
