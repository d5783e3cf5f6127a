#!/usr/bin/env bash
# Runs the official MCP conformance suite's client scenarios (@modelcontextprotocol/conformance, pinned in
# interop/package.json) with askback's agent runtime as the client under test (src/askback/runtime/conformance.py).
#
#   interop/conformance-client.sh [SCENARIO...]        (default: the seven non-auth client scenarios of 2026-07-28)
#
# For each scenario the suite starts its mock server and runs `PY -m askback.runtime.conformance SERVER_URL`; this
# prints one summary line per scenario (checks passed, skipped, and every failing check by id). Exits non-zero when
# any scenario fails; the suite's results are then kept and their folder printed. No expected-failures file: every
# scenario passes. (The 25 `auth/*` client scenarios of the 2026-07-28 requirements are not run: the runtime does no
# OAuth of its own.)
#
# Works from a fresh clone: installs the suite (`npm ci`) and Node 22 (interop/node.sh) when missing. Needs npm on
# PATH and askback installed in the Python it finds: $PYTHON, else the active virtualenv's, else ./.venv's, else
# python3. CONFORMANCE_OUT keeps the suite's results in that folder instead; CONFORMANCE_SPEC_VERSION runs another
# revision; CONFORMANCE_FORCE=1 runs a scenario at a revision it is not listed for (e.g. json-schema-ref-no-deref on
# the 2025-11-25 handshake).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(
  tools_call
  request-metadata
  sep-2322-client-request-state
  http-standard-headers
  http-custom-headers
  http-invalid-tool-headers
  json-schema-ref-no-deref
)
# Every scenario here is required at 2026-07-28 and runs at that revision; the client picks its era from
# MCP_CONFORMANCE_PROTOCOL_VERSION, which the suite sets to this.
spec_version="${CONFORMANCE_SPEC_VERSION:-2026-07-28}"

scratch="$(mktemp -d "${TMPDIR:-/tmp}/askback-conformance-client.XXXXXX")"
out="${CONFORMANCE_OUT:-$scratch/results}"
keep=0

finish() {
  if [ "$keep" = 1 ]; then
    echo "conformance client: the suite's results are in $out, its logs in $scratch" >&2
  else
    rm -rf "$scratch"
  fi
}
trap finish EXIT
trap 'exit 130' INT TERM

who="conformance client"
# shellcheck source=interop/suite.sh
. "$here/suite.sh"

case "$py" in
  *" "*)
    echo "conformance client: the suite splits its --command on spaces; use a Python whose path has none ($py)" >&2
    exit 2
    ;;
esac

failed=0
for scenario in "${scenarios[@]}"; do
  safe="${scenario//\//_}"
  log="$scratch/$safe.log"
  rc=0
  (cd "$root" && "$suite" client --command "$py -m askback.runtime.conformance" --scenario "$scenario" \
    --spec-version "$spec_version" ${CONFORMANCE_FORCE:+--force} -o "$out/$safe") >"$log" 2>&1 || rc=$?
  # One line per scenario: checks passed (SKIPPED ones are counted apart and fail nothing), and every check that
  # failed or warned, by id. The suite's exit status (which also covers the client's own) decides with them.
  verdict=0
  "$py" - "$scenario" "$spec_version" "$rc" "$out/$safe" <<'EOF' || verdict=$?
import json, pathlib, sys
scenario, version, rc, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), pathlib.Path(sys.argv[4])
runs = sorted(out.rglob("checks.json"))
checks = json.loads(runs[-1].read_text()) if runs else []
scored = [c for c in checks if c.get("status") not in ("SKIPPED", "INFO")]
passed = [c for c in scored if c.get("status") == "SUCCESS"]
bad = [c for c in scored if c.get("status") != "SUCCESS"]
skipped = sum(c.get("status") == "SKIPPED" for c in checks)
ok = rc == 0 and bool(checks) and not bad
line = f"conformance client {scenario} ({version}): {'PASS' if ok else 'FAIL'} {len(passed)}/{len(scored)} checks"
if skipped:
    line += f", {skipped} skipped"
if not checks:
    line += "; no checks recorded"
elif rc != 0 and not bad:
    line += f"; the suite exited with status {rc} (did the client fail or time out?)"
for c in bad:
    line += f"\n  {c['status']} {c['id']} ({c.get('name')}): {c.get('errorMessage') or c.get('description')}"
print(line)
sys.exit(0 if ok else 1)
EOF
  if [ "$verdict" -ne 0 ]; then
    failed=1
    tail -n 30 "$log" >&2
  fi
done

if [ "$failed" -ne 0 ]; then
  keep=1
  exit 1
fi
