// kafkajs's transactional producer: one transaction aborted, then one committed, on partition 0.
'use strict';

const { run } = require('./common');

run(async (kafka, topic) => {
  const producer = kafka.producer({
    transactionalId: `kafkajs-${process.pid}`, maxInFlightRequests: 1, idempotent: true,
  });
  await producer.connect();
  try {
    const aborted = await producer.transaction();
    await aborted.send({ topic, messages: [{ value: 'kafkajs-aborted', partition: 0 }] });
    await aborted.abort();
    const committed = await producer.transaction();
    await committed.send({ topic, messages: [{ value: 'kafkajs-committed', partition: 0 }] });
    await committed.commit();
  } finally {
    await producer.disconnect();
  }
  return { done: true };
});
