/** IP address ranges, parsed once and checked per request (node:net's BlockList underneath). */
import { BlockList, isIP } from 'node:net';

/** A set of IP addresses and CIDR ranges, IPv4 and IPv6 (e.g. `server.trustedProxies`). */
export class AddressRanges {
  private readonly list = new BlockList();
  readonly size: number;

  /** Throws an Error naming the entry for anything that is not an IP address or CIDR range. */
  constructor(entries: readonly string[]) {
    entries.forEach((entry, i) => {
      const [address = '', prefix] = entry.trim().split('/');
      const family = isIP(address);
      const bits = prefix === undefined ? undefined : Number(prefix);
      const max = family === 6 ? 128 : 32;
      if (family === 0 || (bits !== undefined && (!Number.isInteger(bits) || bits < 0 || bits > max || prefix === ''))) {
        throw new Error(`entry ${i} ("${entry}") is not an IP address or CIDR range like 10.0.0.0/8`);
      }
      const type = family === 6 ? 'ipv6' : 'ipv4';
      if (bits === undefined) this.list.addAddress(address, type);
      else this.list.addSubnet(address, bits, type);
    });
    this.size = entries.length;
  }

  has(address: string): boolean {
    if (this.size === 0 || address === '') return false;
    const family = isIP(address);
    return family !== 0 && this.list.check(address, family === 6 ? 'ipv6' : 'ipv4');
  }
}
