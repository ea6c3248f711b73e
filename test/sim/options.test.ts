import { describe, expect, it } from '@jest/globals';
import { checkSimOptions, defaultSimOptions, parseSimArgs, simHelp, SIM_FLAGS, SimOptionsError, type SimOptions } from '../../src/sim/options.js';

describe('modelgate sim flags', () => {
  it('uses the defaults table when no flag is given', () => {
    expect(parseSimArgs([])).toEqual(defaultSimOptions());
    expect(defaultSimOptions().maxNumSeqs).toBe(SIM_FLAGS.maxNumSeqs.default);
  });

  it('reads kebab-case flags, numbers and repeated models', () => {
    const options = parseSimArgs(['--port', '9001', '--model', 'a', '--model', 'b', '--itl-ms', '12.5', '--fault', 'status=503', '--engine', 'sglang']);
    expect(options.port).toBe(9001);
    expect(options.engine).toBe('sglang');
    expect(options.model).toEqual(['a', 'b']);
    expect(options.itlMs).toBe(12.5);
    expect(options.fault).toBe('status=503');
  });

  it.each([
    [['--max-num-seqs', '0'], /--max-num-seqs must be an integer ≥ 1/],
    [['--port', 'http'], /--port must be an integer from 0 to 65535/],
    [['--jitter', '2'], /--jitter must be a number from 0 to 1/],
    [['--max-num-seqs', '1.5'], /--max-num-seqs/],
    [['--output-min', '10', '--output-max', '5'], /--output-min must not exceed --output-max/],
    [['--fault', 'explode'], /--fault: unknown fault "explode"/],
    [['--no-such-flag', '1'], /Unknown option '--no-such-flag'/],
    [['--engine', 'triton'], /--engine must be one of vllm, sglang, tgi, tei, llamacpp \(got "triton"\)/],
    [['--load-time-ms=-1'], /--load-time-ms must be a number from 0 to 86400000 \(got "-1"\)/],
    [['--load-time-ms', '86400001'], /--load-time-ms must be a number from 0 to 86400000/],
    [['--load-time-ms', 'soon'], /--load-time-ms must be a number/],
    [['--load-time-ms', ''], /--load-time-ms must be a number/],
  ])('rejects %j naming the flag', (args, message) => {
    expect(() => parseSimArgs(args)).toThrow(SimOptionsError);
    expect(() => parseSimArgs(args)).toThrow(message);
  });

  it('loads for --load-time-ms (none by default), in ms, fractions allowed', () => {
    expect(defaultSimOptions().loadTimeMs).toBe(0);
    expect(SIM_FLAGS.loadTimeMs.default).toBe(0);
    expect(parseSimArgs(['--load-time-ms', '1500']).loadTimeMs).toBe(1500);
    expect(parseSimArgs(['--load-time-ms', '0.5']).loadTimeMs).toBe(0.5);
    expect(parseSimArgs(['--load-time-ms', '86400000']).loadTimeMs).toBe(86_400_000);
  });

  it.each([[-5], [Number.NaN], [Infinity]])('checks a load time of %p built in code, not only from flags', (loadTimeMs) => {
    expect(() => checkSimOptions({ ...defaultSimOptions(), loadTimeMs })).toThrow(/--load-time-ms must be a number from 0 to 86400000/);
  });

  it('checks the engine of options built in code, not only from flags', () => {
    expect(defaultSimOptions().engine).toBe('vllm');
    expect(() => checkSimOptions({ ...defaultSimOptions(), engine: 'openai' as SimOptions['engine'] })).toThrow(/--engine must be one of/);
  });

  it('documents every flag with its default in --help', () => {
    const help = simHelp();
    expect(help).toContain('--max-num-seqs');
    expect(help).toContain(`(default: ${SIM_FLAGS.maxNumSeqs.default})`);
    expect(help).toMatch(/^ {2}--engine +metrics dialect of GET \/metrics: vllm \| sglang \| tgi \| tei \| llamacpp \(default: vllm\)$/m);
    expect(help.split('\n').filter((l) => l.startsWith('  --'))).toHaveLength(Object.keys(SIM_FLAGS).length);
  });
});
