#!/usr/bin/env node
// appconfig-client.js runs the official IBM App Configuration JavaScript client SDK
// (npm ibm-appconfiguration-js-client-sdk@0.2.0-beta.3, installed unmodified from the
// lock file beside this script) headless under Node 20, against the service URL given on
// the command line: a simulated instance (bench/sim) or fairlead's relay. fairlead's tests
// and bench start many of these (bench/appconfig/sdk.go) and read their stdout.
//
//   node appconfig-client.js --url http://127.0.0.1:PORT --guid GUID --apikey KEY \
//        --collection C --environment E (--feature ID | --property ID) \
//        [--region us-south] [--entity entity-1] [--updates N] [--timeout 30s]
//
// stdout holds this script's lines only, one JSON object each:
//   {"event":"ready","value":V}          setContext resolved: the first Registration arrived
//   {"event":"update","value":V,"n":K}   the K-th configurationUpdate (an SSEConfig_payload)
//   {"event":"rejected","status":401}    setContext rejected (a non-200 or non-event-stream answer),
//   {"event":"rejected","error":"..."}   ... or a network error before the first Registration
//   {"event":"missing","error":"..."}    the feature or property is not in the configuration
//   {"event":"timeout"}                  --timeout passed first
// V is the current value of the feature or property for --entity. The SDK's own logging and
// the EventSource polyfill's messages go to stderr.
//
// Exit status: 0 once --updates N updates were seen (N = 0: right after "ready"; without
// --updates the script runs until killed or --timeout), 1 setContext rejected, 2 bad
// arguments or the SDK refused them, 3 --timeout passed first, 4 feature/property missing.
'use strict';

// The SDK is written for browsers. Node 20 has fetch, Headers, Response, TextDecoder and
// AbortController, which the bundled EventSource polyfill uses, but neither `window`
// (getInstance checks `'fetch' in window` and registers a beforeunload listener) nor
// `navigator` (its userAgent goes into the User-Agent header). Both must exist before the
// SDK's first getInstance; providing them before require is simplest.
if (typeof globalThis.window === 'undefined') {
  globalThis.window = { fetch: globalThis.fetch, addEventListener() {} };
}
if (typeof globalThis.navigator === 'undefined') {
  globalThis.navigator = { userAgent: `Node.js/${process.versions.node}` };
}
// The SDK logs with console.log: send that to stderr so that stdout stays ours.
console.log = console.error;
console.info = console.error;
console.debug = console.error;

const KNOWN = ['url', 'guid', 'apikey', 'collection', 'environment', 'feature', 'property',
  'region', 'entity', 'updates', 'timeout'];
const REQUIRED = ['url', 'guid', 'apikey', 'collection', 'environment'];

class UsageError extends Error {}

function parseDuration(text) {
  const m = /^(\d+)(ms|s)?$/.exec(text);
  if (!m) throw new UsageError(`--timeout ${JSON.stringify(text)}: want e.g. 30s or 500ms`);
  return Number(m[1]) * (m[2] === 'ms' ? 1 : 1000);
}

function parseArgs(argv) {
  const opts = { region: 'us-south', entity: 'entity-1', updates: '-1', timeout: '0' };
  for (let i = 0; i < argv.length; i += 1) {
    const m = /^--([a-z]+)(?:=(.*))?$/s.exec(argv[i]);
    if (!m || !KNOWN.includes(m[1])) throw new UsageError(`unknown argument ${JSON.stringify(argv[i])}`);
    let value = m[2];
    if (value === undefined) {
      i += 1;
      if (i === argv.length) throw new UsageError(`--${m[1]} needs a value`);
      value = argv[i];
    }
    opts[m[1]] = value;
  }
  for (const name of REQUIRED) {
    if (!opts[name]) throw new UsageError(`--${name} is required`);
  }
  if (Boolean(opts.feature) === Boolean(opts.property)) {
    throw new UsageError('give exactly one of --feature and --property');
  }
  const updates = Number(opts.updates);
  if (!Number.isInteger(updates)) throw new UsageError('--updates must be an integer');
  return { ...opts, updates, timeout: parseDuration(opts.timeout) };
}

function emit(line) {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

// finish writes line (if any) and exits once stdout is flushed: process.exit right after a
// write to a pipe could lose the line.
function finish(code, line) {
  if (line) emit(line);
  process.stdout.write('', () => process.exit(code));
}

function usage(message) {
  process.stderr.write(`appconfig-client: ${message}\n`);
  process.exit(2);
}

async function main() {
  let opts;
  try {
    opts = parseArgs(process.argv.slice(2));
  } catch (e) {
    usage(e.message);
  }
  if (opts.timeout > 0) setTimeout(() => finish(3, { event: 'timeout' }), opts.timeout);

  const AppConfiguration = require('ibm-appconfiguration-js-client-sdk').default;
  let sdk;
  try {
    AppConfiguration.overrideServiceUrl(opts.url); // read by init, so it comes first
    sdk = AppConfiguration.getInstance();
    sdk.setLogLevel('error');
    sdk.init(opts.region, opts.guid, opts.apikey);
  } catch (e) {
    usage(e.message);
  }

  // value evaluates the feature or property as the application would (which also records
  // metering); a missing id ends the script.
  let done = false;
  const value = () => {
    try {
      const item = opts.feature ? sdk.getFeature(opts.feature) : sdk.getProperty(opts.property);
      return item.getCurrentValue(opts.entity);
    } catch (e) {
      done = true;
      finish(4, { event: 'missing', error: e.message });
      return undefined;
    }
  };

  let updates = 0;
  sdk.emitter.on('configurationUpdate', () => {
    if (done) return;
    updates += 1;
    const v = value();
    if (done) return;
    emit({ event: 'update', value: v, n: updates });
    if (opts.updates >= 0 && updates >= opts.updates) {
      done = true;
      finish(0);
    }
  });

  try {
    await sdk.setContext(opts.collection, opts.environment);
  } catch (err) {
    // err is the polyfill's error event: {status, statusText, headers} for an answer that
    // is not a 200 event stream, {error} for a network error or an early end of stream.
    const line = { event: 'rejected' };
    if (err && err.status !== undefined) line.status = err.status;
    if (err && err.error) line.error = String(err.error.message || err.error);
    done = true;
    finish(1, line);
    return;
  }
  const v = value();
  if (done) return;
  emit({ event: 'ready', value: v });
  if (opts.updates === 0) {
    done = true;
    finish(0);
  }
}

main();
