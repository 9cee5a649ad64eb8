// The peer of `fixed_window_load` in scripts/versus-rate-limiter-flexible.sh:
// rate-limiter-flexible's RateLimiterRedis (a fixed window, one Lua script call per decision)
// on ioredis, on the same Redis, the same keys and the same number of decisions in flight.
//
//   node peer.js <port> <decisions> <in_flight> <keys>
//
// Prints one line: `decisions_per_second=<n> allowed=<n>`.
'use strict';

const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');

async function main() {
  const [port, decisions, inFlight, keys] = process.argv.slice(2).map(Number);
  if (![port, decisions, inFlight, keys].every((n) => Number.isInteger(n) && n > 0)) {
    throw new Error('usage: node peer.js <port> <decisions> <in_flight> <keys>');
  }
  const client = new Redis({ host: '127.0.0.1', port, enableOfflineQueue: true });
  // 50 points per 1 s window per key, as the tollgate side's fixed window.
  const limiter = new RateLimiterRedis({
    storeClient: client,
    keyPrefix: 'rlflex',
    points: 50,
    duration: 1,
  });
  let next = 0;
  let allowed = 0;
  // The same walk over the keys as the Rust side: a prime stride.
  const worker = async (task, count) => {
    let at = (task * 7919) % keys;
    for (let i = 0; i < count; i++) {
      try {
        await limiter.consume(`user-${at}`, 1);
        allowed++;
      } catch (rejection) {
        if (rejection instanceof Error) throw rejection;
      }
      at = (at + 61813) % keys;
      next++;
    }
  };
  const run = async (total) => {
    const per = Math.floor(total / inFlight);
    const started = process.hrtime.bigint();
    await Promise.all(Array.from({ length: inFlight }, (_, t) => worker(t, per)));
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    return (per * inFlight) / seconds;
  };
  await run(Math.min(decisions, 20000)); // warm-up: the script loaded, the JIT warm
  allowed = 0;
  const rate = await run(decisions);
  console.log(`decisions_per_second=${rate.toFixed(0)} allowed=${allowed}`);
  client.disconnect();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
