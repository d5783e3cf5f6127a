// The official TypeScript v2 client (@modelcontextprotocol/client) against askback's demo server, for
// tests/interop/test_ts_client.py. Usage:
//
//   node interop/ts-client.mjs URL MODE SCENARIO [--project prj_99|prj_42] [--user NAME]
//
// MODE is `modern` (pinned to 2026-07-28: questions arrive in `input_required` results and the client retries) or
// `legacy` (2025-11-25: questions arrive as `elicitation/create` requests on the session). SCENARIO is one of
// delete-accept, delete-decline, deploy-production, no-elicitation. The bearer token is `demo-<user>` (default
// `ts-MODE-SCENARIO`). Prints ONE JSON line saying what happened and exits 0 whenever it could report: the Python
// side decides what is right. Exits 2 on bad usage.
import { parseArgs } from 'node:util';

import { Client, ProtocolError, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const PROJECTS = { prj_99: 'billing-legacy', prj_42: 'web-frontend' };
const SCENARIOS = ['delete-accept', 'delete-decline', 'deploy-production', 'no-elicitation'];

const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { project: { type: 'string', default: 'prj_99' }, user: { type: 'string' } },
});
const [url, mode, scenario] = positionals;
const projectId = values.project;
if (!url || !['modern', 'legacy'].includes(mode) || !SCENARIOS.includes(scenario) || !(projectId in PROJECTS)) {
    process.stderr.write(
        `usage: ts-client.mjs URL modern|legacy ${SCENARIOS.join('|')} [--project ${Object.keys(PROJECTS).join('|')}] [--user NAME]\n`,
    );
    process.exit(2);
}
const user = values.user ?? `ts-${mode}-${scenario}`;

const asked = [];
const elicits = scenario !== 'no-elicitation';

// Answers by looking at the fields the server asks for, as a person reading the form would.
async function answer(request) {
    const properties = Object.keys(request.params?.requestedSchema?.properties ?? {});
    asked.push(...properties);
    if (scenario === 'delete-decline') return { action: 'decline' };
    const content = {};
    for (const name of properties) {
        if (name === 'project_name') content[name] = PROJECTS[projectId];
        else if (name === 'environment') content[name] = 'production';
        else if (name === 'confirm') content[name] = true;
        else return { action: 'cancel' }; // a question this script does not know: dismiss it, and the test will see it
    }
    return { action: 'accept', content };
}

const client = new Client(
    { name: 'askback-interop-ts', version: '1' },
    {
        capabilities: elicits ? { elicitation: { form: {} } } : {},
        versionNegotiation: { mode: mode === 'modern' ? { pin: '2026-07-28' } : 'legacy' },
        inputRequired: { maxRounds: 5 },
    },
);
if (elicits) client.setRequestHandler('elicitation/create', answer);

const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer demo-${user}` } },
});

const report = { ok: false, text: null, isError: null, errorCode: null, errorMessage: null, asked, protocolVersion: null };
try {
    await client.connect(transport, { timeout: 20_000 });
    report.protocolVersion = client.getNegotiatedProtocolVersion() ?? null;
    report.era = client.getProtocolEra() ?? null;
    // Without elicitation delete_project cannot go on at all (-32021); deploy would fall back to its argument.
    const call = scenario !== 'deploy-production'
        ? { name: 'delete_project', arguments: { project_id: projectId } }
        : { name: 'deploy', arguments: { service: `ts-${mode}` } };
    const result = await client.callTool(call, { timeout: 20_000 });
    report.ok = true;
    report.isError = result.isError ?? false;
    report.text = (result.content ?? []).map(c => c.text ?? '').join(' ');
} catch (error) {
    report.errorCode = typeof error?.code === 'number' ? error.code : null;
    report.errorClass = error?.constructor?.name ?? typeof error;
    report.errorMessage = String(error?.message ?? error);
    if (ProtocolError.isInstance(error) && error.data !== undefined) report.errorData = error.data;
} finally {
    await client.close().catch(() => {});
}
process.stdout.write(JSON.stringify(report) + '\n');
process.exit(0);
