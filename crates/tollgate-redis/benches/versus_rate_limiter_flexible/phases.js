// The peer of `decision_instructions` in scripts/redis-instructions.sh: rate-limiter-flexible's
// RateLimiterRedis (a fixed window of 3 per hour, one Lua script call per decision) on ioredis,
// in the same cases and phases, with 64 decisions in flight.
//
//   node phases.js <port> <new|counting|denied> <prepare|measure> <keys>
//
// Prints one line: `decisions=<n> allowed=<n>`.
'use strict';

const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');

const IN_FLIGHT = 64;
const BEFORE = { new: 0, counting: 1, denied: 3 };

async function main() {
  const [portText, kase, phase, keysText] = process.argv.slice(2);
  const [port, keys] = [Number(portText), Number(keysText)];
  if (!Number.isInteger(port) || !Number.isInteger(keys) || !(kase in BEFORE) ||
      !['prepare', 'measure'].includes(phase)) {
    throw new Error('usage: node phases.js <port> <new|counting|denied> <prepare|measure> <keys>');
  }
  const client = new Redis({ host: '127.0.0.1', port });
  const limiter = new RateLimiterRedis({
    storeClient: client,
    keyPrefix: `rlflex-${kase}`,
    points: 3,
    duration: 3600,
  });
  const rounds = phase === 'prepare' ? BEFORE[kase] : 1;
  let allowed = 0;
  for (let round = 0; round < rounds; round++) {
    await Promise.all(Array.from({ length: IN_FLIGHT }, async (_, task) => {
      for (let key = task; key < keys; key += IN_FLIGHT) {
        try {
          await limiter.consume(`k${key}`, 1);
          allowed++;
        } catch (rejection) {
          if (rejection instanceof Error) throw rejection;
        }
      }
    }));
  }
  console.log(`decisions=${rounds * keys} allowed=${allowed}`);
  client.disconnect();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
