/** The request-phase channel: every step of an inference request, in order, for a diagnostics subscriber. */
import { afterAll, afterEach, beforeAll, describe, expect, it, jest } from '@jest/globals';
import { channel, subscribe, unsubscribe } from 'node:diagnostics_channel';
import type { ServerResponse } from 'node:http';
import request from 'supertest';
import { PHASE_CHANNEL, PHASES, type Phase, type PhaseMessage } from '../../src/core/phases.js';
import { type Router } from '../../src/main.js';
import { buildTestRouter, KEY, type TestRouter } from '../helpers/router.js';
import { okChat, replyWith, startUpstream, type RecordingUpstream } from '../helpers/upstream.js';

let upstream: RecordingUpstream;
let gateway: TestRouter<Router>;
const seen: Array<{ res: ServerResponse; phase: Phase }> = [];
const listener = (message: unknown): void => {
  seen.push(message as PhaseMessage);
};

beforeAll(async () => {
  upstream = await startUpstream();
  gateway = await buildTestRouter({
    pools: [{ name: 'llm', servedModelName: 'served/llm', capabilities: ['chat'], endpoints: [upstream.url] }],
    deployments: [{ id: 'llm-prod', model: 'llm', targets: [{ pool: 'llm' }] }],
  });
  subscribe(PHASE_CHANNEL, listener);
});
afterEach(() => {
  seen.length = 0;
  upstream.reply = okChat;
});
afterAll(async () => {
  unsubscribe(PHASE_CHANNEL, listener);
  await gateway.close();
  await upstream.close();
});

const chat = (key = KEY): request.Test =>
  request(gateway.router.api)
    .post('/v1/chat/completions')
    .set({ Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' })
    .send(JSON.stringify({ model: 'llm', messages: [{ role: 'user', content: 'hi' }] }));

describe('request phases', () => {
  it('publishes every step of a served request once, in order, all for the same response', async () => {
    await chat().expect(200);
    expect(seen.map((s) => s.phase)).toEqual([...PHASES]);
    expect(new Set(seen.map((s) => s.res)).size).toBe(1);
  });

  it('stops where the request was refused: a wrong key is received, never authenticated', async () => {
    await chat('sk-wrong').expect(401);
    expect(seen.map((s) => s.phase)).toEqual(['received']);
  });

  it('publishes nothing once nobody listens (no message is made for the channel)', async () => {
    const publish = jest.spyOn(channel(PHASE_CHANNEL), 'publish');
    try {
      unsubscribe(PHASE_CHANNEL, listener);
      await chat().expect(200);
      expect(publish).not.toHaveBeenCalled();
      subscribe(PHASE_CHANNEL, listener);
      await chat().expect(200);
      expect(publish).toHaveBeenCalledTimes(PHASES.length);
    } finally {
      publish.mockRestore();
      if (!channel(PHASE_CHANNEL).hasSubscribers) subscribe(PHASE_CHANNEL, listener);
    }
  });
});

describe('a retried request', () => {
  it('passes picked, sent and responded again for its second attempt', async () => {
    // the only replica answers 503 once: the request is retried there (the pool has no other)
    upstream.reply = (req, res) => {
      upstream.reply = okChat;
      replyWith(503, JSON.stringify({ error: { message: 'overloaded' } }))(req, res);
    };
    await chat().expect(200);
    expect(upstream.requests.length).toBeGreaterThanOrEqual(2);
    expect(seen.map((s) => s.phase)).toEqual(['received', 'authenticated', 'body_read', 'validated', 'planned', 'picked', 'sent', 'responded', 'picked', 'sent', 'responded', 'first_byte']);
  });
});
