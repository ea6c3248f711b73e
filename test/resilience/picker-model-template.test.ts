/**
 * The picker in a pool with `kvEvents.tokenizer: huggingface`: the prompt's blocks come from the
 * engine's own rendering (`KvPrefixSource.promptText`), so the events answer in their key space; a
 * request the template cannot render (here: no engine text) is matched by the estimate for that pick,
 * its blocks being of the router's text, which the events do not speak.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { InFlight } from '../../src/balancer/in-flight.js';
import { promptBlocks } from '../../src/balancer/prefix-index.js';
import { type Endpoint, type KvPrefixSource, type PoolSpec, type PromptSource } from '../../src/core/types.js';
import { AdmissionQueues } from '../../src/resilience/admission.js';
import { BreakerRegistry } from '../../src/resilience/breaker.js';
import { EndpointPicker, type PrefixSource } from '../../src/resilience/picker.js';
import { FakeTime } from '../helpers/fake-time.js';
import { chatPool } from '../helpers/pool-spec.js';

const ENGINE_TEXT = '<|im_start|>user\n' + 'Which aisle has the wood glue that sets fast? '.repeat(8) + '<|im_end|>\n<|im_start|>assistant\n';
const OWN_TEXT = 'user\n' + 'Which aisle has the wood glue that sets fast? '.repeat(8) + '\n';

const pool: PoolSpec = chatPool({ kvEvents: { enabled: true, tokenizer: 'huggingface', tokenizerDir: '/t' } });
const endpoints: Endpoint[] = ['a', 'b'].map((id) => ({ id, pool: 'p', url: new URL(`http://${id}.local:8000`), weight: 1 }));

const registries: BreakerRegistry[] = [];
afterEach(() => {
  for (const r of registries.splice(0)) r.shutdown();
});

/** Replica b's engine holds the engine text's blocks (complete events); the hub renders chats only. */
function setup(): { picker: EndpointPicker; predicted: Array<[PrefixSource, number]>; asked: PromptSource[] } {
  const time = new FakeTime();
  const held = new Set(promptBlocks(ENGINE_TEXT, 64, 256));
  const asked: PromptSource[] = [];
  const kvPrefix: KvPrefixSource = {
    state: () => 2,
    match: (_pool, id, blocks) => {
      let n = 0;
      while (id === 'b' && n < blocks.length && held.has(blocks[n] as number)) n++;
      return n;
    },
    promptText: (_pool, prompt) => {
      asked.push(prompt);
      return prompt.api === 'chat' ? ENGINE_TEXT : undefined;
    },
  };
  const breakers = new BreakerRegistry(undefined, time);
  registries.push(breakers);
  const predicted: Array<[PrefixSource, number]> = [];
  const picker = new EndpointPicker({
    endpoints: { snapshot: () => endpoints },
    inFlight: new InFlight(),
    breakers,
    health: { isHealthy: () => true },
    admission: new AdmissionQueues(time, () => time.now()),
    kvPrefix,
    random: () => 0,
    events: { onPrefixPredicted: (_pool, source, matched) => predicted.push([source, matched]) },
    scheduler: time,
  });
  return { picker, predicted, asked };
}

describe('EndpointPicker with a pool rendering prompts by the model template', () => {
  it("matches the engine's text against the events and picks the replica holding it", async () => {
    const { picker, predicted, asked } = setup();
    const body = { messages: [{ role: 'user', content: 'x' }] };
    const picked = await picker.pick(pool, new Set(), undefined, { priority: 'standard', promptText: () => OWN_TEXT, prompt: { api: 'chat', body } });
    expect(picked.endpoint.id).toBe('b');
    expect(predicted).toEqual([['events', Math.floor(ENGINE_TEXT.length / 64)]]);
    expect(asked).toEqual([{ api: 'chat', body }]);
    picked.release();
  });

  it('routes by the estimate a request the template cannot render (its blocks are not in the events’ key space)', async () => {
    const { picker, predicted } = setup();
    const picked = await picker.pick(pool, new Set(), undefined, { priority: 'standard', promptText: () => ENGINE_TEXT, prompt: { api: 'responses', body: {} } });
    // the same text as b holds, but not the engine's rendering of this request: the events are not asked
    expect(predicted).toEqual([['estimate', 0]]);
    picked.release();
  });
});
