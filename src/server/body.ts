/**
 * Reads a request body into `req.body` (a Buffer). The common case, a body without Content-Encoding,
 * is collected here with one `Buffer.concat`; a compressed body goes to express's reader
 * (body-parser), which inflates it. In the overhead benchmark's profile body-parser's generality
 * (media-type checks, charset handling, http-errors) was ~10% of the router's CPU per request.
 */
import express from 'express';
import { RouterError } from '../core/errors.js';
import { expectsContinue } from '../core/node-http.js';
import { passed } from '../core/phases.js';
import { type ChainHandler } from './app.js';

export const bodyTooLarge = (): RouterError => new RouterError('REQUEST_TOO_LARGE', 'The request body is larger than this router accepts.');
export const bodyTruncated = (): RouterError => new RouterError('INVALID_REQUEST', 'The request body ended before its declared length.');

export function bodyReader(limit: number): ChainHandler {
  const inflating = express.raw({ type: () => true, limit });
  return (req, res, next): void => {
    // a request whose client waits for `100 Continue` (core/node-http.ts `expectsContinue`): sent now
    if (req.headers.expect !== undefined && expectsContinue.has(req)) {
      expectsContinue.delete(req);
      // a declared length over the limit is refused without soliciting the body
      const declared = req.headers['content-length'];
      if (declared !== undefined && Number(declared) > limit) return next(bodyTooLarge());
      res.writeContinue();
    }
    const encoding = req.headers['content-encoding'];
    if (encoding !== undefined && encoding.toLowerCase() !== 'identity') return void inflating(req, res, next);
    const declared = req.headers['content-length'];
    if (declared !== undefined && Number(declared) > limit) return next(bodyTooLarge());
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = (err?: RouterError): void => {
      if (done) return;
      done = true; // the listeners stay (they go with the request): once done, they do nothing
      if (err) {
        // stop reading; Node discards whatever is left of the body once the error response is sent
        req.pause();
        return next(err);
      }
      req.body = Buffer.concat(chunks, size);
      passed(res, 'body_read');
      next();
    };
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > limit) finish(bodyTooLarge());
      else chunks.push(chunk);
    };
    const onEnd = (): void => finish();
    const onError = (): void => finish(bodyTruncated());
    const onClose = (): void => {
      if (!req.complete) finish(bodyTruncated());
    };
    req.on('data', onData).on('end', onEnd).on('error', onError).on('close', onClose);
  };
}
