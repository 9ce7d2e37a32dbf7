// kafkajs producer: acks -1 and 1, keys, headers (a repeated key too), tombstones, empty values,
// CreateTime timestamps, an explicit partition, gzip and a 900 KB value. Prints each send's RecordMetadata.
'use strict';

const { CompressionTypes } = require('kafkajs');
const { run } = require('./common');

run(async (kafka, topic) => {
  const producer = kafka.producer({ allowAutoTopicCreation: true, idempotent: false });
  await producer.connect();
  try {
    const allAcks = await producer.send({
      topic,
      acks: -1,
      messages: [
        { key: 'k-plain', value: 'v-plain', partition: 0, timestamp: '1600000000000' },
        { key: 'k-headers', value: 'v-headers', partition: 0, timestamp: '1600000001000',
          headers: { h1: ['one', 'again'], h2: 'two' } },
        { key: 'k-tombstone', value: null, partition: 0, timestamp: '1600000002000' },
        { key: 'k-empty', value: '', partition: 0, timestamp: '1600000003000' },
        { value: 'v-no-key', partition: 0, timestamp: '1600000004000' },
      ],
    });
    const leaderAck = await producer.send({
      topic,
      acks: 1,
      messages: [{ key: 'k-acks-1', value: 'v-acks-1', partition: 0, timestamp: '1600000005000' }],
    });
    const gzip = await producer.send({
      topic,
      acks: -1,
      compression: CompressionTypes.GZIP,
      messages: Array.from({ length: 10 }, (_, i) => ({
        key: `k-gzip-${i}`, value: `gzip ${i} `.repeat(50), partition: 0, timestamp: String(1600000010000 + i),
      })),
    });
    const large = await producer.send({
      topic,
      acks: -1,
      messages: [{ key: 'k-large', value: 'L'.repeat(900 * 1024), partition: 0, timestamp: '1600000020000' }],
    });
    return { allAcks, leaderAck, gzip, large };
  } finally {
    await producer.disconnect();
  }
});
