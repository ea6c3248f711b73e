/**
 * `kvEvents.tokenizer: huggingface`: the model's tokenizer files (a small byte-level BPE fixture with
 * ChatML special tokens and a ChatML Jinja template, test/fixtures/hf-tokenizer/) read with the
 * official Hugging Face packages. The router renders a chat as the engine does, reads the engine's
 * block token ids back as text along the chain (multi-byte characters and space-led words cut by
 * block edges included), and so its prefix blocks are the ones the events name.
 */
import { describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { copyFile, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promptBlocks } from '../../src/balancer/prefix-index.js';
import { ReplicaBlocks } from '../../src/kv-events/block-index.js';
import { EMPTY_TAIL, KvTokenizerError, loadHfModel, TEMPLATE_BUDGET, TEMPLATE_CHECK_MS, type DecodeTail, type HfModel } from '../../src/kv-events/hf-tokenizer.js';
import { decodeBatch, type KvEvent } from '../../src/kv-events/wire.js';
import { renderPrompt } from '../../src/sim/chat-request.js';
import { SimChatModel } from '../../src/sim/hf-template.js';
import { encodeBatch } from '../../src/sim/kv-events.js';
import { PrefixCache, promptBlockHashes, type StoredRun } from '../../src/sim/prefix-cache.js';

const DIR = join(process.cwd(), 'test/fixtures/hf-tokenizer');
const BLOCK_CHARS = 64;

const model = loadHfModel(DIR);
const simModel = SimChatModel.load(DIR);

/** Reads `ids` cut into blocks of `size` ids, each continuing the chain; also each block decoded alone. */
function readChain(m: HfModel, ids: readonly number[], size: number): { texts: string[]; alone: string[] } {
  let tail: DecodeTail = EMPTY_TAIL;
  const texts: string[] = [];
  const alone: string[] = [];
  for (let at = 0; at < ids.length; at += size) {
    const block = ids.slice(at, at + size);
    const read = m.readBlock(tail, block);
    texts.push(read.text);
    alone.push(m.decode(block));
    tail = read.tail;
  }
  return { texts, alone };
}

const TEXT = '<|im_start|>user\nthe café in the water serves 🍣 and 寿司, then the ëlan of a 🦀 over the sea<|im_end|>\n';

describe('the tokenizer fixture', () => {
  it('loads with @huggingface/tokenizers and round-trips text, special tokens and multi-byte UTF-8 included', async () => {
    const m = await model;
    const ids = m.encode(TEXT);
    expect(ids.length).toBeGreaterThan(40);
    expect(ids.length).toBeLessThan(new TextEncoder().encode(TEXT).length); // the merges and special tokens apply
    expect(ids[0]).toBe(m.encode('<|im_start|>')[0]); // a special token is one id
    expect(m.encode('<|im_start|>')).toHaveLength(1);
    expect(m.decode(ids)).toBe(TEXT);
  });
});

describe('reading engine blocks along the chain', () => {
  it('gives back the text across block edges that split a multi-byte character or lead with a space', async () => {
    const m = await model;
    const ids = m.encode(TEXT);
    for (const size of [1, 2, 3, 5, 16]) {
      const { texts, alone } = readChain(m, ids, size);
      expect(texts.join('')).toBe(TEXT);
      if (size <= 3) expect(alone.join('')).not.toBe(TEXT); // decoding blocks alone would corrupt the split characters
    }
    // 🍣 is three tokens (its first two bytes merged): the blocks that end inside it yield none of it, the third all
    const { texts } = readChain(m, ids, 1);
    const sushi = texts.findIndex((t) => t.includes('🍣'));
    expect(texts[sushi]).toBe('🍣');
    expect(texts.slice(sushi - 2, sushi)).toEqual(['', '']);
  });

  it('holds a U+FFFD at the chain’s very end until a next block says it is a real one', async () => {
    // its ids decode as a character cut short would (U+FFFD) until more ids follow: readBlock holds them
    const m = await model;
    const ids = m.encode('ab\uFFFD');
    expect(readChain(m, ids, 1).texts.join('')).toBe('ab');
    expect(readChain(m, m.encode('ab\uFFFDc'), 1).texts.join('')).toBe('ab\uFFFDc');
  });

  it('gives back every text cut at every block size (property)', async () => {
    const m = await model;
    // a text ending in U+FFFD keeps it held (the test above)
    const anyText = fc.string({ unit: 'grapheme', maxLength: 80 }).filter((t) => !t.endsWith('\uFFFD'));
    fc.assert(
      fc.property(anyText, fc.integer({ min: 1, max: 9 }), (text, size) => {
        const ids = m.encode(text);
        if (ids.length === 0) return;
        expect(readChain(m, ids, size).texts.join('')).toBe(text);
      }),
      { numRuns: 150 },
    );
  });
});

const CONVERSATION = [
  { role: 'system', content: 'You are the paint desk of a hardware store. Name the aisle; keep it short. '.repeat(4) },
  {
    role: 'user',
    content: [
      { type: 'text', text: 'Where is the primer for a café wall?' },
      { type: 'text', text: 'And brushes — 🖌?' },
    ],
  },
];

describe('the chat template', () => {
  it("renders a chat as the simulator with --tokenizer-dir does, and for ChatML as the simulator's own template", async () => {
    const m = await model;
    const rendered = m.renderChat(CONVERSATION);
    expect(rendered).toBe((await simModel).render(CONVERSATION, true, undefined));
    expect(rendered).toBe(renderPrompt(CONVERSATION));
    expect(rendered.endsWith('<|im_start|>assistant\n')).toBe(true);
    const tools = [{ type: 'function', function: { name: 'find_aisle', parameters: { type: 'object' } } }];
    expect(m.renderChat(CONVERSATION, tools)).toBe((await simModel).render(CONVERSATION, true, tools));
    expect(m.renderChat(CONVERSATION, tools)).toContain('"name": "find_aisle"');
  });

  it('gives the prompt text per API: chat rendered, completions as sent, others none', async () => {
    const m = await model;
    expect(m.promptText({ api: 'chat', body: { messages: CONVERSATION } })).toBe(renderPrompt(CONVERSATION));
    expect(m.promptText({ api: 'completions', body: { prompt: 'Once upon' } })).toBe('Once upon'); // the fixture adds no BOS
    expect(m.promptText({ api: 'completions', body: { prompt: ['first', 'second'] } })).toBe('first');
    expect(m.promptText({ api: 'completions', body: { prompt: m.encode('the café') } })).toBe('the café');
    expect(m.promptText({ api: 'responses', body: { input: 'hi' } })).toBeUndefined();
  });

  // regression: 300,000 one-character messages (9.8 MB) held the event loop for a second in the template
  it('does not render a chat over the template budget (items, or characters past what the prefix scorer uses): the estimate answers for that pick', async () => {
    const m = await model;
    const messages = (n: number): object[] => Array.from({ length: n }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: 'x' }));
    // each message is 3 items: its place in the list and its two keys
    const most = Math.floor(TEMPLATE_BUDGET.items / 3);
    expect(m.promptText({ api: 'chat', body: { messages: messages(most) } }, 16_384)).toBe(renderPrompt(messages(most)));
    expect(m.promptText({ api: 'chat', body: { messages: messages(most + 1) } }, 16_384)).toBeUndefined();
    expect(m.promptText({ api: 'chat', body: { messages: messages(300_000) } }, 16_384)).toBeUndefined();
    // tools count too: one tool of a 300,000-key schema, or 200,000 tools
    const huge = { type: 'object', properties: Object.fromEntries(Array.from({ length: 300_000 }, (_, i) => [`k${i}`, { type: 'string' }])) };
    expect(m.promptText({ api: 'chat', body: { messages: CONVERSATION, tools: [{ type: 'function', function: { name: 'f', parameters: huge } }] } }, 16_384)).toBeUndefined();
    const many = Array.from({ length: 200_000 }, (_, i) => ({ type: 'function', function: { name: `f${i}` } }));
    expect(m.promptText({ api: 'chat', body: { messages: CONVERSATION, tools: many } }, 16_384)).toBeUndefined();
    const tools = [{ type: 'function', function: { name: 'find_aisle', parameters: { type: 'object' } } }];
    expect(m.promptText({ api: 'chat', body: { messages: CONVERSATION, tools } }, 16_384)).toBe(m.renderChat(CONVERSATION, tools));
    // characters: 16 times the 10 the scorer uses here; 'role', 'user' and 'content' are 15 of them
    const chat = (n: number): Record<string, unknown> => ({ messages: [{ role: 'user', content: 'y'.repeat(n) }] });
    expect(m.promptText({ api: 'chat', body: chat(16 * 10 - 15) }, 10)).toContain('y'.repeat(16 * 10 - 15));
    expect(m.promptText({ api: 'chat', body: chat(16 * 10 - 14) }, 10)).toBeUndefined();
    // an inline image is one item, not its characters: the template never sees it
    const image = { type: 'image_url', image_url: { url: `data:image/png;base64,${'A'.repeat(2_000_000)}` } };
    expect(m.promptText({ api: 'chat', body: { messages: [{ role: 'user', content: [{ type: 'text', text: 'look' }, image] }] } }, 16_384)).toBe(
      '<|im_start|>user\nlook<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it('decodes of a token-id prompt only the ids that can make up the characters the prefix scorer uses', async () => {
    const m = await model;
    const text = 'the café and the bakery, '.repeat(200);
    const ids = m.encode(text);
    const read = m.promptText({ api: 'completions', body: { prompt: ids } }, 10) ?? '';
    expect(read.length).toBeGreaterThanOrEqual(10);
    expect(read.length).toBeLessThan(text.length);
    expect(text.startsWith(read)).toBe(true);
    expect(m.promptText({ api: 'completions', body: { prompt: ids } }, 16_384)).toBe(text);
  });
});

/** Router blocks of `text` whose characters lie within the first `chars` characters. */
const coveredBlocks = (chars: number): number => Math.floor(chars / BLOCK_CHARS);

describe("the router's blocks and the engine's events share one key space", () => {
  it('vLLM-shaped events (block_size ids per block): every router block the engine stored matches', async () => {
    const m = await model;
    const text = m.renderChat(CONVERSATION);
    const ids = m.encode(text);
    const blockSize = 5;
    const full = Math.floor(ids.length / blockSize);
    const index = new ReplicaBlocks({ blockChars: BLOCK_CHARS, maxBlocks: 10_000, readable: true, reader: m });
    // stored in two events, the second chained to the first's last block
    const keys = Array.from({ length: full }, (_, i) => `b${i}`);
    const half = Math.floor(full / 2);
    const events: KvEvent[] = [
      { type: 'BlockStored', blocks: keys.slice(0, half), parent: undefined, tokenIds: ids.slice(0, half * blockSize), blockSize },
      { type: 'BlockStored', blocks: keys.slice(half), parent: keys[half - 1], tokenIds: ids.slice(half * blockSize, full * blockSize), blockSize },
    ];
    for (const event of events) index.apply(event);
    const routerBlocks = promptBlocks(m.promptText({ api: 'chat', body: { messages: CONVERSATION } }) ?? '', BLOCK_CHARS, 256);
    const storedChars = m.decode(ids.slice(0, full * blockSize)).length;
    expect(coveredBlocks(storedChars)).toBeGreaterThan(3);
    expect(index.match(routerBlocks)).toBe(coveredBlocks(storedChars));
    // the engine evicts the second event's blocks: the match ends where the first event's text does
    index.apply({ type: 'BlockRemoved', blocks: keys.slice(half) });
    const firstChars = m.decode(ids.slice(0, half * blockSize)).length;
    expect(coveredBlocks(firstChars)).toBeLessThan(coveredBlocks(storedChars));
    expect(index.match(routerBlocks)).toBe(coveredBlocks(firstChars));
  });

  it("the simulator's events with --tokenizer-dir, over its wire format, rebuild the router's blocks", async () => {
    const m = await model;
    const sim = await simModel;
    const index = new ReplicaBlocks({ blockChars: BLOCK_CHARS, maxBlocks: 10_000, readable: true, reader: m });
    const cache = new PrefixCache(16, 4096);
    cache.listener = {
      changed: (stored: readonly StoredRun[], removed: readonly number[]) => {
        for (const event of decodeBatch(encodeBatch(0, stored, removed, 16, false, sim.encode)).events) index.apply(event);
      },
      cleared: () => index.clear(),
    };
    const engineText = sim.render(CONVERSATION, true, undefined);
    cache.store(promptBlockHashes(engineText, 16));
    const routerBlocks = promptBlocks(m.promptText({ api: 'chat', body: { messages: CONVERSATION } }) ?? '', BLOCK_CHARS, 256);
    expect(routerBlocks.length).toBeGreaterThan(3);
    expect(index.match(routerBlocks)).toBe(coveredBlocks(Math.floor(engineText.length / 64) * 64));
    // a follow-up turn: the engine stores only its new blocks, chained to the conversation's
    const followUp = [...CONVERSATION, { role: 'assistant', content: 'Aisle 7.' }, { role: 'user', content: 'And rollers for the ceiling, the long ones?' }];
    const longer = sim.render(followUp, true, undefined);
    cache.store(promptBlockHashes(longer, 16));
    const followBlocks = promptBlocks(m.promptText({ api: 'chat', body: { messages: followUp } }) ?? '', BLOCK_CHARS, 256);
    expect(index.match(followBlocks)).toBe(coveredBlocks(Math.floor(longer.length / 64) * 64));
  });
});

describe('loading a tokenizer directory', () => {
  it('names the missing or broken file', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'hf-tok-'));
    try {
      await expect(loadHfModel(dir)).rejects.toThrow(KvTokenizerError);
      await expect(loadHfModel(dir)).rejects.toThrow(/tokenizer\.json \(ENOENT\).*tokenizer\.json and tokenizer_config\.json/);
      await writeFile(join(dir, 'tokenizer.json'), '{"model": ');
      await writeFile(join(dir, 'tokenizer_config.json'), '{}');
      await expect(loadHfModel(dir)).rejects.toThrow(/tokenizer\.json is not a tokenizer file/);
    } finally {
      await rm(dir, { recursive: true });
    }
  });

  /** The fixture's files with another chat_template. */
  async function withTemplate(template: string, check: (dir: string) => Promise<void>): Promise<void> {
    const dir = await mkdtemp(join(tmpdir(), 'hf-tok-'));
    try {
      await copyFile(join(DIR, 'tokenizer.json'), join(dir, 'tokenizer.json'));
      const config = JSON.parse(await readFile(join(DIR, 'tokenizer_config.json'), 'utf8')) as Record<string, unknown>;
      await writeFile(join(dir, 'tokenizer_config.json'), JSON.stringify({ ...config, chat_template: template }));
      await check(dir);
    } finally {
      await rm(dir, { recursive: true });
    }
  }

  it('refuses a chat_template that takes seconds to render a short chat (the router renders it for every chat)', async () => {
    // 200 million turns of a loop: about 6 s of the event loop at every request, had it been taken
    await withTemplate('{% for i in range(200000000) %}{% endfor %}{{ messages[0].content }}', async (dir) => {
      await expect(loadHfModel(dir)).rejects.toThrow(
        new RegExp(`the chat_template of .*tokenizer_config\\.json (took over ${TEMPLATE_CHECK_MS} ms|ran out of 256 MiB of memory) to render a two-message chat`),
      );
    });
  });

  it('takes a template that renders a short chat at once, and one that refuses it (such chats go by the estimate)', async () => {
    await withTemplate('{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}', async (dir) => {
      const model = await loadHfModel(dir);
      expect(model.renderChat([{ role: 'user', content: 'hi' }])).toBe('<user>hi');
    });
    await withTemplate("{{ raise_exception('no system message, please') }}", async (dir) => {
      const model = await loadHfModel(dir);
      expect(model.promptText({ api: 'chat', body: { messages: [{ role: 'user', content: 'hi' }] } })).toBeUndefined();
    });
  });
});
