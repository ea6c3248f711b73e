/** ResponseMeter in each API's dialect: content events (TTFT, ITL, estimates), usage, and the Responses API's id and sequence. */
import { describe, expect, it } from '@jest/globals';
import { streamErrorEvent, RouterError } from '../../src/core/errors.js';
import { type WireDialect } from '../../src/core/types.js';
import { SseTap } from '../../src/proxy/sse-tap.js';
import { answerTextTokens, carriesUsage, isUsageChunk, ResponseMeter, usageFromJson } from '../../src/proxy/usage.js';

/** Feeds a raw SSE text through a tap into a meter, advancing the clock 10 ms per event. */
function meterOver(dialect: WireDialect, stream: string): { meter: ResponseMeter; gaps: number[] } {
  const time = { at: 0, now: () => time.at };
  const gaps: number[] = [];
  const meter = new ResponseMeter(time, 0, dialect, { interToken: (ms) => gaps.push(ms) });
  for (const event of new SseTap().push(stream)) {
    time.at += 10;
    meter.event(event);
  }
  return { meter, gaps };
}

const sse = (events: Array<[string | undefined, object | string]>): string =>
  events.map(([name, data]) => `${name ? `event: ${name}\n` : ''}data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`).join('');

describe('ResponseMeter dialects', () => {
  it('openai: completions chunks carry `text`; the usage chunk is read', () => {
    const stream = sse([
      [undefined, { id: 'cmpl-1', object: 'text_completion', choices: [{ index: 0, text: 'Hello', finish_reason: null }] }],
      [undefined, { id: 'cmpl-1', object: 'text_completion', choices: [{ index: 0, text: ' world', finish_reason: null }] }],
      [undefined, { id: 'cmpl-1', object: 'text_completion', choices: [{ index: 0, text: '', finish_reason: 'length' }] }],
      [undefined, { id: 'cmpl-1', object: 'text_completion', choices: [], usage: { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 } }],
      [undefined, '[DONE]'],
    ]);
    const { meter, gaps } = meterOver('openai', stream);
    expect(meter.ttftMs).toBe(10);
    expect(gaps).toEqual([10]);
    expect(meter.finalUsage()).toEqual({ promptTokens: 7, completionTokens: 2 });
  });

  it('openai: chat chunks with text, reasoning or a tool call are content; an empty role chunk and quoted look-alikes are not', () => {
    const chunk = (delta: object): [undefined, object] => [undefined, { object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: null }] }];
    const stream = sse([
      chunk({ role: 'assistant', content: '' }),
      chunk({ reasoning_content: 'hm' }),
      chunk({ content: 'a' }),
      chunk({ content: null, tool_calls: [{ index: 0, function: { arguments: '{"content":"x"}' } }] }),
      chunk({ content: '', tool_calls: [] }),
      chunk({ content: 'he said "content":"' }),
      [undefined, { object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 3, completion_tokens: 4 } }],
    ]);
    const { meter, gaps } = meterOver('openai', stream);
    expect(meter.ttftMs).toBe(20);
    expect(gaps).toEqual([10, 10, 20]); // the empty chunk at 50 ms is no token
    expect(meter.finalUsage()).toEqual({ promptTokens: 3, completionTokens: 4 });
  });

  it('looks for a usage object once per event, for the relay and the meter both', () => {
    const [content, usage] = new SseTap().push(
      sse([
        [undefined, { choices: [{ delta: { content: 'a' } }] }],
        [undefined, { choices: [], usage: { prompt_tokens: 1 } }],
      ]),
    );
    expect([isUsageChunk(content!), isUsageChunk(usage!)]).toEqual([false, true]);
    expect([content!.usage, usage!.usage]).toEqual([false, true]);
    const tampered = { ...usage!, usage: false }; // a recorded answer is what is read
    expect(carriesUsage(tampered)).toBe(false);
  });

  it('responses: *.delta events are content; usage comes from response.completed; the id from response.created; sequence numbers are followed', () => {
    const response = (status: string, usage: object | null) => ({ id: 'resp_abc', object: 'response', status, output: [], usage });
    const stream = sse([
      ['response.created', { response: response('in_progress', null), sequence_number: 0, type: 'response.created' }],
      ['response.output_text.delta', { content_index: 0, delta: 'Hi', item_id: 'msg_1', output_index: 0, sequence_number: 1, type: 'response.output_text.delta' }],
      ['response.output_text.delta', { content_index: 0, delta: ' there', item_id: 'msg_1', output_index: 0, sequence_number: 2, type: 'response.output_text.delta' }],
      ['response.output_text.done', { content_index: 0, text: 'Hi there', item_id: 'msg_1', output_index: 0, sequence_number: 3, type: 'response.output_text.done' }],
      ['response.completed', { response: response('completed', { input_tokens: 11, output_tokens: 2, total_tokens: 13 }), sequence_number: 4, type: 'response.completed' }],
    ]);
    const { meter, gaps } = meterOver('responses', stream);
    expect(meter.ttftMs).toBe(20);
    expect(gaps).toEqual([10]);
    expect(meter.responseId).toBe('resp_abc');
    expect(meter.nextSequence()).toBe(5);
    expect(meter.finalUsage()).toEqual({ promptTokens: 11, completionTokens: 2 });
  });

  it('responses without event names: the data type decides', () => {
    const { meter } = meterOver('responses', sse([[undefined, { delta: 'x', sequence_number: 1, type: 'response.output_text.delta' }]]));
    expect(meter.finalUsage()).toEqual({ promptTokens: 0, completionTokens: 1, estimated: true });
  });

  it('anthropic: content_block_delta is content; input tokens from message_start, output tokens from message_delta', () => {
    const stream = sse([
      ['message_start', { type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', content: [], usage: { input_tokens: 25, output_tokens: 1 } } }],
      ['content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }],
      ['ping', { type: 'ping' }],
      ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hello' } }],
      ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: '!' } }],
      ['content_block_stop', { type: 'content_block_stop', index: 0 }],
      ['message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 2 } }],
      ['message_stop', { type: 'message_stop' }],
    ]);
    const { meter, gaps } = meterOver('anthropic', stream);
    expect(meter.ttftMs).toBe(40);
    expect(gaps).toEqual([10]);
    expect(meter.finalUsage()).toEqual({ promptTokens: 25, completionTokens: 2 });
  });

  it('anthropic: a stream cut after message_start keeps its input tokens and counts the deltas delivered', () => {
    const stream = sse([
      ['message_start', { type: 'message_start', message: { usage: { input_tokens: 25, output_tokens: 1 } } }],
      ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hel' } }],
    ]);
    // the engine reported its input tokens but never its output: the delta delivered counts as one
    expect(meterOver('anthropic', stream).meter.finalUsage()).toEqual({ promptTokens: 25, completionTokens: 1 });
  });

  it.each([
    ['Responses API', '{"id":"resp_1","object":"response","usage":{"input_tokens":3,"output_tokens":4,"total_tokens":7}}', { promptTokens: 3, completionTokens: 4 }],
    ['Messages API', '{"id":"msg_1","type":"message","usage":{"input_tokens":5,"output_tokens":6}}', { promptTokens: 5, completionTokens: 6 }],
    ['rerank (total only)', '{"id":"rerank-1","results":[],"usage":{"total_tokens":12}}', { promptTokens: 12, completionTokens: 0 }],
    ['score', '{"data":[],"usage":{"prompt_tokens":8,"total_tokens":8,"completion_tokens":0}}', { promptTokens: 8, completionTokens: 0 }],
  ])('non-streamed usage: %s', (_case, body, usage) => {
    expect(usageFromJson(body)).toEqual(usage);
  });

  it('reads a non-streamed Responses API answer’s top-level id (not a nested one)', () => {
    const meter = new ResponseMeter({ now: () => 0 }, 0, 'responses');
    meter.body(Buffer.from('{"output":[{"id":"msg_9","type":"message"}],"id":"resp_top",'));
    meter.body(Buffer.from('"usage":{"input_tokens":1,"output_tokens":2}}'));
    meter.bodyEnd();
    expect(meter.responseId).toBe('resp_top');
    expect(meter.finalUsage()).toEqual({ promptTokens: 1, completionTokens: 2 });
  });
});

describe("ResponseMeter: the Responses API answer's id, handed on as soon as it is read", () => {
  /** A meter whose `responseId` watch records each id and hands back a write the test settles. */
  function recording(dialect: WireDialect = 'responses') {
    const ids: string[] = [];
    let settle: (written: boolean) => void = () => undefined;
    const meter = new ResponseMeter({ now: () => 0 }, 0, dialect, {
      responseId: (id) => {
        ids.push(id);
        return new Promise<boolean>((resolve) => (settle = resolve));
      },
    });
    return { meter, ids, settle: (written = true) => settle(written) };
  }

  it("a stream's id at its first event, once; answered() hands back the record's write while it is not done, nothing after", async () => {
    const { meter, ids, settle } = recording();
    const response = { id: 'resp_s', object: 'response', status: 'in_progress', output: [] };
    for (const event of new SseTap().push(sse([['response.created', { response, sequence_number: 0, type: 'response.created' }]]))) meter.event(event);
    expect(ids).toEqual(['resp_s']);
    for (const event of new SseTap().push(sse([['response.completed', { response: { ...response, status: 'completed' }, sequence_number: 1, type: 'response.completed' }]]))) meter.event(event);
    expect(ids).toEqual(['resp_s']); // the last event names it again: not handed on twice
    const pending = meter.answered();
    expect(pending).toBeInstanceOf(Promise);
    settle();
    await pending;
    expect(meter.answered()).toBeUndefined();
  });

  it('a JSON body of known length: read at answered() (its last chunk read first), so its last bytes wait for the write', async () => {
    const { meter, ids, settle } = recording();
    meter.body(Buffer.from('{"id":"resp_j","object":"response",'));
    expect(ids).toEqual([]);
    meter.body(Buffer.from('"output":[]}'));
    const pending = meter.answered();
    expect(ids).toEqual(['resp_j']);
    expect(pending).toBeInstanceOf(Promise);
    meter.bodyEnd();
    expect(ids).toEqual(['resp_j']);
    settle();
    await pending;
  });

  it('a JSON body of unknown length: read at its end, before answered()', () => {
    const { meter, ids } = recording();
    meter.body(Buffer.from('{"id":"resp_c","output":[]}'));
    meter.bodyEnd();
    expect(ids).toEqual(['resp_c']);
    expect(meter.answered()).toBeInstanceOf(Promise);
  });

  it("a stream's record whose first write failed is written once more when the answer is whole, and that write is held for", async () => {
    const { meter, ids, settle } = recording();
    for (const event of new SseTap().push(sse([['response.created', { response: { id: 'resp_f', status: 'in_progress' }, sequence_number: 0, type: 'response.created' }]]))) meter.event(event);
    settle(false); // Redis was away when the stream began
    await new Promise((resolve) => setImmediate(resolve));
    const again = meter.answered();
    expect(ids).toEqual(['resp_f', 'resp_f']);
    expect(again).toBeInstanceOf(Promise);
    settle(true);
    expect(await again).toBe(true);
  });

  it("a written record is not written again, and a write still pending at the answer's end is what answered() hands back", async () => {
    const { meter, ids, settle } = recording();
    for (const event of new SseTap().push(sse([['response.created', { response: { id: 'resp_w' }, sequence_number: 0, type: 'response.created' }]]))) meter.event(event);
    settle(true);
    await new Promise((resolve) => setImmediate(resolve));
    expect(meter.answered()).toBeUndefined();
    expect(ids).toEqual(['resp_w']);
  });

  it('reads the id of an event that spaces its JSON (`"response": {`)', () => {
    const { meter, ids } = recording();
    for (const event of new SseTap().push('event: response.created\ndata: {"type": "response.created", "response": {"id": "resp_spaced", "status": "in_progress"}}\n\n')) meter.event(event);
    expect(ids).toEqual(['resp_spaced']);
  });

  it('a JSON body too long to keep whole: its id, named first, is still read', () => {
    const { meter, ids } = recording();
    meter.body(Buffer.from('{ "id": "resp_long\\u0031", "output": [{"type": "message", "content": [{"type": "output_text", "text": "'));
    meter.body(Buffer.alloc(5 * 1024 * 1024, 'a'));
    meter.body(Buffer.from('"}]}], "usage": {"input_tokens": 3, "output_tokens": 4}}'));
    expect(meter.answered()).toBeInstanceOf(Promise);
    expect(ids).toEqual(['resp_long1']);
    meter.bodyEnd();
    expect(meter.finalUsage()).toEqual({ promptTokens: 3, completionTokens: 4 });
  });

  it('other dialects hand on no id and answered() holds nothing', () => {
    const { meter, ids } = recording('openai');
    meter.body(Buffer.from('{"id":"chatcmpl-1","object":"chat.completion","choices":[]}'));
    expect(meter.answered()).toBeUndefined();
    meter.bodyEnd();
    expect(ids).toEqual([]);
  });
});

describe('streamErrorEvent per dialect', () => {
  const err = new RouterError('UPSTREAM_STREAM_BROKEN', 'The model server closed the stream before it finished.');

  it('openai: an error chunk, then [DONE]', () => {
    const events = new SseTap().push(streamErrorEvent(err));
    expect(events.map((e) => e.data)).toEqual([JSON.stringify({ error: { message: err.message, type: 'server_error', param: null, code: 'upstream_stream_broken' } }), '[DONE]']);
  });

  it('responses: a typed error event numbered after the last event', () => {
    const [event] = new SseTap().push(streamErrorEvent(err, 'responses', 5));
    expect(event?.event).toBe('error');
    expect(JSON.parse(event?.data ?? '')).toEqual({ type: 'error', code: 'upstream_stream_broken', message: err.message, param: null, sequence_number: 5 });
  });

  it('anthropic: an error event in Anthropic’s envelope, no [DONE]', () => {
    const events = new SseTap().push(streamErrorEvent(err, 'anthropic'));
    expect(events).toHaveLength(1);
    expect(events[0]?.event).toBe('error');
    expect(JSON.parse(events[0]?.data ?? '')).toEqual({ type: 'error', error: { type: 'api_error', message: err.message } });
  });
});

describe('a speech-to-text answer without token usage is counted by its text', () => {
  const meterFor = (countsText: boolean, ...chunks: string[]): ResponseMeter => {
    const meter = new ResponseMeter({ now: () => 0 }, 0, 'openai', {}, countsText);
    for (const chunk of chunks) meter.body(Buffer.from(chunk));
    meter.bodyEnd();
    return meter;
  };

  it('reads the JSON answer’s text (not its segments) at 4 characters a token, as an estimate', () => {
    const answer = JSON.stringify({ text: 'x'.repeat(41), segments: [{ text: 'x'.repeat(41) }], usage: { type: 'duration', seconds: 2 } });
    expect(meterFor(true, ' \n', answer.slice(0, 9), answer.slice(9)).finalUsage()).toEqual({ promptTokens: 0, completionTokens: 11, estimated: true });
    expect(answerTextTokens(JSON.stringify({ text: 'é'.repeat(8) }))).toBe(2);
  });

  it('reads a text, srt or vtt answer whole; an answer too long to keep by its bytes', () => {
    expect(meterFor(true, 'hello world, this is speech').finalUsage()).toEqual({ promptTokens: 0, completionTokens: 7, estimated: true });
    const long = 'a'.repeat(1024 * 1024);
    expect(meterFor(true, long, long, long, long, long).finalUsage()).toEqual({ promptTokens: 0, completionTokens: (5 * long.length) / 4, estimated: true });
  });

  it('believes the tokens an engine reports; counts nothing for a JSON answer without text, an empty body, or another API', () => {
    expect(meterFor(true, JSON.stringify({ text: 'abc', usage: { type: 'tokens', input_tokens: 3, output_tokens: 5, total_tokens: 8 } })).finalUsage()).toEqual({
      promptTokens: 3,
      completionTokens: 5,
    });
    expect(meterFor(true, JSON.stringify({ segments: [] })).finalUsage()).toBeUndefined();
    expect(meterFor(true, '  ').finalUsage()).toBeUndefined();
    expect(meterFor(false, JSON.stringify({ text: 'x'.repeat(40) })).finalUsage()).toBeUndefined();
  });
});

describe('ResponseMeter.noAnswer: a whole non-streamed 2xx that is no answer', () => {
  const ended = (...chunks: string[]): ResponseMeter => {
    const meter = new ResponseMeter({ now: () => 0 }, 0, 'openai');
    for (const chunk of chunks) meter.body(Buffer.from(chunk));
    meter.bodyEnd();
    return meter;
  };

  it('from an API that answers JSON: empty, or not a JSON object or array', () => {
    expect(ended().noAnswer(true)).toBe(true);
    expect(ended(' \n').noAnswer(true)).toBe(true);
    expect(ended('<html>oops</html>').noAnswer(true)).toBe(true);
    expect(ended('garbage').noAnswer(true)).toBe(true);
  });

  it('an answer that is JSON, whatever white space or chunks lead to it, is one', () => {
    expect(ended('{"id":"c"}').noAnswer(true)).toBe(false);
    expect(ended('\r\n  ', '\t', '[1]').noAnswer(true)).toBe(false);
    expect(ended('\uFEFF{"id":"c"}').noAnswer(true)).toBe(false); // a byte order mark first: fetch's json() drops it
  });

  it('from the audio APIs, whose answers may be text or empty (a transcription of silence), never', () => {
    expect(ended().noAnswer(false)).toBe(false);
    expect(ended('Hello there.').noAnswer(false)).toBe(false);
  });

  it('an answer still coming is not judged', () => {
    const meter = new ResponseMeter({ now: () => 0 }, 0, 'openai');
    expect(meter.noAnswer(true)).toBe(false);
  });
});
