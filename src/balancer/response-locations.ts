/**
 * Where each Responses API answer is kept: the replica that made it stores it in its own memory
 * (vLLM, SGLang), so a follow-up naming it in `previous_response_id` must reach that replica. Bounded
 * by count: the least recently used ids are forgotten first. An id the router does not know is never
 * guessed at; the request is routed like any other. Each id also names the key that made it, so one
 * team cannot continue (and read) another team's stored conversation through the router.
 */
export interface ResponseLocation {
  pool: string;
  endpoint: string;
  /** The API key (its name) whose request made the response: only it may continue it. */
  owner: string;
}

export class ResponseLocations {
  /** Insertion order is recency order: a lookup moves its id to the end. */
  private readonly where = new Map<string, ResponseLocation>();

  constructor(private readonly capacity: number) {}

  remember(id: string, location: ResponseLocation): void {
    if (this.capacity === 0) return;
    this.where.delete(id);
    this.where.set(id, location);
    if (this.where.size > this.capacity) this.where.delete(this.where.keys().next().value as string);
  }

  find(id: string): ResponseLocation | undefined {
    const location = this.where.get(id);
    if (location) {
      this.where.delete(id);
      this.where.set(id, location);
    }
    return location;
  }

  get size(): number {
    return this.where.size;
  }
}
