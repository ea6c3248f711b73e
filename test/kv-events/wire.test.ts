/** Decoding vLLM's KVEventBatch (msgpack, tagged-array events) and its sequence frames. */
import { describe, expect, it } from '@jest/globals';
import { encode } from '@msgpack/msgpack';
import { decodeBatch, KvWireError, MAX_BATCH_BLOCKS, MAX_BATCH_TOKEN_IDS, MAX_BLOCK_SIZE, readSeq, seqFrame } from '../../src/kv-events/wire.js';

describe('decodeBatch', () => {
  it("reads vLLM's three events, integer hashes of every width and bytes hashes", () => {
    const big = 2n ** 63n + 5n; // a uint64 hash does not fit a double
    const payload = encode(
      [
        1712345678.25,
        [
          ['BlockStored', [7, big, new Uint8Array([0xab, 0x01])], null, [1, 2, 3, 4, 5, 6], 2, null, 'GPU'],
          ['BlockStored', [9], 7, [8, 9], 2], // lora_id and medium left out (msgspec omit_defaults)
          ['BlockRemoved', [big], 'GPU'],
          ['AllBlocksCleared'],
        ],
        0,
      ],
      { useBigInt64: true },
    );
    const batch = decodeBatch(payload);
    expect(batch.ts).toBe(1712345678.25);
    expect(batch.unknown).toBe(0);
    expect(batch.events).toEqual([
      { type: 'BlockStored', blocks: ['7', big.toString(), 'ab01'], parent: undefined, tokenIds: [1, 2, 3, 4, 5, 6], blockSize: 2 },
      { type: 'BlockStored', blocks: ['9'], parent: '7', tokenIds: [8, 9], blockSize: 2 },
      { type: 'BlockRemoved', blocks: [big.toString()] },
      { type: 'AllBlocksCleared' },
    ]);
  });

  it('the same hash reads as the same key however msgpack encoded it (a parent names its block)', () => {
    const hash = 2 ** 40 + 3; // a 53-bit number: uint64 on the wire, a bigint when decoded
    const batch = decodeBatch(
      encode([
        0,
        [
          ['BlockStored', [hash], null, [1], 1],
          ['BlockStored', [1], hash, [2], 1],
        ],
      ]),
    );
    const [first, second] = batch.events;
    expect(first?.type === 'BlockStored' && first.blocks[0]).toBe(String(hash));
    expect(second?.type === 'BlockStored' && second.parent).toBe(String(hash));
  });

  it('skips events of a tag it does not know, and counts them', () => {
    const batch = decodeBatch(encode([0, [['BlockPinned', [1]], ['AllBlocksCleared']]]));
    expect(batch.events).toEqual([{ type: 'AllBlocksCleared' }]);
    expect(batch.unknown).toBe(1);
  });

  it.each([
    ['not msgpack', Uint8Array.from([0xc1])],
    ['not a batch', encode({ ts: 0 })],
    ['an event that is not a tagged list', encode([0, [{ type: 'BlockStored' }]])],
    ['a hash that is not an integer or bytes', encode([0, [['BlockRemoved', ['abc']]]])],
    ['a token id that is not one', encode([0, [['BlockStored', [1], null, [-1], 1]]])],
    ['a BlockStored without block_size', encode([0, [['BlockStored', [1], null, [1]]]])],
    // bounds on one message's work, whatever a publisher sends (a hostile one froze the router 14 s with 300,000 blocks)
    ['a block_size no engine has', encode([0, [['BlockStored', [1], null, [1], MAX_BLOCK_SIZE + 1]]])],
    ['more token ids than its blocks hold', encode([0, [['BlockStored', [1], null, new Array<number>(MAX_BLOCK_SIZE + 1).fill(7), 16]]])],
    ['an event of more blocks than a batch may hold', encode([0, [['BlockRemoved', Array.from({ length: MAX_BATCH_BLOCKS + 1 }, (_, i) => i)]]])],
    [
      'a batch of more blocks than it may hold, in events within it',
      encode([
        0,
        [
          ['BlockRemoved', Array.from({ length: MAX_BATCH_BLOCKS }, (_, i) => i)],
          ['BlockRemoved', [1]],
        ],
      ]),
    ],
    [
      'a batch of more token ids than it may hold',
      encode([0, Array.from({ length: 5 }, (_, i) => ['BlockStored', Array.from({ length: 64 }, (_, j) => i * 64 + j), null, new Array<number>(MAX_BATCH_TOKEN_IDS / 4).fill(7), 4096])]),
    ],
  ])('refuses %s with a KvWireError', (_name, payload) => {
    expect(() => decodeBatch(payload)).toThrow(KvWireError);
  });
});

describe('sequence frames', () => {
  it('are 8-byte big-endian, and the replay end marker reads as -1', () => {
    expect([...seqFrame(258n)]).toEqual([0, 0, 0, 0, 0, 0, 1, 2]);
    expect(readSeq(seqFrame(123456789n))).toBe(123456789n);
    expect(readSeq(Uint8Array.from([255, 255, 255, 255, 255, 255, 255, 255]))).toBe(-1n);
    expect(() => readSeq(Uint8Array.from([1, 2]))).toThrow(KvWireError);
  });
});
