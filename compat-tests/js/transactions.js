// kafkajs transactional producer: one transaction committed and one aborted across two partitions,
// with the transactional id given as a third argument. Prints what was committed and aborted.
'use strict';

const { run } = require('./common');

run(async (kafka, topic) => {
  const transactionalId = process.argv[4];
  const producer = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  try {
    const committed = await producer.transaction();
    await committed.send({ topic, acks: -1, messages: [
      { value: 'kafkajs-committed-0', partition: 0 }, { value: 'kafkajs-committed-1', partition: 1 }] });
    await committed.commit();
    const aborted = await producer.transaction();
    await aborted.send({ topic, acks: -1, messages: [
      { value: 'kafkajs-aborted-0', partition: 0 }, { value: 'kafkajs-aborted-1', partition: 1 }] });
    await aborted.abort();
    return { committed: true, aborted: true };
  } finally {
    await producer.disconnect();
  }
});
