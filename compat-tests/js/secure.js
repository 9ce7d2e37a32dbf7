// kafkajs over TLS and/or SASL: node secure.js <bootstrap> <topic> '<json options>' where the
// options are {"ca": "<PEM path or null>", "sasl": {"mechanism", "username", "password"} or null}.
// Produces two messages and consumes them back with a group; prints what it read.
'use strict';

const fs = require('fs');
const { Kafka, logLevel } = require('kafkajs');

async function main() {
  const [bootstrap, topic, optionsText] = process.argv.slice(2);
  const options = JSON.parse(optionsText);
  const kafka = new Kafka({
    clientId: 'kafkacompat-compat-tests',
    brokers: [bootstrap],
    connectionTimeout: 5000,
    requestTimeout: 10000,
    retry: { retries: 0 },
    ssl: options.ca ? { ca: [fs.readFileSync(options.ca, 'utf-8')] } : false,
    sasl: options.sasl || undefined,
    logLevel: logLevel.NOTHING,
  });
  const producer = kafka.producer({ allowAutoTopicCreation: true });
  await producer.connect();
  await producer.send({ topic, messages: [{ value: 'one' }, { value: 'two' }] });
  await producer.disconnect();
  const consumer = kafka.consumer({ groupId: `g-${topic}` });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const values = [];
  await new Promise((resolve, reject) => {
    consumer.run({ eachMessage: async ({ message }) => {
      values.push(message.value.toString());
      if (values.length === 2) resolve();
    } }).catch(reject);
  });
  await consumer.disconnect();
  return { values };
}

main()
  .then((result) => { process.stdout.write(JSON.stringify(result)); process.exit(0); })
  .catch((error) => { process.stdout.write(JSON.stringify({ error: error.name, message: error.message })); process.exit(0); });
