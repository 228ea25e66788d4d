// Starts s3rver (tests/remote/node_modules, from package.json) for tests/remote_test.cpp:
// node s3rver.js <port> <data folder>. It listens on 127.0.0.1:<port>, keeps its objects in the
// folder, has one bucket "ferry" and the key pair S3RVER / S3RVER, and prints "ready" once up.
//
// s3rver 3.7.1 checks that a key id exists but not a SigV4 signature (its authentication
// middleware: "Signature version 4 calculation is unimplemented"; its
// allowMismatchedSignatures option concerns version 2 only), so a request signed with a wrong
// secret would pass. The middleware below, first in line, checks the signature of each request
// signed with AWS4-HMAC-SHA256 in its Authorization header, as S3 does (the canonical request:
// method, path as sent, sorted query, the signed headers, the payload hash), and answers 403
// SignatureDoesNotMatch, with S3's XML error, when it is wrong.
'use strict';
const crypto = require('crypto');
const S3rver = require('s3rver');

const SECRETS = new Map([['S3RVER', 'S3RVER']]); // s3rver's own key pair

const hmac = (key, text) => crypto.createHmac('sha256', key).update(text).digest();
const sha256 = (text) => crypto.createHash('sha256').update(text).digest('hex');

function canonicalQuery(query) {
  if (!query) return '';
  return query
    .split('&')
    .filter((p) => p.length > 0)
    .map((p) => (p.includes('=') ? p : p + '='))
    .sort()
    .join('&');
}

// Whether the request's SigV4 signature is right; undefined when it is not signed so, or its
// key id is not ours (s3rver answers those itself).
function signatureMatches(req) {
  const auth = req.headers.authorization || '';
  if (!auth.startsWith('AWS4-HMAC-SHA256 ')) return undefined;
  const parts = new Map(
    auth
      .slice('AWS4-HMAC-SHA256 '.length)
      .split(',')
      .map((p) => p.trim().split('='))
      .map(([k, ...v]) => [k, v.join('=')]),
  );
  const credential = (parts.get('Credential') || '').split('/');
  const secret = SECRETS.get(credential[0]);
  if (secret === undefined || credential.length !== 5) return undefined;
  // The payload's hash as signed: the header's (S3 wants it); without it, curl signed an empty
  // body's hash, and a body's is not checked here.
  const emptyBody = ['GET', 'HEAD', 'DELETE'].includes(req.method);
  const payload = req.headers['x-amz-content-sha256'] || (emptyBody ? sha256('') : undefined);
  if (payload === undefined) return undefined;
  const signedHeaders = parts.get('SignedHeaders') || '';
  const [path, query] = req.url.split('?', 2);
  const headers = signedHeaders
    .split(';')
    .map((h) => `${h}:${String(req.headers[h] ?? '').trim().replace(/\s+/g, ' ')}\n`)
    .join('');
  const canonical = [
    req.method,
    path,
    canonicalQuery(query),
    headers,
    signedHeaders,
    payload,
  ].join('\n');
  const scope = credential.slice(1).join('/');
  const toSign = ['AWS4-HMAC-SHA256', req.headers['x-amz-date'], scope, sha256(canonical)].join(
    '\n',
  );
  let key = hmac('AWS4' + secret, credential[1]);
  for (const part of credential.slice(2)) key = hmac(key, part);
  return hmac(key, toSign).toString('hex') === parts.get('Signature');
}

const [port, directory] = process.argv.slice(2);
const server = new S3rver({
  address: '127.0.0.1',
  port: Number(port),
  directory,
  silent: true,
  configureBuckets: [{ name: 'ferry' }],
});
// First in line (Koa composes its middleware when the server starts listening).
server.middleware.unshift(async (ctx, next) => {
  if (signatureMatches(ctx.req) === false) {
    const message =
      'The request signature we calculated does not match the signature you provided. ' +
      'Check your key and signing method.';
    ctx.status = 403;
    ctx.set('x-amz-error-code', 'SignatureDoesNotMatch');
    ctx.type = 'application/xml';
    ctx.body =
      '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SignatureDoesNotMatch</Code>' +
      `<Message>${message}</Message></Error>`;
    return;
  }
  await next();
});
server.run().then(
  () => console.log('ready'),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
