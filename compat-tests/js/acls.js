// kafkajs admin against a broker without an authorizer: describeAcls, createAcls and deleteAcls
// each fail; the result records how (error name, Kafka error type and code) for the Python test.
'use strict';

const { AclResourceTypes, AclOperationTypes, AclPermissionTypes, ResourcePatternTypes } = require('kafkajs');
const { run } = require('./common');

async function outcome(call) {
  try {
    return { ok: await call() };
  } catch (error) {
    return { error: { name: error.name, type: error.type, code: error.code, retriable: error.retriable } };
  }
}

run(async (kafka, topic) => {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const binding = {
      resourceType: AclResourceTypes.TOPIC,
      resourceName: topic,
      resourcePatternType: ResourcePatternTypes.LITERAL,
      principal: 'User:alice',
      host: '*',
      operation: AclOperationTypes.READ,
      permissionType: AclPermissionTypes.ALLOW,
    };
    const anything = {
      resourceType: AclResourceTypes.ANY,
      resourcePatternType: ResourcePatternTypes.ANY,
      operation: AclOperationTypes.ANY,
      permissionType: AclPermissionTypes.ANY,
    };
    const described = await outcome(() => admin.describeAcls(anything));
    const created = await outcome(() => admin.createAcls({ acl: [binding] }));
    const deleted = await outcome(() => admin.deleteAcls({ filters: [anything] }));
    return { described, created, deleted };
  } finally {
    await admin.disconnect();
  }
});
