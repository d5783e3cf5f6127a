// A server written with the official TypeScript v2 SDK alone (@modelcontextprotocol/server, no askback), for the
// agent runtime's interop tests (tests/interop/test_runtime_interop.py). Usage:
//
//   node interop/ts-asking-server.mjs [--port N]
//
// The port comes from --port, then TS_ASKING_SERVER_PORT, else any free one. It serves Streamable HTTP at
// http://127.0.0.1:<port>/mcp and, once listening, prints ONE line to stdout: `listening http://127.0.0.1:<port>/mcp`.
// `requestState` is HMAC-sealed (createRequestStateCodec) under TS_ASKING_SERVER_STATE_KEY (at least 32 bytes; a
// key of this process's own when unset), so a restarted server with the same key accepts a retry too.
//
// It asks the way the SDK's examples/mrtr/server.ts does, for protocol 2026-07-28: the tool RETURNS
// `inputRequired({ inputRequests, requestState })` and is called again by the client with `inputResponses` and
// the echoed `requestState` (verified by the seam before the handler runs, read with ctx.mcpReq.requestState()).
// `createMcpHandler` builds a fresh server for every HTTP request, so the state is all that survives between rounds.
//
// - `deploy({ env })`: round 1 asks a form under key `confirm` ({ confirm: boolean, note?: string }); on accept
//   with confirm true, round 2 asks a URL-mode question under key `sign_in` (https://example.com/sign-in?env=ENV);
//   on its accept the text is `Deployed ENV (note: NOTE).` (or `Deployed ENV.` without a note). A decline or cancel
//   of either question ends the call with `Not deployed: <key> was <action>.`; confirm false with
//   `Not deployed: not confirmed.`
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

import {
    acceptedContent,
    createMcpHandler,
    createRequestStateCodec,
    fromJsonSchema,
    inputRequired,
    inputResponse,
    McpServer,
} from '@modelcontextprotocol/server';

const { values } = parseArgs({ options: { port: { type: 'string' } } });
const port = Number(values.port ?? process.env.TS_ASKING_SERVER_PORT ?? 0);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
    process.stderr.write(`ts-asking-server: the port must be an integer in 0..65535, not ${port}\n`);
    process.exit(2);
}

const stateCodec = createRequestStateCodec({
    key: process.env.TS_ASKING_SERVER_STATE_KEY ?? randomBytes(32),
    ttlSeconds: 600,
});

const CONFIRM_SCHEMA = {
    type: 'object',
    properties: {
        confirm: { type: 'boolean', title: 'Deploy?' },
        note: { type: 'string', title: 'Note for the deploy log' },
    },
    required: ['confirm'],
};
const confirmSchema = fromJsonSchema(CONFIRM_SCHEMA);

const text = (value) => ({ content: [{ type: 'text', text: value }] });

function askConfirm(env) {
    return stateCodec.mint({ step: 'confirm', env }).then((requestState) =>
        inputRequired({
            inputRequests: { confirm: inputRequired.elicit({ message: `Deploy to ${env}?`, requestedSchema: CONFIRM_SCHEMA }) },
            requestState,
        }),
    );
}

function askSignIn(env, note) {
    return stateCodec.mint({ step: 'sign-in', env, note }).then((requestState) =>
        inputRequired({
            inputRequests: {
                sign_in: inputRequired.elicitUrl({
                    message: `Sign in to deploy to ${env}, then come back.`,
                    url: `https://example.com/sign-in?env=${encodeURIComponent(env)}`,
                }),
            },
            requestState,
        }),
    );
}

function buildServer() {
    const server = new McpServer(
        { name: 'ts-asking-server', version: '1.0.0' },
        { capabilities: { tools: {} }, requestState: { verify: stateCodec.verify } },
    );
    server.registerTool(
        'deploy',
        {
            description: 'Deploy to an environment after a confirmation and a sign-in.',
            inputSchema: fromJsonSchema({ type: 'object', properties: { env: { type: 'string' } }, required: ['env'] }),
        },
        async ({ env }, ctx) => {
            const state = ctx.mcpReq.requestState(); // the verified payload, or undefined on the first round
            const responses = ctx.mcpReq.inputResponses;
            if (state?.step === 'sign-in') {
                const signIn = inputResponse(responses, 'sign_in');
                if (signIn.kind !== 'elicit') return askSignIn(state.env, state.note);
                if (signIn.action !== 'accept') return text(`Not deployed: sign_in was ${signIn.action}.`);
                return text(state.note ? `Deployed ${state.env} (note: ${state.note}).` : `Deployed ${state.env}.`);
            }
            const confirm = inputResponse(responses, 'confirm');
            if (state?.step !== 'confirm' || confirm.kind !== 'elicit') return askConfirm(env);
            if (confirm.action !== 'accept') return text(`Not deployed: confirm was ${confirm.action}.`);
            const content = acceptedContent(responses, 'confirm', confirmSchema);
            if (content === undefined) return askConfirm(env); // content that does not fit the form: ask again
            if (!content.confirm) return text('Not deployed: not confirmed.');
            return askSignIn(state.env, content.note);
        },
    );
    return server;
}

const handler = createMcpHandler(buildServer, {
    onerror: (error) => process.stderr.write(`ts-asking-server: ${error.stack ?? error.message}\n`),
});

// createMcpHandler is web-standard (Request -> Response); this is the node:http face for it, since the SDK's own
// Node adapter (@modelcontextprotocol/node) has no 2.4 release.
async function serve(req, res) {
    const url = new URL(req.url ?? '/', `http://${req.headers.host ?? '127.0.0.1'}`);
    if (url.pathname !== '/mcp') {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('Not found: the MCP endpoint is /mcp\n');
        return;
    }
    const headers = new Headers();
    for (let i = 0; i < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i], req.rawHeaders[i + 1]);
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const aborted = new AbortController();
    res.on('close', () => {
        if (!res.writableFinished) aborted.abort();
    });
    const request = new Request(url, {
        method: req.method,
        headers,
        body: req.method === 'GET' || req.method === 'HEAD' ? undefined : Buffer.concat(chunks),
        signal: aborted.signal,
    });
    const response = await handler.fetch(request);
    res.writeHead(response.status, [...response.headers].flat());
    if (response.body) {
        for await (const chunk of response.body) res.write(chunk);
    }
    res.end();
}

const http = createServer((req, res) => {
    serve(req, res).catch((error) => {
        process.stderr.write(`ts-asking-server: ${error.stack ?? error}\n`);
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
        res.end();
    });
});
http.listen(port, '127.0.0.1', () => {
    process.stdout.write(`listening http://127.0.0.1:${http.address().port}/mcp\n`);
});
const exit = async () => {
    await handler.close();
    http.close();
    process.exit(0);
};
process.on('SIGINT', exit);
process.on('SIGTERM', exit);
