/**
 * Leader election through a coordination.k8s.io Lease, so that with several router replicas only one
 * writes CRD status. Expiry is judged the way client-go does it: by how long this process has seen
 * the same lease record unchanged on its own clock, never by comparing another node's timestamps with
 * ours, so clock skew between nodes cannot hand the lease to two holders.
 */
import { type Clock, type Scheduler } from '../core/clock.js';
import { type KubeApi, type LeaseRecord } from '../discovery/kubernetes/kube-api.js';

export interface LeaderElectionOptions {
  namespace: string;
  name: string;
  identity: string;
  leaseDurationMs: number;
  renewIntervalMs: number;
  clock: Clock;
  scheduler: Scheduler;
  onChange?: (leader: boolean) => void;
  onError?: (err: unknown) => void;
}

type LeaseApi = Pick<KubeApi, 'readLease' | 'createLease' | 'replaceLease'>;

export class LeaderElector {
  private leader = false;
  private timer: unknown;
  private stopped = true;
  private running: Promise<void> | undefined;
  /** The last record seen, and when (on our clock) it was first seen in that form. */
  private observed: { key: string; at: number } | undefined;
  private lastRenew = -Infinity;

  constructor(
    private readonly api: LeaseApi,
    private readonly options: LeaderElectionOptions,
  ) {}

  /**
   * Whether this replica holds the lease: renewed within the lease duration. A renewal that hangs does
   * not keep it leader (another replica takes the lease once it expires, whatever this one is waiting on).
   */
  isLeader(): boolean {
    if (this.leader && this.options.clock.now() - this.lastRenew > this.options.leaseDurationMs) this.setLeader(false);
    return this.leader;
  }

  start(): void {
    this.stopped = false;
    this.tick();
  }

  /** Stops campaigning; a leader hands the lease back so another replica takes over at once. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== undefined) this.options.scheduler.clearTimeout(this.timer);
    await this.running;
    if (!this.leader) return;
    this.setLeader(false);
    try {
      const lease = await this.api.readLease(this.options.namespace, this.options.name);
      if (lease?.holderIdentity === this.options.identity) {
        await this.api.replaceLease(this.options.namespace, this.options.name, { ...lease, holderIdentity: '', leaseDurationSeconds: 1 });
      }
    } catch (err) {
      this.options.onError?.(err);
    }
  }

  private tick(): void {
    if (this.stopped) return;
    this.running = this.campaign()
      .catch((err: unknown) => this.options.onError?.(err))
      .finally(() => {
        this.running = undefined;
        if (this.leader && this.options.clock.now() - this.lastRenew > this.options.leaseDurationMs) this.setLeader(false);
        if (!this.stopped) this.timer = this.options.scheduler.setTimeout(() => this.tick(), this.options.renewIntervalMs);
      });
  }

  private async campaign(): Promise<void> {
    const { namespace, name, identity, leaseDurationMs } = this.options;
    const now = this.options.clock.now();
    const seconds = Math.ceil(leaseDurationMs / 1000);
    const lease = await this.api.readLease(namespace, name);
    if (!lease) {
      const created = await this.api.createLease(namespace, name, {
        holderIdentity: identity,
        leaseDurationSeconds: seconds,
        acquireTime: new Date(),
        renewTime: new Date(),
        leaseTransitions: 0,
        resourceVersion: undefined,
      });
      if (created) this.renewed(now);
      return;
    }
    const key = `${lease.holderIdentity}|${lease.renewTime?.getTime() ?? ''}|${lease.resourceVersion ?? ''}`;
    if (this.observed?.key !== key) this.observed = { key, at: now };
    const mine = lease.holderIdentity === identity;
    const expired = lease.holderIdentity === '' || now - this.observed.at > lease.leaseDurationSeconds * 1000;
    if (!mine && !expired) {
      this.setLeader(false);
      return;
    }
    const next: LeaseRecord = mine
      ? { ...lease, leaseDurationSeconds: seconds, renewTime: new Date() }
      : { ...lease, holderIdentity: identity, leaseDurationSeconds: seconds, acquireTime: new Date(), renewTime: new Date(), leaseTransitions: lease.leaseTransitions + 1 };
    if (await this.api.replaceLease(namespace, name, next)) this.renewed(now);
    else if (!mine) this.setLeader(false);
  }

  private renewed(at: number): void {
    this.lastRenew = at;
    this.setLeader(true);
  }

  private setLeader(leader: boolean): void {
    if (this.leader === leader) return;
    this.leader = leader;
    this.options.onChange?.(leader);
  }
}
