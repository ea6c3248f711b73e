/**
 * ResponseLocations: where each stored response lives, bounded by count, least recently used forgotten
 * first; with shared records, written through to them and looked up there when not held here. And
 * RedisResponseRecords, the shared records, against a real redis-server.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { RedisResponseRecords } from '../../src/limits/redis-response-records.js';
import { ResponseLocations, type ResponseLocation, type SharedResponseRecords } from '../../src/balancer/response-locations.js';
import { redisClient } from '../../src/limits/redis-store.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

const at = (endpoint: string) => ({ pool: 'p', endpoint, owner: 'team-a' });

describe('ResponseLocations', () => {
  it('finds what it remembers and nothing else', () => {
    const where = new ResponseLocations(10);
    void where.remember('resp_1', at('e1'));
    expect(where.find('resp_1')).toEqual(at('e1'));
    expect(where.find('resp_2')).toBeUndefined();
  });

  it('forgets the least recently used id first when full; a lookup counts as use', () => {
    const where = new ResponseLocations(2);
    void where.remember('a', at('e1'));
    void where.remember('b', at('e2'));
    expect(where.find('a')).toEqual(at('e1')); // a is now the most recent
    void where.remember('c', at('e3'));
    expect(where.size).toBe(2);
    expect(where.find('b')).toBeUndefined();
    expect(where.find('a')).toEqual(at('e1'));
    expect(where.find('c')).toEqual(at('e3'));
  });

  it('remembering an id again moves it (a response regenerated elsewhere)', () => {
    const where = new ResponseLocations(2);
    void where.remember('a', at('e1'));
    void where.remember('a', at('e2'));
    expect(where.size).toBe(1);
    expect(where.find('a')).toEqual(at('e2'));
  });

  it('capacity 0 remembers nothing', () => {
    const where = new ResponseLocations(0);
    void where.remember('a', at('e1'));
    expect(where.find('a')).toBeUndefined();
    expect(where.size).toBe(0);
  });
});

/** Shared records in a Map, counting the calls; `down` makes loads reject as a store that does not answer. */
function sharedMap(): SharedResponseRecords & { records: Map<string, ResponseLocation>; loads: number; down: boolean } {
  return {
    records: new Map(),
    loads: 0,
    down: false,
    save(id, location) {
      this.records.set(id, location);
      return Promise.resolve(true);
    },
    load(id) {
      this.loads++;
      return this.down ? Promise.reject(new Error('Command timed out')) : Promise.resolve(this.records.get(id));
    },
  };
}

describe('ResponseLocations with shared records', () => {
  it("writes what it remembers through to the shared records, handing back the write's promise (none without them)", async () => {
    const shared = sharedMap();
    const written = new ResponseLocations(10, shared).remember('resp_1', at('e1'));
    expect(written).toBeInstanceOf(Promise);
    await written;
    expect(shared.records.get('resp_1')).toEqual(at('e1'));
    expect(new ResponseLocations(10).remember('resp_1', at('e1'))).toBeUndefined();
  });

  it('answers from its own record without asking the shared ones; looks up what it does not hold, and keeps it', async () => {
    const shared = sharedMap();
    const where = new ResponseLocations(10, shared);
    void where.remember('mine', at('e1'));
    expect(await where.lookup('mine')).toEqual({ location: at('e1') });
    expect(shared.loads).toBe(0);
    shared.records.set('theirs', { pool: 'p', endpoint: 'e2', owner: 'team-b' });
    expect(await where.lookup('theirs')).toEqual({ location: { pool: 'p', endpoint: 'e2', owner: 'team-b' } });
    expect(where.find('theirs')).toEqual({ pool: 'p', endpoint: 'e2', owner: 'team-b' });
    expect(await where.lookup('nobody')).toEqual({});
    expect(shared.loads).toBe(2);
  });

  it('says when the shared records did not answer: the id could not be checked', async () => {
    const shared = sharedMap();
    shared.down = true;
    expect(await new ResponseLocations(10, shared).lookup('resp_x')).toEqual({ unanswered: true });
  });

  it('capacity 0 neither writes nor asks the shared records', async () => {
    const shared = sharedMap();
    const where = new ResponseLocations(0, shared);
    expect(where.remember('a', at('e1'))).toBeUndefined();
    shared.records.set('b', at('e2'));
    expect(await where.lookup('b')).toEqual({});
    expect(shared.records.has('a')).toBe(false);
    expect(shared.loads).toBe(0);
  });
});

describe('RedisResponseRecords against a real redis-server', () => {
  let redis: RedisServer;
  let client: Redis;
  let reader: Redis;
  beforeAll(async () => {
    redis = await startRedisServer();
    client = redisClient({ url: redis.url, tls: false, timeoutMs: 1000 });
    reader = new Redis(redis.url);
    await Promise.all([client, reader].map((c) => new Promise((resolve) => c.once('ready', resolve))));
  });
  afterAll(async () => {
    client?.disconnect();
    reader?.disconnect();
    await redis?.stop();
  });

  it('reads back what it saved (the save settled once Redis has it), under the prefix and a hash of the id, with the lifetime it was given', async () => {
    const records = new RedisResponseRecords(client, { prefix: 'mg-test:', ttlSeconds: 3600 });
    expect(await records.save('resp_abc', { pool: 'llama', endpoint: 'http://10.0.0.1:8000', owner: 'team-a' })).toBe(true);
    expect(await reader.exists(records.key('resp_abc'))).toBe(1);
    expect(records.key('resp_abc')).toMatch(/^mg-test:resp:[\w-]{43}$/);
    expect(await records.load('resp_abc')).toEqual({ pool: 'llama', endpoint: 'http://10.0.0.1:8000', owner: 'team-a' });
    expect(await records.load('resp_other')).toBeUndefined();
    const ttl = await reader.ttl(records.key('resp_abc'));
    expect(ttl).toBeGreaterThan(3590);
    expect(ttl).toBeLessThanOrEqual(3600);
  });

  it('takes a value that is not its own record for no record', async () => {
    const records = new RedisResponseRecords(client, { prefix: 'mg-test:', ttlSeconds: 60 });
    for (const [id, value] of [
      ['resp_text', 'not json'],
      ['resp_object', '{"pool":"p"}'],
      ['resp_short', '["p","e"]'],
      ['resp_number', '["p","e",7]'],
    ] as const) {
      await reader.set(records.key(id), value);
      expect({ id, found: await records.load(id) }).toEqual({ id, found: undefined });
    }
  });

  it('a save Redis does not answer settles false at the time limit, without rejecting; the next ones answer false at once (still sent) until Redis answers a call again', async () => {
    let answering = false;
    let sets = 0;
    const stuck = {
      get: () => (answering ? Promise.resolve(null) : new Promise<string | null>(() => undefined)),
      set: () => {
        sets++;
        return answering ? Promise.resolve('OK' as const) : new Promise<'OK'>(() => undefined);
      },
    };
    const errors: string[] = [];
    const records = new RedisResponseRecords(stuck, { prefix: 'mg-test:', ttlSeconds: 60, timeoutMs: 20, onError: (op) => errors.push(op) });
    await expect(records.save('resp_stuck', at('e1'))).resolves.toBe(false);
    expect(errors).toEqual(['record']);
    // failing: a save answers false at once (one waiting for the stuck write would time this test out), its write still sent
    await expect(records.save('resp_next', at('e1'))).resolves.toBe(false);
    expect(sets).toBe(2);
    await expect(records.load('resp_stuck')).rejects.toThrow('timeoutMs');
    expect([...errors].sort()).toEqual(['lookup', 'record', 'record']); // resp_next's write timed out too
    answering = true;
    expect(await records.load('resp_stuck')).toBeUndefined(); // Redis answers again
    await expect(records.save('resp_back', at('e1'))).resolves.toBe(true);
  });

  it('a save refused at once (no connection) costs no wait and does not stop the next from being waited for', async () => {
    let connected = false;
    let release: () => void = () => undefined;
    const client = {
      get: () => Promise.resolve(null),
      set: () => (connected ? new Promise<'OK'>((resolve) => (release = () => resolve('OK'))) : Promise.reject(new Error("Stream isn't writeable and enableOfflineQueue options is false"))),
    };
    const records = new RedisResponseRecords(client, { prefix: 'mg-test:', ttlSeconds: 60, timeoutMs: 10_000 });
    await expect(records.save('resp_away', at('e1'))).resolves.toBe(false);
    connected = true;
    let settled = false;
    const next = records.save('resp_back', at('e1')).then((written) => ((settled = true), written));
    await new Promise((resolve) => setImmediate(resolve));
    expect(settled).toBe(false); // waits for its write: the one before failed fast, it did not hang
    release();
    expect(await next).toBe(true);
  });

  it('writes a record whose write failed once Redis answers a call again, so other routers find a response made while it was away', async () => {
    const stored = new Map<string, string>();
    let connected = false;
    const client = {
      get: (key: string) => (connected ? Promise.resolve(stored.get(key) ?? null) : Promise.reject(new Error("Stream isn't writeable and enableOfflineQueue options is false"))),
      set: (key: string, value: string) =>
        connected ? Promise.resolve(stored.set(key, value)).then(() => 'OK' as const) : Promise.reject(new Error("Stream isn't writeable and enableOfflineQueue options is false")),
    };
    const records = new RedisResponseRecords(client, { prefix: 'mg-test:', ttlSeconds: 60 });
    await expect(records.save('resp_made_while_away', at('e1'))).resolves.toBe(false);
    expect(records.unsavedCount).toBe(1);
    connected = true;
    await expect(records.load('resp_other')).resolves.toBeUndefined(); // Redis answers a call
    await new Promise((resolve) => setImmediate(resolve));
    expect(records.unsavedCount).toBe(0);
    // another router's records over the same Redis find it
    const other = new RedisResponseRecords(client, { prefix: 'mg-test:', ttlSeconds: 60 });
    await expect(other.load('resp_made_while_away')).resolves.toEqual(at('e1'));
  });

  it('rejects a load while Redis is away, and a save then settles without rejecting', async () => {
    const records = new RedisResponseRecords(client, { prefix: 'mg-test:', ttlSeconds: 60 });
    await redis.stop();
    await expect(records.save('resp_lost', at('e1'))).resolves.toBe(false);
    await expect(records.load('resp_lost')).rejects.toThrow();
  });
});
