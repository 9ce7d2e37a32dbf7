// kafkajs admin: createTopics, listTopics, fetchTopicMetadata, fetchTopicOffsets,
// fetchTopicOffsetsByTimestamp and deleteTopics, with a few records produced in between.
'use strict';

const { run } = require('./common');

const BASE = 1600000000000;

run(async (kafka, topic) => {
  const admin = kafka.admin();
  const producer = kafka.producer({ allowAutoTopicCreation: false, idempotent: false });
  await admin.connect();
  await producer.connect();
  try {
    const created = await admin.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true });
    const createdAgain = await admin.createTopics({ topics: [{ topic, numPartitions: 3 }] });
    const listed = (await admin.listTopics()).includes(topic);
    const metadata = await admin.fetchTopicMetadata({ topics: [topic] });
    // partition p gets p + 1 records with timestamps BASE + 1000 * i
    for (let p = 0; p < 3; p += 1) {
      await producer.send({
        topic,
        acks: -1,
        messages: Array.from({ length: p + 1 }, (_, i) => ({
          value: `p${p}-${i}`, partition: p, timestamp: String(BASE + 1000 * i),
        })),
      });
    }
    const offsets = await admin.fetchTopicOffsets(topic);
    const byTimestamp = {};
    for (const ts of [BASE - 1, BASE + 1000, BASE + 1500, BASE + 60000]) {
      byTimestamp[ts] = await admin.fetchTopicOffsetsByTimestamp(topic, ts);
    }
    await admin.deleteTopics({ topics: [topic], timeout: 5000 });
    const listedAfterDelete = (await admin.listTopics()).includes(topic);
    return { created, createdAgain, listed, metadata, offsets, byTimestamp, listedAfterDelete };
  } finally {
    await producer.disconnect();
    await admin.disconnect();
  }
});
