/** vLLM's `vllm:lora_requests_info` read into the endpoint's sample: the latest series wins, names are split and trimmed. */
import { describe, expect, it } from '@jest/globals';
import { ENGINE_SERIES, loraLoad, readEngineLoad } from '../../src/engine-metrics/engine-maps.js';
import { scanLabelled } from '../../src/engine-metrics/parse.js';
import { renderMetrics } from '../../src/sim/metrics-text.js';
import { startTestSim } from '../helpers/sim.js';

const VLLM = ENGINE_SERIES.vllm!;
const LORA = VLLM.lora!;
const BASE = 'vllm:num_requests_running{engine="0",model_name="m"} 2.0\nvllm:num_requests_waiting{engine="0",model_name="m"} 1.0\n';

describe('vllm:lora_requests_info', () => {
  it('takes the series with the latest timestamp: older label sets linger in the exporter', () => {
    const page =
      BASE +
      '# HELP vllm:lora_requests_info Running stats on lora requests.\n# TYPE vllm:lora_requests_info gauge\n' +
      'vllm:lora_requests_info{max_lora="2",running_lora_adapters="old",waiting_lora_adapters=""} 1.7e+09\n' +
      'vllm:lora_requests_info{max_lora="2",running_lora_adapters="finance, support",waiting_lora_adapters="legal"} 1.789828498802105e+09\n' +
      'vllm:lora_requests_info{max_lora="2",running_lora_adapters="older",waiting_lora_adapters="x"} 1.6e+09\n';
    expect(readEngineLoad(VLLM, page)).toEqual({ waiting: 1, running: 2, lora: { running: ['finance', 'support'], waiting: ['legal'], maxLora: 2 } });
  });

  it('reads empty lists as no adapters, and keeps the slots', () => {
    const page = BASE + 'vllm:lora_requests_info{max_lora="4",running_lora_adapters="",waiting_lora_adapters=""} 1.7e+09\n';
    expect(readEngineLoad(VLLM, page)?.lora).toEqual({ running: [], waiting: [], maxLora: 4 });
  });

  it('merges data-parallel ranks: adapters united, slots added up', () => {
    const page =
      'vllm:lora_requests_info{engine="0",max_lora="2",running_lora_adapters="a",waiting_lora_adapters=""} 10\n' +
      'vllm:lora_requests_info{engine="1",max_lora="2",running_lora_adapters="a,b",waiting_lora_adapters="c"} 11\n' +
      'vllm:lora_requests_info{engine="1",max_lora="2",running_lora_adapters="stale",waiting_lora_adapters=""} 9\n';
    expect(loraLoad(page, LORA)).toEqual({ running: ['a', 'b'], waiting: ['c'], maxLora: 4 });
  });

  it('has no LoRA figures when the series is missing or unusable (not "no adapters")', () => {
    expect(readEngineLoad(VLLM, BASE)).toEqual({ waiting: 1, running: 2 });
    expect(loraLoad('vllm:lora_requests_info{max_lora="many",running_lora_adapters="a"} 1\n', LORA)).toBeUndefined();
    expect(loraLoad('vllm:lora_requests_info{max_lora="2",running_lora_adapters="a"\n', LORA)).toBeUndefined();
  });

  it('reads label values with escapes and the value after them', () => {
    expect(scanLabelled('x{a="q\\"}",b="2"} 3.5\nx{a="z"} NaN\n', 'x')).toEqual([
      {
        labels: new Map([
          ['a', 'q"}'],
          ['b', '2'],
        ]),
        value: 3.5,
      },
      { labels: new Map([['a', 'z']]), value: NaN },
    ]);
  });

  it('reads each sample within its own line: a label left open never reads on into the lines after it', () => {
    // A page of samples whose label set or value is never closed: read on into the next lines, each
    // sample read the rest of the page (quadratic: a 4 MiB page held the event loop for minutes).
    const lines = ['x{a="1"\n', 'x{a="2\n', 'x{abc\n', 'x{a="3"} 7\n'];
    const page = lines.join('').repeat(500);
    const samples = scanLabelled(page, 'x');
    expect(samples).toHaveLength(2000);
    expect(Math.max(...samples.map((s) => s.labels.size))).toBe(1);
    expect(samples.slice(0, 4)).toEqual([
      { labels: new Map([['a', '1']]), value: NaN },
      { labels: new Map(), value: NaN },
      { labels: new Map(), value: NaN },
      { labels: new Map([['a', '3']]), value: 7 },
    ]);
    expect(loraLoad('vllm:lora_requests_info{max_lora="2",running_lora_adapters="a\n'.repeat(100) + 'vllm:lora_requests_info{max_lora="2",running_lora_adapters="b"} 1\n', LORA)).toEqual({
      running: ['b'],
      waiting: [],
      maxLora: 2,
    });
  });

  it('reads what the simulator exports, adapters of waiting requests included', async () => {
    const sim = await startTestSim({ loraAdapters: ['a', 'b'], maxLora: 1, loraLoadMs: 50, itlMs: 20, outputMin: 10, outputMax: 10 });
    try {
      const ask = (model: string): Promise<Response> =>
        fetch(`${sim.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }) });
      const first = ask('a');
      await waitUntil(() => sim.lora.info().running.includes('a'));
      const second = ask('b'); // a holds the only slot: b waits
      await waitUntil(() => sim.lora.numWaiting === 1);
      const load = readEngineLoad(VLLM, renderMetrics(sim.engine, 'sim-model', 'vllm', sim.lora));
      expect(load?.lora).toEqual({ running: ['a'], waiting: ['b'], maxLora: 1 });
      expect(load?.waiting).toBe(1);
      expect((await first).status).toBe(200);
      expect((await second).status).toBe(200);
    } finally {
      await sim.close();
    }
  });
});

async function waitUntil(predicate: () => boolean): Promise<void> {
  const { waitFor } = await import('../helpers/sim.js');
  await waitFor(predicate, 'the simulator state');
}
