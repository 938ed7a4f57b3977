// A control channel's send buffers (protocol/send-buffers.ts) against a model
// NIC that reads a SEND's payload only when it executes it, as rxe does: no
// buffer is written while its SEND is in flight, and the peer receives every
// message, in order, whatever the interleaving of sends and completions.
// (Before, both ends reused their buffers round-robin: a burst of more
// messages than buffers overwrote ones not yet read, and on Soft-RoCE a grant
// request was lost that way, its PUTs waiting until they timed out.)
import test from 'ava';
import fc from 'fast-check';

import { KvLayout } from '../../protocol/constants.js';
import { type ControlMessage, decode, encode } from '../../protocol/control.js';
import { SEND_BACKLOG_LIMIT, SendBuffers } from '../../protocol/send-buffers.js';
import { sendBuffersFor, send } from '../../server/sessions/channel.js';
import type { Client } from '../../server/sessions/clients.js';
import type { Fabric } from '../../server/fabric.js';
import type { Connection, WorkRequest } from '../../native/index.js';

/** A NIC that executes posted SENDs when told to (complete), reading the buffer then. */
class LazyNic {
  readonly memory = Buffer.alloc(64 * KvLayout.CONTROL_RECV_BYTES);
  /** posted, not executed: buffer number and length */
  readonly inFlight: Array<{ buffer: number; length: number }> = [];
  readonly delivered: Buffer[] = [];
  overwrittenInFlight = 0;

  post = (buffer: number, bytes: Buffer): void => {
    if (this.inFlight.some((f) => f.buffer === buffer)) this.overwrittenInFlight++;
    bytes.copy(this.memory, buffer * KvLayout.CONTROL_RECV_BYTES);
    this.inFlight.push({ buffer, length: bytes.length });
  };

  /** Executes the oldest posted SEND; returns its buffer for the completion. */
  executeOldest(): number {
    const { buffer, length } = this.inFlight.shift()!;
    const at = buffer * KvLayout.CONTROL_RECV_BYTES;
    this.delivered.push(Buffer.from(this.memory.subarray(at, at + length)));
    return buffer;
  }
}

const message = (i: number): ControlMessage => ({ t: 'grant', c: i % 40, n: i });

test('a burst of more messages than buffers waits for completions and arrives whole and in order', (t) => {
  const nic = new LazyNic();
  const buffers = new SendBuffers(16, nic.post);
  for (let i = 0; i < 40; i++) buffers.send(encode(message(i)));
  t.is(nic.inFlight.length, 16);
  t.is(buffers.waiting, 24);
  while (nic.inFlight.length > 0) buffers.completed(nic.executeOldest());
  t.is(nic.overwrittenInFlight, 0);
  t.deepEqual(nic.delivered.map((b) => decode(b)), Array.from({ length: 40 }, (_, i) => message(i)));
  t.is(buffers.waiting, 0);
});

test('any interleaving of sends and completions: no buffer written in flight, every message delivered in order', (t) => {
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 8 }), fc.array(fc.boolean(), { maxLength: 200 }), (count, steps) => {
      const nic = new LazyNic();
      const buffers = new SendBuffers(count, nic.post);
      let sent = 0;
      for (const sendNow of steps) {
        if (sendNow || nic.inFlight.length === 0) buffers.send(encode(message(sent++)));
        else buffers.completed(nic.executeOldest());
      }
      while (nic.inFlight.length > 0) buffers.completed(nic.executeOldest());
      return nic.overwrittenInFlight === 0 && nic.delivered.length === sent && nic.delivered.every((b, i) => (decode(b) as { n: number }).n === i);
    }),
  );
  t.pass();
});

test('a completion for a buffer not in flight, or out of range, changes nothing', (t) => {
  const nic = new LazyNic();
  const buffers = new SendBuffers(2, nic.post);
  for (let i = 0; i < 3; i++) buffers.send(encode(message(i)));
  for (const bogus of [-1, 2, 1.5, Number.NaN]) buffers.completed(bogus);
  t.is(nic.inFlight.length, 2);
  t.is(buffers.waiting, 1);
  buffers.completed(nic.executeOldest());
  buffers.completed(nic.inFlight[0]!.buffer === 0 ? 1 : 0); // the other one: it is in flight too, so it counts
  t.is(nic.overwrittenInFlight, 0);
});

test('a post that throws leaves its buffer free, and a full backlog throws instead of growing', (t) => {
  let fail = true;
  const posted: number[] = [];
  const buffers = new SendBuffers(1, (buffer) => {
    if (fail) throw new Error('connection broken');
    posted.push(buffer);
  });
  t.throws(() => buffers.send(Buffer.from('x')), { message: 'connection broken' });
  fail = false;
  buffers.send(Buffer.from('y'));
  t.deepEqual(posted, [0]);
  for (let i = 0; i < SEND_BACKLOG_LIMIT; i++) buffers.send(Buffer.from('z'));
  t.throws(() => buffers.send(Buffer.from('z')), { message: /messages wait for their send buffers/ });
});

test("the server's channel: a client ring's buffers, wr_id = buffer number, nothing overwritten in flight", (t) => {
  const ring = 3;
  const region = Buffer.alloc(8 * 16 * KvLayout.CONTROL_RECV_BYTES);
  const posts: WorkRequest[] = [];
  const connection = { postSend: (requests: WorkRequest[]) => posts.push(...requests) } as unknown as Connection;
  const fabric = { send: { bytes: region } } as unknown as Fabric;
  const client = { sendBuffers: sendBuffersFor(fabric, ring, connection) } as Client;
  const delivered: ControlMessage[] = [];
  const execute = () => {
    const request = posts.shift()!;
    const at = request.localOffset ?? 0;
    delivered.push(decode(region.subarray(at, at + request.length!)));
    client.sendBuffers.completed(request.wrId!);
  };
  for (let i = 0; i < 20; i++) send(client, message(i));
  t.is(posts.length, client.sendBuffers.count);
  for (const request of posts) t.is(request.localOffset, (ring * client.sendBuffers.count + request.wrId!) * KvLayout.CONTROL_RECV_BYTES);
  while (posts.length > 0) execute();
  t.deepEqual(delivered, Array.from({ length: 20 }, (_, i) => message(i)));
});
