/** Reading an engine's 404 as "I do not have the pool's servedModelName", and how often that is logged. */
import { describe, expect, it } from '@jest/globals';
import { servesNotModel } from '../../src/director/exchange.js';

const pool = { servedModelName: 'Llama-3-8B' };

describe('servesNotModel', () => {
  it("reads vLLM's and OpenAI's 404 for the pool's model", () => {
    expect(servesNotModel(pool, 'The model `Llama-3-8B` does not exist.')).toBe(true);
    expect(servesNotModel(pool, 'The model `Llama-3-8B` does not exist or you do not have access to it.')).toBe(true);
    expect(servesNotModel(pool, "model 'Llama-3-8B' not found")).toBe(true);
  });

  it("does not read a 404 that does not name the pool's model whole", () => {
    expect(servesNotModel(pool, 'Not Found')).toBe(false); // a path the engine lacks (FastAPI)
    expect(servesNotModel({ servedModelName: 'Not' }, 'Not Found')).toBe(false);
    expect(servesNotModel(pool, 'The model `Llama-3-8B-Instruct` does not exist.')).toBe(false);
    expect(servesNotModel(pool, 'The model `org/Llama-3-8B` does not exist.')).toBe(false);
    expect(servesNotModel(pool, 'Llama-3-8B says hello')).toBe(false);
  });

  it("leaves a Responses API id the request sent out, and a LoRA pool's 404 to the adapter's reading", () => {
    expect(servesNotModel(pool, "Response with id 'resp_Llama-3-8B' not found.", 'resp_Llama-3-8B')).toBe(false);
    expect(servesNotModel({ ...pool, adapter: { name: 'Llama-3-8B', baseModel: 'x' } }, 'The model `Llama-3-8B` does not exist.')).toBe(false);
  });
});
