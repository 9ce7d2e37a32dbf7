// Shared by the kafkajs scripts: a client whose logs go to stderr (stdout carries only the JSON
// result the Python test reads), and a runner that prints the result and sets the exit code.
'use strict';

const { Kafka, logLevel } = require('kafkajs');

function client(bootstrap) {
  return new Kafka({
    clientId: 'kafkacompat-compat-tests',
    brokers: bootstrap.split(','),
    connectionTimeout: 5000,
    requestTimeout: 10000,
    retry: { retries: 3, initialRetryTime: 100 },
    logLevel: logLevel.WARN,
    logCreator: () => ({ namespace, log }) => {
      process.stderr.write(`${namespace}: ${log.message} ${JSON.stringify(log)}\n`);
    },
  });
}

function run(main) {
  const [bootstrap, topic] = process.argv.slice(2);
  main(client(bootstrap), topic)
    .then((result) => {
      process.stdout.write(JSON.stringify(result));
      process.exit(0);
    })
    .catch((error) => {
      process.stderr.write(`FAILED: ${error.stack || error}\n${JSON.stringify(error)}\n`);
      process.exit(1);
    });
}

module.exports = { client, run };
