/** ResponseLocations: where each stored response lives, bounded by count, least recently used forgotten first. */
import { describe, expect, it } from '@jest/globals';
import { ResponseLocations } from '../../src/balancer/response-locations.js';

const at = (endpoint: string) => ({ pool: 'p', endpoint, owner: 'team-a' });

describe('ResponseLocations', () => {
  it('finds what it remembers and nothing else', () => {
    const where = new ResponseLocations(10);
    where.remember('resp_1', at('e1'));
    expect(where.find('resp_1')).toEqual(at('e1'));
    expect(where.find('resp_2')).toBeUndefined();
  });

  it('forgets the least recently used id first when full; a lookup counts as use', () => {
    const where = new ResponseLocations(2);
    where.remember('a', at('e1'));
    where.remember('b', at('e2'));
    expect(where.find('a')).toEqual(at('e1')); // a is now the most recent
    where.remember('c', at('e3'));
    expect(where.size).toBe(2);
    expect(where.find('b')).toBeUndefined();
    expect(where.find('a')).toEqual(at('e1'));
    expect(where.find('c')).toEqual(at('e3'));
  });

  it('remembering an id again moves it (a response regenerated elsewhere)', () => {
    const where = new ResponseLocations(2);
    where.remember('a', at('e1'));
    where.remember('a', at('e2'));
    expect(where.size).toBe(1);
    expect(where.find('a')).toEqual(at('e2'));
  });

  it('capacity 0 remembers nothing', () => {
    const where = new ResponseLocations(0);
    where.remember('a', at('e1'));
    expect(where.find('a')).toBeUndefined();
    expect(where.size).toBe(0);
  });
});
