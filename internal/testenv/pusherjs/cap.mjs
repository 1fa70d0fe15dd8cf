// cap.mjs: real pusher-js clients against a Pusher-protocol endpoint with a
// per-user cap of 2. It prints JSON lines: {"step":"broadcast"} when the test
// should broadcast "hello" on presence-room, then {"result": ...}.
//
//   node cap.mjs '{"host":"127.0.0.1","port":1234,"key":"k","secret":"s","observeMs":10000}'
//
// "ports": {"a": 1, "b": 1, "c": 2, "forged": 2} sends each client to its own
// port (two gateways, say); "port" is the default.
import { createRequire } from 'node:module';
import crypto from 'node:crypto';

const require = createRequire(import.meta.url);
const Pusher = require('pusher-js');
const cfg = JSON.parse(process.argv[2]);
const print = (obj) => console.log(JSON.stringify(obj));

function client(name, user, secret) {
  const st = { name, states: [], errors: [], subscribed: false, events: [], connecting: 0 };
  const port = (cfg.ports && cfg.ports[name]) || cfg.port;
  const p = new Pusher(cfg.key, {
    wsHost: cfg.host, wsPort: port, forceTLS: false, enabledTransports: ['ws'],
    cluster: 'mt1', disableStats: true,
    channelAuthorization: {
      customHandler: ({ socketId, channelName }, cb) => {
        const channel_data = JSON.stringify({ user_id: user, user_info: { name } });
        const sig = crypto.createHmac('sha256', secret)
          .update(`${socketId}:${channelName}:${channel_data}`).digest('hex');
        cb(null, { auth: `${cfg.key}:${sig}`, channel_data });
      },
    },
  });
  p.connection.bind('state_change', (s) => {
    st.states.push(s.current);
    if (s.current === 'connecting') st.connecting++;
  });
  p.connection.bind('error', (e) => st.errors.push(e && e.data ? e.data : String(e)));
  const ch = p.subscribe('presence-room');
  ch.bind('pusher:subscription_succeeded', () => { st.subscribed = true; });
  ch.bind('hello', (d) => st.events.push(d));
  return { p, st };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, cond, ms) {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

try {
  const a = client('a', 'u1', cfg.secret);
  await until('a subscribed', () => a.st.subscribed, 15000);
  const b = client('b', 'u1', cfg.secret);
  await until('b subscribed', () => b.st.subscribed, 15000);
  const c = client('c', 'u1', cfg.secret);
  await until('c refused', () => c.st.errors.some((e) => e && e.code === 4301) &&
    c.p.connection.state !== 'connected' && c.p.connection.state !== 'connecting', 15000);
  // A forged presence authorization for u1 (wrong secret): never counted,
  // never refused by the cap; the server refuses the subscription itself.
  const forged = client('forged', 'u1', 'not-the-secret');
  await until('forged connected', () => forged.p.connection.state === 'connected', 15000);
  await until('forged refused by the server', () => forged.st.errors.length > 0, 15000);
  await sleep(cfg.observeMs); // c must stay disconnected all this time
  print({ step: 'broadcast' });
  await until('a and b receive the broadcast', () => a.st.events.length > 0 && b.st.events.length > 0, 15000);
  print({ result: {
    a: a.st, b: b.st, c: c.st, forged: forged.st,
    cState: c.p.connection.state, forgedState: forged.p.connection.state,
    aState: a.p.connection.state, bState: b.p.connection.state,
  } });
  for (const x of [a, b, c, forged]) x.p.disconnect();
  await sleep(100);
  process.exit(0);
} catch (e) {
  print({ error: String(e && e.stack || e) });
  process.exit(1);
}
