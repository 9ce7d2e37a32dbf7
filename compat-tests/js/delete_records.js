// kafkajs admin.deleteTopicRecords, as JavaScript test suites use it for cleanup: records
// produced to two partitions, partition 0 deleted up to offset 3, partition 1 emptied with -1
// (the high watermark), then an offset past the high watermark, which must fail.
'use strict';

const { run } = require('./common');

run(async (kafka, topic) => {
  const admin = kafka.admin();
  const producer = kafka.producer({ allowAutoTopicCreation: false, idempotent: false });
  await admin.connect();
  await producer.connect();
  try {
    await admin.createTopics({ topics: [{ topic, numPartitions: 2 }], waitForLeaders: true });
    for (let p = 0; p < 2; p += 1) {
      await producer.send({
        topic,
        acks: -1,
        messages: Array.from({ length: 5 }, (_, i) => ({ value: `p${p}-${i}`, partition: p })),
      });
    }
    const before = await admin.fetchTopicOffsets(topic);
    await admin.deleteTopicRecords({
      topic,
      partitions: [{ partition: 0, offset: '3' }, { partition: 1, offset: '-1' }],
    });
    const after = await admin.fetchTopicOffsets(topic);
    let outOfRange = null;
    try {
      await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '6' }] });
    } catch (error) {
      // kafkajs' retrier wraps the response's error in a KafkaJSNonRetriableError.
      outOfRange = {
        name: error.name,
        cause: error.cause.name,
        partitions: error.cause.partitions.map(({ partition, offset, error: cause }) => ({
          partition, offset, type: cause.type,
        })),
      };
    }
    const afterFailure = await admin.fetchTopicOffsets(topic);
    return { before, after, outOfRange, afterFailure };
  } finally {
    await producer.disconnect();
    await admin.disconnect();
  }
});
