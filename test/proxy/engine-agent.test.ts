/**
 * The engine client leans on undici's file layout in one place (src/proxy/engine-agent.ts loads
 * `undici/lib/dispatcher/agent.js` to skip the package's entry point): pin that the file's class is
 * the package's documented `Agent`, so an undici release that moves or changes it fails here.
 */
import { describe, expect, it } from '@jest/globals';
import { createRequire } from 'node:module';
import { createEngineAgent } from '../../src/proxy/engine-agent.js';

const require = createRequire(import.meta.url);

describe('the engine agent', () => {
  it("is undici's documented Agent, loaded from the file the package's entry point exports it from", async () => {
    const undici = require('undici') as { Agent: new () => unknown; Dispatcher: new () => unknown };
    const fromFile = require('undici/lib/dispatcher/agent.js') as unknown;
    expect(fromFile).toBe(undici.Agent);
    expect(new (fromFile as new () => { destroy(): Promise<void> })()).toBeInstanceOf(undici.Dispatcher);
    await createEngineAgent().destroy();
  });
});
