// Starts s3rver (tests/remote/node_modules, from package.json) for tests/remote_test.cpp:
// node s3rver.js <port> <data folder>. It listens on 127.0.0.1:<port>, keeps its objects in the
// folder, has one bucket "ferry" and the key pair S3RVER / S3RVER, and prints "ready" once up.
'use strict';
const S3rver = require('s3rver');

const [port, directory] = process.argv.slice(2);
new S3rver({
  address: '127.0.0.1',
  port: Number(port),
  directory,
  silent: true,
  configureBuckets: [{ name: 'ferry' }],
})
  .run()
  .then(
    () => console.log('ready'),
    (e) => {
      console.error(e);
      process.exit(1);
    },
  );
