// Consume a topic in a consumer group with kafkajs until `count` records arrived or a record with
// value "sentinel" was seen (mode given by argv[5]), commit what was consumed, disconnect.
// Prints [[partition, offset, value], ...] as JSON on stdout.
'use strict';

const { client } = require('./common');

async function main() {
  const [bootstrap, topic, group, until] = process.argv.slice(2);
  const kafka = client(bootstrap);
  const consumer = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 500 });
  const seen = [];
  let resolveDone;
  const done = new Promise((resolve) => { resolveDone = resolve; });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      const value = message.value === null ? null : message.value.toString();
      seen.push([partition, Number(message.offset), value]);
      await consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }]);
      if ((until === 'sentinel' && value === 'sentinel') || (until !== 'sentinel' && seen.length >= Number(until))) {
        resolveDone();
      }
    },
  });
  const timer = setTimeout(() => resolveDone(), 30000);
  await done;
  clearTimeout(timer);
  await consumer.disconnect();
  process.stdout.write(JSON.stringify(seen));
}

main().then(() => process.exit(0)).catch((error) => {
  process.stderr.write(`FAILED: ${error.stack || error}\n`);
  process.exit(1);
});
