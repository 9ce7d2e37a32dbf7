// kafkajs producer under injected faults: sends COUNT messages one at a time (acks -1, not
// idempotent, so a retry after an error would duplicate a batch the broker had written) and
// prints each send's offset and how long it took.
'use strict';

const { run } = require('./common');

run(async (kafka, topic) => {
  const count = Number(process.argv[4] || '3');
  const producer = kafka.producer({ allowAutoTopicCreation: true, idempotent: false });
  await producer.connect();
  try {
    const sends = [];
    for (let i = 0; i < count; i += 1) {
      const started = Date.now();
      const [result] = await producer.send({ topic, acks: -1, messages: [{ value: `kafkajs-${i}`, partition: 0 }] });
      sends.push({ offset: Number(result.baseOffset), errorCode: result.errorCode, ms: Date.now() - started });
    }
    return sends;
  } finally {
    await producer.disconnect();
  }
});
