/**
 * Where each Responses API answer is kept: the replica that made it stores it in its own memory
 * (vLLM, SGLang), so a follow-up naming it in `previous_response_id` must reach that replica. Bounded
 * by count: the least recently used ids are forgotten first. An id the router does not know is never
 * guessed at; the request is routed like any other. Each id also names the key that made it, so one
 * team cannot continue (and read) another team's stored conversation through the router.
 *
 * With shared records (`limits.redis`), every id remembered here is also written to Redis, and an id
 * this router does not hold is looked up there: a response made through another router replica, or
 * before this one restarted, is still pinned to its replica and still refused to other keys.
 */
import { type ResponseLocation, type SharedResponseRecords } from '../core/types.js';

export type { ResponseLocation, SharedResponseRecords };

/** What a lookup found: the record, and whether a store that should have been asked did not answer. */
export interface ResponseLookup {
  location?: ResponseLocation;
  /** The shared records did not answer: the id could not be checked. */
  unanswered?: true;
}

export class ResponseLocations {
  /** Insertion order is recency order: a lookup moves its id to the end. */
  private readonly where = new Map<string, ResponseLocation>();

  constructor(
    private readonly capacity: number,
    private readonly shared?: SharedResponseRecords,
  ) {}

  /**
   * Keeps the id's record here and, with shared records, writes it there too: the promise settles once
   * that write has (true when written; it never rejects). The relay holds the answer's last bytes until
   * then, so a follow-up the client sends the moment it has the answer, through any router, finds the record.
   */
  remember(id: string, location: ResponseLocation): Promise<boolean> | undefined {
    if (this.capacity === 0) return undefined;
    this.keep(id, location);
    return this.shared?.save(id, location);
  }

  /** This router's own record of the id (moved to most recently used). */
  find(id: string): ResponseLocation | undefined {
    const location = this.where.get(id);
    if (location) this.keep(id, location);
    return location;
  }

  /** This router's record of the id, else the shared one (then kept here too). */
  async lookup(id: string): Promise<ResponseLookup> {
    const own = this.find(id);
    if (own || !this.shared || this.capacity === 0) return own ? { location: own } : {};
    try {
      const location = await this.shared.load(id);
      if (!location) return {};
      this.keep(id, location);
      return { location };
    } catch {
      return { unanswered: true };
    }
  }

  get size(): number {
    return this.where.size;
  }

  private keep(id: string, location: ResponseLocation): void {
    this.where.delete(id);
    this.where.set(id, location);
    if (this.where.size > this.capacity) this.where.delete(this.where.keys().next().value as string);
  }
}
