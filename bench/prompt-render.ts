/**
 * The request-side cost of `kvEvents.tokenizer: huggingface`: a ~3,000-token chat prompt (12,000
 * characters: three turns over a long system prompt, ~4 characters per token) rendered and cut into
 * the `prefix` scorer's chained block hashes, by the router's own rendering (every other pool) and by
 * the model's chat template (test/fixtures/hf-tokenizer, a ChatML template like Qwen's). Also the
 * event side: reading a 16-token engine block back as text along its chain. Prints a markdown table;
 * run with `npx tsc -p tsconfig.bench.json && node .bench/bench/prompt-render.js`.
 */
import { join } from 'node:path';
import { chatPromptText } from '../src/api/prompt-text.js';
import { promptBlocks } from '../src/balancer/prefix-index.js';
import { EMPTY_TAIL, loadHfModel, type DecodeTail } from '../src/kv-events/hf-tokenizer.js';

const ROOT = new URL('../../', import.meta.url).pathname.replace('/.bench/', '/');
const ROUNDS = process.env.BENCH_SMOKE === '1' ? 200 : 5_000;

/** Microseconds per call of `fn`, the median of five runs after a warm-up. */
function microseconds(fn: () => unknown): number {
  for (let i = 0; i < ROUNDS / 5; i++) fn();
  const runs: number[] = [];
  for (let r = 0; r < 5; r++) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < ROUNDS; i++) fn();
    runs.push(Number(process.hrtime.bigint() - start) / 1_000 / ROUNDS);
  }
  return runs.sort((a, b) => a - b)[2] as number;
}

const model = await loadHfModel(join(ROOT, 'test/fixtures/hf-tokenizer'));
const system = 'You are the support desk of a hardware store: name the aisle, the price and the stock, and keep it short. '.repeat(120);
const messages = [
  { role: 'system', content: system.slice(0, 10_500) },
  { role: 'user', content: 'Where do I find wood glue that sets in under ten minutes and stays flexible? '.repeat(6) },
  { role: 'assistant', content: 'Aisle 7, second shelf: the blue bottles. '.repeat(5) },
  { role: 'user', content: 'And clamps for a 40 cm panel?' },
];
const body = { model: 'm', messages };
const own = chatPromptText(body);
const rendered = model.renderChat(messages);

const ownUs = microseconds(() => promptBlocks(chatPromptText(body), 64, 256));
const hfUs = microseconds(() => promptBlocks(model.promptText({ api: 'chat', body }) ?? '', 64, 256));
const ids = model.encode(rendered);
const blocks: number[][] = [];
for (let at = 0; at + 16 <= ids.length; at += 16) blocks.push(ids.slice(at, at + 16));
const readUs =
  microseconds(() => {
    let tail: DecodeTail = EMPTY_TAIL;
    for (const block of blocks) tail = model.readBlock(tail, block).tail;
  }) / blocks.length;

console.log(`| what | characters | µs |`);
console.log(`|---|---:|---:|`);
console.log(`| router's own rendering + block hashes (default) | ${own.length} | ${ownUs.toFixed(1)} |`);
console.log(`| chat template rendering + block hashes (huggingface) | ${rendered.length} | ${hfUs.toFixed(1)} |`);
console.log(`| reading one 16-token engine block along its chain (huggingface, event side) | — | ${readUs.toFixed(2)} |`);
