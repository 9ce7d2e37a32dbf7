// kafkajs admin drives a partition reassignment: alterPartitionReassignments moves partition 0
// of the topic to the replicas given as the third argument (comma-separated broker ids), then
// listPartitionReassignments is polled until the move is no longer listed.
'use strict';

const { run } = require('./common');

const replicas = process.argv[4].split(',').map(Number);

run(async (kafka, topic) => {
  const admin = kafka.admin();
  await admin.connect();
  try {
    await admin.alterPartitionReassignments({
      topics: [{ topic, partitionAssignment: [{ partition: 0, replicas }] }],
      timeout: 30000,
    });
    const listings = [];
    const deadline = Date.now() + 90000;
    for (;;) {
      const listed = await admin.listPartitionReassignments({ topics: [{ topic, partitions: [0] }] });
      listings.push(listed);
      const moving = listed.topics.some((t) => t.partitions.length > 0);
      if (!moving) break;
      if (Date.now() > deadline) throw new Error(`still moving after 90 s: ${JSON.stringify(listed)}`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    let unknown = null;
    try {
      await admin.alterPartitionReassignments({
        topics: [{ topic, partitionAssignment: [{ partition: 0, replicas: [replicas[0], 99] }] }],
      });
    } catch (error) {
      unknown = error.name + ' ' + error.type + ' ' + JSON.stringify(error.errors || error.message);
    }
    return { listings, unknown };
  } finally {
    await admin.disconnect();
  }
});
