// How a session comes to be (session.ts): the transport connect with the
// control buffers' receives posted, the server's refusals as KvErrors, the
// first control completion (the hello), and the control buffers' wr_ids.
import { type Completion, type Connection, type CoreRegion, type MemoryRegion, type RecvRequest, TransportError } from '../native/index.js';
import { RejectReason, connectData } from '../protocol/connect.js';
import type { Hello } from '../protocol/control.js';
import { KvLayout } from '../protocol/constants.js';
import { KvAuthError, KvDisconnectedError, KvError, KvInvalidArgumentError, KvNamespaceError, KvProtocolError } from '../protocol/errors.js';
import { CONTROL_RECVS, type CoreHost } from './core-host.js';
import type { SessionOptions } from './session.js';

/** Control wr_ids carry this bit; the core hands their completions back apart from op results. */
export const CONTROL_TAG = 2 ** KvLayout.CONTROL_TAG_SHIFT;

/**
 * The first control completion of queue pair `qpNum` (undefined: none within `timeoutMs`);
 * the ones after it until the session exists go to `early`. Pumped here: while the host has
 * no core, straight from the CQ; with one, through the op queue's poll, which routes them.
 */
export async function firstCompletion(host: CoreHost, qpNum: number, early: Completion[], timeoutMs: number, signal?: AbortSignal): Promise<Completion | undefined> {
  let first: Completion | undefined;
  const handler = (completion: Completion) => void (first === undefined ? (first = completion) : early.push(completion));
  host.listen(qpNum, handler);
  const start = performance.now();
  for (let i = 0; first === undefined && performance.now() - start < timeoutMs && !signal?.aborted; i++) {
    host.pump();
    if (first !== undefined) break;
    await new Promise((resolve) => (i < 1000 ? setImmediate(resolve) : setTimeout(resolve, 1)));
  }
  return first;
}

export async function connect(host: CoreHost, control: MemoryRegion, options: SessionOptions, timeoutMs: number): Promise<Connection> {
  const { url } = options;
  try {
    return await host.provider.connect(url, {
      cq: host.cq,
      initialRecvs: Array.from({ length: CONTROL_RECVS }, (_, i) => recv(control, i)),
      privateData: connectData(options.token, options.namespace),
      timeoutMs,
      signal: options.signal,
      sendDepth: 1024,
      recvDepth: CONTROL_RECVS + 4,
    });
  } catch (error) {
    if (error instanceof TransportError && error.code === 'REJECTED') {
      const reason = error.privateData?.[0];
      if (reason === RejectReason.AUTH) throw new KvAuthError(`${url}: the server rejected the token${options.namespace === undefined ? '' : ` (for namespace '${options.namespace}')`}`);
      if (reason === RejectReason.NAMESPACE) throw new KvNamespaceError(`${url}: the server hosts no namespace '${options.namespace}'`);
      if (reason === RejectReason.VERSION) {
        const theirs = error.privateData?.[1]; // servers since v2 say which version they speak
        throw new KvProtocolError(
          `${url}: the server speaks protocol version ${theirs ?? 'other than ' + KvLayout.PROTOCOL_VERSION}, this client ${KvLayout.PROTOCOL_VERSION}: upgrade the older side`,
        );
      }
      throw new KvDisconnectedError(`${url}: the server refused the connection (${reason === RejectReason.FULL ? 'no free client ring' : 'rejected'})`);
    }
    const why = (error as Error).message;
    throw new KvDisconnectedError(why.includes(url) ? why : `cannot connect to ${url}: ${why}`);
  }
}

/** Control buffer `index` as a receive request. */
export function recv(control: MemoryRegion, index: number): RecvRequest {
  return { wrId: CONTROL_TAG + index, local: control, localOffset: index * KvLayout.CONTROL_RECV_BYTES, length: KvLayout.CONTROL_RECV_BYTES };
}

/** The hello's region and layout as the core takes them. A read client has no ring; its core never writes one (its writes are refused first: roles.ts). */
export function coreRegion(hello: Hello): CoreRegion {
  const { bucketCount, indexOffset, heapOffset, heapBytes, seed, ringOffset = 0n, maxValueBytes } = hello.layout;
  return { ...hello.region, bucketCount, indexOffset, heapOffset, heapBytes, seed, ringOffset, maxValueBytes, clientId: hello.clientId, versionBase: hello.versionBase, graceMs: hello.graceMs };
}

export function controlBytes(control: MemoryRegion, index: number, length: number): Buffer {
  const offset = index * KvLayout.CONTROL_RECV_BYTES;
  return control.bytes.subarray(offset, offset + length);
}

/**
 * A failed connection attempt as a KvError. A provider that cannot be had
 * (rdma:// on a build without verbs, or on a host without an RDMA device) is
 * configuration, not a lost server; anything else not already a KvError
 * (a native allocation that failed, say) counts as a failed connect.
 */
export function providerError(url: string, error: unknown): Error {
  if (error instanceof KvError) return error;
  const message = error instanceof Error ? error.message : String(error);
  if (error instanceof TransportError && error.code === 'ERR_RKV_PROVIDER') return new KvInvalidArgumentError(`${url}: ${message}`);
  return new KvDisconnectedError(`cannot connect to ${url}: ${message}`);
}
