// The official TypeScript tasks client (@modelcontextprotocol/ext-tasks on @modelcontextprotocol/client) running one
// tool call as a task, for tests/interop/test_tasks_ts.py. Usage:
//
//   node interop/ts-tasks-client.mjs URL TOOL ARGS_JSON --user NAME --answers ANSWERS_JSON
//
// The client is pinned to 2026-07-28 with `Authorization: Bearer demo-NAME`. An ext-tasks session calls TOOL, polls at
// the server's pollIntervalMs and answers each question through tasks/update with ANSWERS_JSON's entry for its key:
// askback's wire key is `<question key>.<round>`, matched on what precedes its last `.`. A question without an entry
// is declined. `rawDispatch` (the task wire, which the SDK Client refuses) is a second transport of the same SDK that
// numbers its own requests. It prints ONE JSON line {ok, taskId, created, inputRequests, declined, served: [[Mcp-Method,
// X-Askback-Instance], ...], result, errorMessage} and exits 0 whenever it could report; 2 on bad usage.
import { parseArgs } from 'node:util';

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { createTaskSessionFromClient } from '@modelcontextprotocol/ext-tasks/client';

const PROTOCOL_VERSION = '2026-07-28';
const REQUEST_TIMEOUT_MS = 20_000;
const SETTLE_TIMEOUT_MS = 60_000;

const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { user: { type: 'string' }, answers: { type: 'string' } },
});
const [url, tool, argsJson] = positionals;
let args;
let answers;
try {
    args = JSON.parse(argsJson ?? '');
    answers = JSON.parse(values.answers ?? '');
} catch {
    args = undefined;
}
if (!url || !tool || !values.user || !isObject(args) || !isObject(answers)) {
    process.stderr.write('usage: ts-tasks-client.mjs URL TOOL ARGS_JSON --user NAME --answers ANSWERS_JSON\n');
    process.exit(2);
}

function isObject(value) {
    return value !== null && typeof value === 'object' && !Array.isArray(value);
}

const clientInfo = { name: 'askback-interop-ts-tasks', version: '1' };
const clientCapabilities = { elicitation: { form: {} }, extensions: { 'io.modelcontextprotocol/tasks': {} } };
const requestInit = { headers: { Authorization: `Bearer demo-${values.user}` } };
const served = [];

/** fetch, noting which instance answered each request. */
async function recordingFetch(input, init) {
    const response = await fetch(input, init);
    const method = new Headers(init?.headers).get('mcp-method') ?? init?.method ?? 'GET';
    served.push([method, response.headers.get('x-askback-instance')]);
    return response;
}

/** The host's own request path for the task wire: one transport, its own ids, each response matched to its request. */
function rawDispatcher(endpoint) {
    const transport = new StreamableHTTPClientTransport(endpoint, { requestInit, fetch: recordingFetch });
    const waiting = new Map();
    let counter = 0;
    let started;
    transport.onmessage = message => {
        const answered = 'method' in message ? undefined : waiting.get(message.id);
        if (answered !== undefined) answered(message);
    };
    const dispatch = async (request, options = {}) => {
        started ??= transport.start();
        await started;
        const id = `tasks-${++counter}`;
        const timeout = AbortSignal.timeout(options.context?.requestTimeoutMs ?? REQUEST_TIMEOUT_MS);
        const signal = options.signal === undefined ? timeout : AbortSignal.any([timeout, options.signal]);
        const response = new Promise((resolve, reject) => {
            waiting.set(id, resolve);
            signal.addEventListener('abort', () => reject(signal.reason), { once: true });
        });
        response.catch(() => {}); // a send that fails is reported by send itself
        try {
            await transport.send(
                { jsonrpc: '2.0', id, ...request },
                { requestSignal: signal, headers: options.context?.headers },
            );
            const message = await response;
            return 'error' in message
                ? { kind: 'error', error: message.error }
                : { kind: 'result', result: message.result };
        } finally {
            waiting.delete(id);
        }
    };
    return { dispatch, close: () => transport.close() };
}

const report = {
    ok: false,
    taskId: null,
    created: false,
    inputRequests: [],
    declined: [],
    served,
    result: null,
    errorMessage: null,
};
const errors = [];

function questionKey(wireKey) {
    const dot = wireKey.lastIndexOf('.');
    return dot > 0 ? wireKey.slice(0, dot) : wireKey;
}

async function onInputRequest(request, context) {
    const wireKey = context.inputId ?? '';
    report.inputRequests.push(wireKey);
    const key = Object.hasOwn(answers, wireKey) ? wireKey : questionKey(wireKey);
    if (request.kind !== 'elicitation' || !Object.hasOwn(answers, key)) {
        report.declined.push(wireKey);
        return { action: 'decline' };
    }
    return { action: 'accept', content: answers[key] };
}

const client = new Client(clientInfo, {
    capabilities: clientCapabilities,
    versionNegotiation: { mode: { pin: PROTOCOL_VERSION } },
});
const raw = rawDispatcher(new URL(url));
let session;
try {
    await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit, fetch: recordingFetch }), {
        timeout: REQUEST_TIMEOUT_MS,
    });
    session = createTaskSessionFromClient(client, {
        endpointId: `askback ${url}`,
        rawDispatch: raw.dispatch,
        v2RequestFraming: { protocolVersion: PROTOCOL_VERSION, clientInfo, clientCapabilities },
        onInputRequest,
        onError: error => errors.push(String(error?.message ?? error)),
    });
    const execution = await session.callTool(tool, args, { requestTimeoutMs: REQUEST_TIMEOUT_MS });
    report.created = execution.kind === 'task';
    report.taskId = execution.handle?.taskId ?? null;
    const { outcome } = await execution.settle({ signal: AbortSignal.timeout(SETTLE_TIMEOUT_MS) });
    if (outcome.status === 'completed') {
        report.result = outcome.result;
        report.ok = true;
    } else if (outcome.status === 'failed') {
        report.errorMessage = `the task failed: ${outcome.error.message}`;
    } else {
        report.errorMessage = 'the task was cancelled';
    }
} catch (error) {
    report.errorMessage = String(error?.message ?? error);
} finally {
    await session?.close().catch(() => {});
    await raw.close().catch(() => {});
    await client.close().catch(() => {});
}
if (report.errorMessage === null && errors.length > 0) report.errorMessage = errors.join('; ');
process.stdout.write(JSON.stringify(report) + '\n');
process.exit(0);
