// The official TypeScript v2 client (@modelcontextprotocol/client) walking askback's META exposure, for
// tests/interop/test_meta_ts.py. Usage:
//
//   node interop/ts-meta-client.mjs URL TOOL --user NAME
//
// The client declares no elicitation at all and is pinned to 2026-07-28. It lists the tools, calls
// execute_tool(TOOL), and when that answers not_connected or reauth_needed asks connect_account for the link, prints
// {"link": URL} on one line and waits for one line on stdin (the person has finished at the link); then it calls
// check_readiness(TOOL) and execute_tool(TOOL) again. It prints ONE more JSON line with every structured result and
// exits 0 whenever it could report: the Python side decides what is right. Exits 2 on bad usage.
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const { values, positionals } = parseArgs({ allowPositionals: true, options: { user: { type: 'string' } } });
const [url, tool] = positionals;
if (!url || !tool || !values.user) {
    process.stderr.write('usage: ts-meta-client.mjs URL TOOL --user NAME\n');
    process.exit(2);
}

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const client = new Client(
    { name: 'askback-interop-ts-meta', version: '1' },
    { capabilities: {}, versionNegotiation: { mode: { pin: '2026-07-28' } } },
);
const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer demo-${values.user}` } },
});

const report = { ok: false, protocolVersion: null, tools: [], calls: [], errorMessage: null };

async function call(name, args) {
    const result = await client.callTool({ name, arguments: args }, { timeout: 20_000 });
    const text = (result.content ?? []).map(c => c.text ?? '').join('\n');
    report.calls.push({ name, structured: result.structuredContent ?? null, isError: result.isError ?? false, text });
    return result.structuredContent ?? {};
}

try {
    await client.connect(transport, { timeout: 20_000 });
    report.protocolVersion = client.getNegotiatedProtocolVersion() ?? null;
    report.tools = (await client.listTools()).tools.map(t => ({
        name: t.name,
        hasInputSchema: Boolean(t.inputSchema),
        hasOutputSchema: Boolean(t.outputSchema),
    }));
    const first = await call('execute_tool', { name: tool });
    if (first.status === 'not_connected' || first.status === 'reauth_needed') {
        const link = await call('connect_account', { connection: first.connection });
        process.stdout.write(JSON.stringify({ link: link.url }) + '\n');
        await lines.next();
        await call('check_readiness', { name: tool });
        await call('execute_tool', { name: tool });
    }
    report.ok = true;
} catch (error) {
    report.errorMessage = String(error?.message ?? error);
} finally {
    await client.close().catch(() => {});
}
process.stdout.write(JSON.stringify(report) + '\n');
process.exit(0);
