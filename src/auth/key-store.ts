/**
 * API keys, held only as SHA-256 digests. A presented key is hashed and its digest looked up in a map
 * of the keys' digests: one lookup whatever the number of keys. Comparing it with every digest in turn
 * (`timingSafeEqual`, as earlier versions did) cost every request without a remembered key, a wrong
 * key's included, time in proportion to the keys: 70 µs with 1,000 keys, 0.9 ms with 10,000, so a
 * flood of made-up keys stalled every tenant's requests. The lookup's time depends only on the
 * presented key's digest, which its sender knows already: it says nothing about which key exists or
 * how much of one matched (a digest shares no prefix with its key, and a digest is no key). The keys file is re-read when it changes (stat polling follows the
 * symlink swap Kubernetes uses to update a mounted Secret); a bad file keeps the last good keys.
 *
 * A kept-alive connection remembers the key it last authenticated with (`authenticateOn`): the
 * requests after the first on it compare the key they present with that one in constant time and
 * skip the hash. The hash was the largest step of the router's own latency at 500 requests/s (about
 * 15 µs of a process woken from sleep, against 2–3 for the comparison; bench/results/path.md). The
 * key's bytes are held on the connection while it lives (its requests hold them anyway) and are
 * never logged; a reload of the keys file forgets every remembered key, so a removed key is refused
 * on the next request, whichever connection it comes on.
 */
import { createHmac, hash, timingSafeEqual } from 'node:crypto';
import { unwatchFile, watchFile, type Stats } from 'node:fs';
import { readKeysFile, type KeyEntry } from '../config/keys-file.js';
import { type KeyLimitFields } from '../limits/settings.js';
import { type Priority } from '../core/types.js';

/** The caller, once authenticated. */
export interface Principal {
  name: string;
  /** undefined: every model. */
  models: ReadonlySet<string> | undefined;
  /** The class of this key's requests (a header may lower it, never raise it). */
  priority: Priority;
  /** Fair-share weight when requests queue. */
  weight: number;
  /** The key's own limits (the config's defaults fill what it leaves out). */
  limits?: KeyLimitFields;
  /**
   * The key's prefix-cache salt (`routing.prefix.isolateKeys`): made from its digest, so every router
   * replica gives a key the same salt and no other key can know it (a key name is no secret).
   */
  cacheSalt: string;
}

interface StoredKey {
  digest: Buffer;
  principal: Principal;
}

/** What a connection remembers: the key it last authenticated with, whose it is, and of which load of the keys file. */
interface Remembered {
  key: Uint8Array;
  principal: Principal;
  generation: number;
}

/** Where a connection (the request's socket) holds its {@link Remembered} key. */
const REMEMBERED = Symbol('modelgate.authenticated');
type Connection = object & { [REMEMBERED]?: Remembered };
/**
 * Encodes a remembered key into memory of its own: a small `Buffer.from` is a slice of a shared pool
 * (64 KiB in Node 24), which a key kept for a connection's life would keep whole, with whatever else
 * was written there.
 */
const ownBytes = new TextEncoder();

export interface KeyStoreEvents {
  onReload?: (result: { ok: true; keys: number } | { ok: false; error: Error }) => void;
  /** The file was read and taken (at start-up and on each reload that succeeds): its entries. */
  onLoaded?: (entries: readonly KeyEntry[]) => void;
}

/** One-shot `crypto.hash` (no Hash object per request: it halved the cost of authenticating a request). */
export function sha256(text: string): Buffer {
  return hash('sha256', text, 'buffer');
}

/** The digest as the keys' map holds it: base64 text, made by the one-shot hash without a Buffer. */
const digestText = (key: string): string => hash('sha256', key, 'base64');

function toStored(entries: readonly KeyEntry[]): StoredKey[] {
  return entries.map((entry) => {
    const digest = entry.keySha256 ? Buffer.from(entry.keySha256, 'hex') : sha256(entry.key ?? '');
    return {
      digest,
      principal: {
        name: entry.name,
        models: !entry.models || entry.models.includes('*') ? undefined : new Set(entry.models),
        priority: entry.priority ?? 'standard',
        weight: entry.weight ?? 1,
        ...(entry.limits ? { limits: entry.limits } : {}),
        cacheSalt: `modelgate-${createHmac('sha256', digest).update('modelgate prefix-cache salt').digest('hex').slice(0, 32)}`,
      },
    };
  });
}

/** The bearer token of an `Authorization` header, or undefined. */
export function bearerToken(header: string | undefined): string | undefined {
  if (!header) return undefined;
  const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header);
  return match?.[1];
}

export class KeyStore {
  private keys: StoredKey[] = [];
  /** Each key's principal by its digest (base64): {@link authenticate}'s one lookup. */
  private byDigest = new Map<string, Principal>();
  /** Counts loads of the keys file: a key a connection remembers from an earlier load is checked again. */
  private generation = 0;
  private watching = false;
  /** The reload under way (or the last one): each waits for the one before, so loads land in the order they began. */
  private reloading: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly file: string,
    private readonly events: KeyStoreEvents = {},
    /** Reads and checks the file (tests pass a slow one). */
    private readonly read: (file: string) => Promise<KeyEntry[]> = readKeysFile,
  ) {}

  get size(): number {
    return this.keys.length;
  }

  /** The names of the keys loaded now. */
  names(): Set<string> {
    return new Set(this.keys.map((k) => k.principal.name));
  }

  /** Loads the file; throws on a bad file (use at start-up, where a bad file must stop the process). */
  async load(): Promise<void> {
    const entries = await this.read(this.file);
    this.keys = toStored(entries);
    // digests are unique: the keys file refuses one key given two names (config/keys-file.ts)
    this.byDigest = new Map(this.keys.map((k) => [k.digest.toString('base64'), k.principal]));
    this.generation += 1;
    this.events.onLoaded?.(entries);
  }

  /**
   * Re-reads the file; on failure keeps the current keys and reports the error. A reload begins once
   * the one before it has ended: two that overlapped (the poll saw two changes while a read was slow)
   * could land out of order, the older read last, putting back a key the newer file had removed.
   */
  reload(): Promise<boolean> {
    const run = this.reloading.then(() => this.reloadNow());
    this.reloading = run;
    return run;
  }

  private async reloadNow(): Promise<boolean> {
    try {
      await this.load();
      this.events.onReload?.({ ok: true, keys: this.keys.length });
      return true;
    } catch (err) {
      this.events.onReload?.({ ok: false, error: err as Error });
      return false;
    }
  }

  /** Polls the file every `intervalMs` and reloads when its identity or mtime changes. */
  watch(intervalMs: number): void {
    if (this.watching) return;
    this.watching = true;
    watchFile(this.file, { interval: intervalMs, persistent: false }, (current: Stats, previous: Stats) => {
      if (current.mtimeMs === previous.mtimeMs && current.ino === previous.ino && current.size === previous.size) return;
      void this.reload();
    });
  }

  close(): void {
    if (this.watching) unwatchFile(this.file);
    this.watching = false;
  }

  /** The principal owning `key`, or undefined: its digest looked up, in the same time however many keys there are. */
  authenticate(key: string): Principal | undefined {
    return this.byDigest.get(digestText(key));
  }

  /**
   * As {@link authenticate}, for a request on `connection` (its socket): a key equal to the one the
   * connection last authenticated with, since the keys file was last loaded, is that key's principal
   * without hashing it. The comparison takes the same time whatever the presented key (a key of
   * another length is compared with itself instead), and a key that differs is authenticated in full.
   */
  authenticateOn(key: string, connection: object): Principal | undefined {
    const held = (connection as Connection)[REMEMBERED];
    if (held !== undefined && held.generation === this.generation) {
      const presented = Buffer.from(key, 'utf8');
      const sameLength = presented.length === held.key.length;
      if (timingSafeEqual(sameLength ? presented : held.key, held.key) && sameLength) return held.principal;
    }
    const principal = this.authenticate(key);
    if (principal) (connection as Connection)[REMEMBERED] = { key: ownBytes.encode(key), principal, generation: this.generation };
    return principal;
  }
}

/**
 * Whether `principal` may call a deployment that holds `names` (its ID, model name and aliases as the
 * registry gives them: `ModelCatalog.namesOf`). Only names the deployment holds count: in Kubernetes
 * mode a younger ModelDeployment that claims a name another holds (the same `metadata.name` in another
 * namespace, an alias) does not get it, and a key allowed that name must not reach the younger one
 * through its other names.
 */
export function mayUse(principal: Principal, names: readonly string[]): boolean {
  const allowed = principal.models;
  if (allowed === undefined) return true;
  return names.some((name) => allowed.has(name));
}
