/**
 * The simulator's LoRA adapters over real sockets, in vLLM's shapes: serving by adapter name, 404 for an
 * unknown one, /v1/load_lora_adapter and /v1/unload_lora_adapter, /v1/models, the adapter slots and
 * their load time.
 */
import { describe, expect, it } from '@jest/globals';
import { parseSimArgs, SimOptionsError } from '../../src/sim/options.js';
import { type SimServer } from '../../src/sim/server.js';
import { simsClosedAfterEach, waitFor } from '../helpers/sim.js';

const sim = simsClosedAfterEach({ model: ['base'] });

const post = (s: SimServer, path: string, body: unknown): Promise<Response> =>
  fetch(`${s.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
const chat = (s: SimServer, model: string): Promise<Response> => post(s, '/v1/chat/completions', { model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });

describe('simulator LoRA adapters', () => {
  it('serves an adapter by name and answers 404 for an unknown one, like vLLM', async () => {
    const s = await sim({ loraAdapters: ['sql,support'], maxLora: 2 });
    const ok = await chat(s, 'support');
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as { model: string }).model).toBe('support');
    const missing = await chat(s, 'legal');
    expect(missing.status).toBe(404);
    expect(await missing.json()).toEqual({ error: { message: 'The model `legal` does not exist.', type: 'NotFoundError', param: 'model', code: 404 } });
  });

  it('lists adapters in /v1/models with the base model as parent', async () => {
    const s = await sim({ loraAdapters: ['sql'] });
    const body = (await (await fetch(`${s.url}/v1/models`)).json()) as { data: Array<{ id: string; root: string; parent: string | null; max_model_len: number | null }> };
    expect(body.data.map(({ id, root, parent, max_model_len }) => ({ id, root, parent, max_model_len }))).toEqual([
      { id: 'base', root: 'base', parent: null, max_model_len: 8192 },
      { id: 'sql', root: 'sql', parent: 'base', max_model_len: null },
    ]);
  });

  it("loads and unloads adapters at run time, with vLLM's answers and errors", async () => {
    const s = await sim({ loraLoadMs: 0 });
    const loaded = await post(s, '/v1/load_lora_adapter', { lora_name: 'legal', lora_path: '/adapters/legal' });
    expect([loaded.status, await loaded.text()]).toEqual([200, "Success: LoRA adapter 'legal' added successfully."]);
    expect((await chat(s, 'legal')).status).toBe(200);
    const twice = await post(s, '/v1/load_lora_adapter', { lora_name: 'legal', lora_path: '/adapters/legal' });
    expect([twice.status, ((await twice.json()) as { error: { message: string } }).error.message]).toEqual([400, "The lora adapter 'legal' has already been loaded."]);
    const incomplete = await post(s, '/v1/load_lora_adapter', { lora_name: 'x' });
    expect([incomplete.status, ((await incomplete.json()) as { error: { message: string } }).error.message]).toEqual([400, "Both 'lora_name' and 'lora_path' must be provided."]);
    const unloaded = await post(s, '/v1/unload_lora_adapter', { lora_name: 'legal' });
    expect([unloaded.status, await unloaded.text()]).toEqual([200, "Success: LoRA adapter 'legal' removed successfully."]);
    expect((await chat(s, 'legal')).status).toBe(404);
    const unknown = await post(s, '/v1/unload_lora_adapter', { lora_name: 'legal' });
    expect([unknown.status, ((await unknown.json()) as { error: { type: string } }).error.type]).toEqual([404, 'NotFoundError']);
    expect((await fetch(`${s.url}/v1/load_lora_adapter`)).status).toBe(405);
  });

  it('holds --max-lora adapters at once: a request for another waits for a slot, then for the load', async () => {
    const s = await sim({ loraAdapters: ['a', 'b'], maxLora: 1, loraLoadMs: 150, itlMs: 30, outputMin: 6, outputMax: 6 });
    const started = Date.now();
    const first = chat(s, 'a'); // resident from the start: no wait
    await waitFor(() => s.lora.info().running.includes('a'), 'a running');
    const second = chat(s, 'b');
    await waitFor(() => s.lora.info().waiting.includes('b'), 'b waiting');
    expect((await fetch(`${s.url}/metrics`).then((r) => r.text())).match(/^vllm:lora_requests_info\{.*$/m)?.[0]).toMatch(/max_lora="1",running_lora_adapters="a",waiting_lora_adapters="b"/);
    expect((await first).status).toBe(200);
    const firstDone = Date.now() - started;
    expect((await second).status).toBe(200);
    // b waited for a's request to end, then for its own load
    expect(Date.now() - started).toBeGreaterThanOrEqual(firstDone + 140);
    expect(s.lora.stats()).toMatchObject({ hits: 1, misses: 1, loads: 1, resident: [{ name: 'b', state: 'ready', active: 0 }] });
    const again = Date.now();
    expect((await chat(s, 'b')).status).toBe(200);
    expect(Date.now() - again).toBeLessThan(140); // resident now: no load
  });

  it('does not let a busy adapter starve a waiting one: it is drained, then swapped', async () => {
    const s = await sim({ loraAdapters: ['a', 'b'], maxLora: 1, loraLoadMs: 20, itlMs: 20, outputMin: 4, outputMax: 4 });
    const early = chat(s, 'a');
    await waitFor(() => s.lora.info().running.includes('a'), 'a running');
    const waiting = chat(s, 'b');
    await waitFor(() => s.lora.numWaiting === 1, 'b waiting');
    const late = chat(s, 'a'); // a is draining for b: this one waits behind b
    expect((await Promise.all([early, waiting, late])).map((r) => r.status)).toEqual([200, 200, 200]);
    expect(s.lora.stats().loads).toBe(2); // b swapped in, then a again
  });

  it('checks the LoRA flags', () => {
    expect(parseSimArgs(['--lora-adapters', 'a,b', '--lora-adapters', 'c', '--max-lora', '2']).loraAdapters).toEqual(['a,b', 'c']);
    expect(() => parseSimArgs(['--lora-adapters', 'a,a'])).toThrow(new SimOptionsError('--lora-adapters: an adapter is listed twice'));
    expect(() => parseSimArgs(['--lora-adapters', 'sim-model'])).toThrow(/also a --model name/);
    expect(() => parseSimArgs(['--max-lora', '0'])).toThrow(/--max-lora must be an integer from 1 to 256/);
  });
});
