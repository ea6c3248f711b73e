import { describe, expect, it } from '@jest/globals';
import { patchTopLevel, scanMembers, upstreamBody } from '../../src/proxy/body-patch.js';

const set = (entries: Record<string, unknown>): Map<string, string> => new Map(Object.entries(entries).map(([k, v]) => [k, JSON.stringify(v)]));

describe('scanMembers', () => {
  it('finds top-level members past nested objects, arrays, escapes and odd spacing', () => {
    const text = ' { "a" : {"x":[1,{"y":"}"}]} , "b\\"q":"s\\\\" ,"c":-1.5e3,"d":[],"e":null }';
    const { members, close } = scanMembers(text, 1);
    expect(members.map((m) => m.key)).toEqual(['a', 'b"q', 'c', 'd', 'e']);
    expect(members.map((m) => text.slice(m.valueStart, m.valueEnd))).toEqual(['{"x":[1,{"y":"}"}]}', '"s\\\\"', '-1.5e3', '[]', 'null']);
    expect(text[close]).toBe('}');
  });
});

describe('patchTopLevel', () => {
  it.each([
    ['replaces in place', '{"model": "a", "n":1}', { set: set({ model: 'b' }) }, '{"model": "b", "n":1}'],
    ['appends a new member', '{"model":"a"}', { set: set({ top_k: 5 }) }, '{"model":"a","top_k":5}'],
    ['appends to an empty object', '{}', { set: set({ a: 1 }) }, '{"a":1}'],
    ['removes the last member', '{"a":1,"b":2}', { remove: new Set(['b']) }, '{"a":1}'],
    ['removes the first member', '{"a":1, "b":2}', { remove: new Set(['a']) }, '{"b":2}'],
    ['removes the first two members', '{"a":1,"b":2,"c":3}', { remove: new Set(['a', 'b']) }, '{"c":3}'],
    ['removes every member', '{"a":1,"b":2}', { remove: new Set(['a', 'b']) }, '{}'],
    ['removes and appends together', '{"x":{"k":1},"m":"a"}', { set: set({ k: 1 }), remove: new Set(['x']) }, '{"m":"a","k":1}'],
    ['replaces every duplicate of a key', '{"model":"a","model":"b"}', { set: set({ model: 'c' }) }, '{"model":"c","model":"c"}'],
  ])('%s', (_name, input, patch, expected) => {
    const out = patchTopLevel(input, patch);
    expect(out).toBe(expected);
    expect(() => JSON.parse(out) as unknown).not.toThrow();
  });
});

describe('upstreamBody', () => {
  it('returns the very same text when nothing needs to change', () => {
    const text = '{"model":"m","messages":[]}';
    expect(upstreamBody(text, 'm', 'm')).toBe(text);
  });

  it('rewrites only the model, keeping number spellings, big integers and escapes byte for byte', () => {
    const text = '{"model":"alias","seed":12345678901234567890,"temperature":1.0,"top_p":1e-1,"messages":[{"role":"user","content":"caf\\u00e9 \\ud83d\\ude00"}]}';
    expect(upstreamBody(text, 'meta-llama/Llama-3.1-8B-Instruct', 'alias')).toBe(text.replace('"alias"', '"meta-llama/Llama-3.1-8B-Instruct"'));
  });

  it('merges extra_body into the top level (its keys win), removes it and sets the served model', () => {
    const text = '{"model":"a","extra_body":{"top_k":40,"temperature":0.50,"model":"sneaky"},"temperature":1,"messages":[]}';
    const out = upstreamBody(text, 'served', 'a');
    expect(JSON.parse(out)).toEqual({ model: 'served', temperature: 0.5, messages: [], top_k: 40 });
    expect(out).toContain('"temperature":0.50');
    expect(out).not.toContain('extra_body');
  });

  it('drops an empty or null extra_body', () => {
    expect(JSON.parse(upstreamBody('{"model":"a","extra_body":{}}', 'a', 'a'))).toEqual({ model: 'a' });
    expect(JSON.parse(upstreamBody('{"extra_body":null,"model":"a"}', 'a', 'a'))).toEqual({ model: 'a' });
  });
});
