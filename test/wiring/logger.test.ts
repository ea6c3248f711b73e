/** The logger's stdout: how much text it holds for a stdout that takes none, and what it says of what it dropped. */
import { describe, expect, it } from '@jest/globals';
import { EventEmitter } from 'node:events';
import { createLogger, lineSinkOf, MAX_UNWRITTEN_LOG_BYTES, stdoutDestination } from '../../src/wiring/logger.js';

/** A destination that, while `blocked`, drops what it is given as sonic-boom does past its maxLength ('drop'). */
class Blockable extends EventEmitter {
  blocked = true;
  readonly written: string[] = [];
  write(data: string): boolean {
    if (this.blocked) this.emit('drop', data);
    else this.written.push(data);
    return true;
  }
}

describe('the logger and a stdout that takes nothing', () => {
  it('holds at most 16 MiB for stdout: pino’s destination is made with that maxLength', () => {
    const destination = stdoutDestination() as unknown as { maxLength: number; destroy(): void };
    expect(destination.maxLength).toBe(MAX_UNWRITTEN_LOG_BYTES);
    expect(MAX_UNWRITTEN_LOG_BYTES).toBe(16 * 1024 * 1024);
  });

  it('says how much it dropped, in a warning, once the destination takes lines again', () => {
    const destination = new Blockable();
    const logger = createLogger('info', destination);
    const sink = lineSinkOf(logger)!;
    for (let i = 0; i < 10; i++) sink.write(`{"msg":"request","n":${i}}\n`);
    sink.flush?.();
    expect(destination.written).toEqual([]);
    destination.blocked = false;
    sink.flush?.(); // what the batch's timer does next
    const text = destination.written.join('');
    const warning = JSON.parse(text.split('\n')[0]!) as { level: number; droppedBytes: number; msg: string };
    expect(warning.level).toBe(40);
    expect(warning.msg).toMatch(/^log lines dropped: stdout took none/);
    expect(warning.droppedBytes).toBeGreaterThanOrEqual(10 * '{"msg":"request","n":0}\n'.length);
    // and the lines after it go through
    sink.write('{"msg":"request","n":"after"}\n');
    sink.flush?.();
    expect(destination.written.join('')).toContain('"n":"after"');
  });
});
