/** Reading an engine's error answer as "I do not have the pool's servedModelName", in each engine's words. */
import { describe, expect, it } from '@jest/globals';
import { servesNotModel } from '../../src/director/exchange.js';

const pool = { servedModelName: 'Llama-3-8B', engine: 'vllm' as const };
const llamacpp = { ...pool, engine: 'llamacpp' as const };
const sglang = { ...pool, engine: 'sglang' as const };

describe('servesNotModel', () => {
  it("reads vLLM's and OpenAI's 404 for the pool's model", () => {
    expect(servesNotModel(pool, 404, 'The model `Llama-3-8B` does not exist.')).toBe(true);
    expect(servesNotModel(pool, 404, 'The model `Llama-3-8B` does not exist or you do not have access to it.')).toBe(true);
    expect(servesNotModel(pool, 404, "model 'Llama-3-8B' not found")).toBe(true);
    expect(servesNotModel(pool, 404, 'model "Llama-3-8B" not found, try pulling it first')).toBe(true);
  });

  it("reads SGLang's 404, the model in single quotes (http_server.py retrieve_model's body, which its inference routes answer too)", () => {
    expect(servesNotModel(sglang, 404, "The model 'Llama-3-8B' does not exist")).toBe(true);
    expect(servesNotModel(sglang, 404, "The model 'Llama-3-8B-Instruct' does not exist")).toBe(false);
  });

  it("reads llama.cpp's router-mode 400 'model not found' from a llamacpp pool only: its message names no model", () => {
    expect(servesNotModel(llamacpp, 400, 'model not found')).toBe(true);
    expect(servesNotModel(llamacpp, 400, 'Model not found.')).toBe(true);
    // another engine's 400 in those words, or any other 400 of llama.cpp's, is the request's
    expect(servesNotModel(pool, 400, 'model not found')).toBe(false);
    expect(servesNotModel(llamacpp, 400, 'model is not loaded')).toBe(false);
    expect(servesNotModel(llamacpp, 400, 'model name is missing from the request')).toBe(false);
    expect(servesNotModel(llamacpp, 400, 'the request exceeds the available context size, try increasing it; model not found')).toBe(false);
    expect(servesNotModel(llamacpp, 404, 'model not found')).toBe(false);
  });

  it("does not read a 404 for a route the engine lacks, in any engine's words", () => {
    expect(servesNotModel(pool, 404, 'Not Found')).toBe(false); // vLLM and SGLang (FastAPI)
    expect(servesNotModel(sglang, 404, 'Not Found')).toBe(false);
    expect(servesNotModel(llamacpp, 404, 'File Not Found')).toBe(false); // llama.cpp's server
    expect(servesNotModel({ ...pool, engine: 'tgi' }, 404, 'The model server answered with status 404.')).toBe(false); // TGI: an empty body
    expect(servesNotModel({ servedModelName: 'Not', engine: 'vllm' }, 404, 'Not Found')).toBe(false);
    expect(servesNotModel({ servedModelName: 'File', engine: 'llamacpp' }, 404, 'File Not Found')).toBe(false);
  });

  it("does not read a 404 that does not name the pool's model whole, nor another status", () => {
    expect(servesNotModel(pool, 404, 'The model `Llama-3-8B-Instruct` does not exist.')).toBe(false);
    expect(servesNotModel(pool, 404, 'The model `org/Llama-3-8B` does not exist.')).toBe(false);
    expect(servesNotModel(pool, 404, 'Llama-3-8B says hello')).toBe(false);
    // unquoted, the name could be a word of the engine's own ("File Not Found" above): not read
    expect(servesNotModel(pool, 404, 'Model Llama-3-8B not found')).toBe(false);
    expect(servesNotModel(pool, 400, 'The model `Llama-3-8B` does not exist.')).toBe(false);
    expect(servesNotModel(pool, 500, 'The model `Llama-3-8B` does not exist.')).toBe(false);
  });

  it("leaves a Responses API id the request sent out, and a LoRA pool's 404 to the adapter's reading", () => {
    expect(servesNotModel(pool, 404, "Response with id 'resp_Llama-3-8B' not found.", 'resp_Llama-3-8B')).toBe(false);
    expect(servesNotModel({ ...pool, adapter: { name: 'Llama-3-8B', baseModel: 'x' } }, 404, 'The model `Llama-3-8B` does not exist.')).toBe(false);
    expect(servesNotModel({ ...llamacpp, adapter: { name: 'Llama-3-8B', baseModel: 'x' } }, 400, 'model not found')).toBe(false);
  });
});
