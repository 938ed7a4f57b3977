// The send side of a control channel, on both ends (the client's session and
// the server's per-client channel). A SEND's payload is read by the NIC when
// it executes the request, which may be long after the post (rxe reads it in
// its own thread; shm when a full ring lets it through), so a send buffer is
// written again only once its SEND has completed. Messages that find every
// buffer in flight wait here, in order, and go out as completions free
// buffers. The owner posts (post) and reports each SEND completion (completed).

/** Messages that may wait for a free buffer; a peer that lets more pile up is not draining its channel. */
export const SEND_BACKLOG_LIMIT = 4096;

export class SendBuffers {
  /** Buffers whose SEND has completed (or never posted), used last-freed first. */
  private readonly free: number[] = [];
  /** Encoded messages waiting for a buffer, oldest first. */
  private readonly backlog: Buffer[] = [];

  /** `post(buffer, bytes)` copies `bytes` into buffer `buffer` (0 to count - 1) and posts its SEND; it throws if the connection cannot post. */
  constructor(
    readonly count: number,
    private readonly post: (buffer: number, bytes: Buffer) => void,
  ) {
    for (let i = count - 1; i >= 0; i--) this.free.push(i);
  }

  /** Messages waiting for a buffer. */
  get waiting(): number {
    return this.backlog.length;
  }

  /** Sends now, or after the messages already waiting. Throws if posting fails or the backlog is full. */
  send(bytes: Buffer): void {
    if (this.backlog.length > 0 || this.free.length === 0) {
      if (this.backlog.length >= SEND_BACKLOG_LIMIT) throw new Error(`control channel: ${SEND_BACKLOG_LIMIT} messages wait for their send buffers (the peer is not completing our SENDs)`);
      this.backlog.push(bytes);
      return;
    }
    this.postOn(this.free.pop()!, bytes);
  }

  /** Buffer `buffer`'s SEND completed: it is free again, and waiting messages go out. Throws if posting fails. */
  completed(buffer: number): void {
    if (!Number.isInteger(buffer) || buffer < 0 || buffer >= this.count || this.free.includes(buffer)) return; // not one in flight
    this.free.push(buffer);
    while (this.backlog.length > 0 && this.free.length > 0) this.postOn(this.free.pop()!, this.backlog.shift()!);
  }

  private postOn(buffer: number, bytes: Buffer): void {
    try {
      this.post(buffer, bytes);
    } catch (error) {
      this.free.push(buffer); // never posted
      throw error;
    }
  }
}
