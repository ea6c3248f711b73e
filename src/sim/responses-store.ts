/**
 * The Responses API objects one simulated replica produced, as vLLM keeps them (with
 * `VLLM_ENABLE_RESPONSES_API_STORE=1`): by id, in memory, for `previous_response_id` and
 * `GET /v1/responses/{id}`. Unlike vLLM, which never forgets, only the newest ones are kept.
 */

export interface StoredResponse {
  /** The response object exactly as it was sent. */
  body: object;
  /** The conversation so far as the prompt renders it: the input turns and the answer. */
  conversation: string;
}

export class ResponseStore {
  /** Insertion-ordered, so the first key is the oldest. */
  private readonly entries = new Map<string, StoredResponse>();

  constructor(private readonly capacity: number) {}

  get(id: string): StoredResponse | undefined {
    return this.entries.get(id);
  }

  set(id: string, response: StoredResponse): void {
    this.entries.set(id, response);
    for (const oldest of this.entries.keys()) {
      if (this.entries.size <= this.capacity) break;
      this.entries.delete(oldest);
    }
  }
}
