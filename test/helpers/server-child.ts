// A kv-server in its own process, for tests that kill it: argv URL REGION_FILE;
// reports {url} over IPC once it serves.
import { KvServer } from '../../server/kv-server.js';
import { slow } from './providers.js';

const [url, regionFile] = process.argv.slice(2);
const server = await KvServer.start({ listen: [url!], memoryBytes: 64 << 20, regionFile: regionFile!, graceMs: 200, keepaliveMs: slow(200) });
process.send?.({ url: server.urls[0], items: server.stats().items });
