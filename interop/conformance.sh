#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance, pinned in interop/package.json) against
# askback's fixture server (tests/conformance/server.py), once per spec revision's frozen requirement set.
#
#   interop/conformance.sh [REVISION...]        (default: 2026-07-28 2025-11-25)
#
# Starts one `askback serve` (one worker, a fresh SQLite database and state key in a temporary folder, a free port
# on 127.0.0.1), runs `conformance server --requirements REVISION` for each revision, prints one summary line per
# revision, and stops the server. Exits non-zero when any required scenario fails; the suite's results and the
# server's log are then kept and their folder printed. No expected-failures file: every required scenario passes.
#
# Works from a fresh clone: installs the suite (`npm ci`) and Node 22 (interop/node.sh) when missing. Needs npm on
# PATH and askback installed in the Python it finds: $PYTHON, else the active virtualenv's, else ./.venv's, else
# python3. CONFORMANCE_OUT keeps the suite's results in that folder instead.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
revisions=("$@")
[ ${#revisions[@]} -gt 0 ] || revisions=(2026-07-28 2025-11-25)

scratch="$(mktemp -d "${TMPDIR:-/tmp}/askback-conformance.XXXXXX")"
out="${CONFORMANCE_OUT:-$scratch/results}"
server_pid=""
keep=0

stop_server() {
  [ -n "$server_pid" ] || return 0
  kill -TERM "$server_pid" 2>/dev/null || true
  for _ in $(seq 100); do
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}
finish() {
  stop_server
  if [ "$keep" = 1 ]; then
    echo "conformance: the suite's results are in $out, the server's log in $scratch/server.log" >&2
  else
    rm -rf "$scratch"
  fi
}
trap finish EXIT
trap 'exit 130' INT TERM

who="conformance"
# shellcheck source=interop/suite.sh
. "$here/suite.sh"

port="$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
key="$("$py" -c 'import secrets; print(secrets.token_urlsafe(48))')"
(
  cd "$root"
  exec env ASKBACK_DATABASE_URL="sqlite:///$scratch/askback.db" ASKBACK_STATE_KEYS="$key" \
    "$py" -m askback serve tests.conformance.server:server --host 127.0.0.1 --port "$port" --workers 1 \
    --log-level warning --log-format text --graceful-timeout 2
) >"$scratch/server.log" 2>&1 &
server_pid=$!

if ! "$py" - "http://127.0.0.1:$port/healthz" "$server_pid" <<'EOF'; then
import os, sys, time, urllib.request
url, pid = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 60
while True:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit("conformance: the fixture server stopped while starting")
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            if response.status == 200:
                break
    except OSError:
        pass
    if time.monotonic() > deadline:
        sys.exit("conformance: the fixture server did not answer /healthz within 60 s")
    time.sleep(0.1)
EOF
  tail -n 40 "$scratch/server.log" >&2
  keep=1
  exit 1
fi

failed=0
for rev in "${revisions[@]}"; do
  log="$scratch/conformance-$rev.log"
  rc=0
  "$suite" server --url "http://127.0.0.1:$port/mcp" --requirements "$rev" -o "$out/$rev" >"$log" 2>&1 || rc=$?
  "$suite" list --server --requirements "$rev" >"$scratch/required-$rev.txt" 2>&1 || true
  # One line per revision: required scenarios passed (a scenario passes when none of its checks failed), checks,
  # and the scenarios the suite runs but does not score. The suite's own exit status decides.
  "$py" - "$rev" "$rc" "$out/$rev" "$scratch/required-$rev.txt" <<'EOF'
import json, pathlib, re, sys
rev, rc, out, listing = sys.argv[1], int(sys.argv[2]), pathlib.Path(sys.argv[3]), pathlib.Path(sys.argv[4])
required, section = [], False
for line in listing.read_text().splitlines():
    if line.startswith("Server scenarios"):
        section = True
    elif section and (m := re.match(r"\s+- (\S+)$", line)):
        required.append(m.group(1))
    elif section and not line.strip():
        break
results = {}
for path in sorted(out.glob("server-*/checks.json")):
    name = re.sub(r"^server-|-\d{4}-\d\d-\d\dT[\d-]+Z$", "", path.parent.name)
    results[name] = [c["status"] for c in json.loads(path.read_text())]
passed = [n for n in required if n in results and "FAILURE" not in results[n]]
failed = [n for n in required if n not in passed]
checks = sum(len(results.get(n, [])) for n in required)
extra = [n for n in results if n not in required]
extra_ok = sum("FAILURE" not in results[n] for n in extra)
verdict = "PASS" if rc == 0 and not failed else "FAIL"
line = f"conformance {rev}: {verdict} {len(passed)}/{len(required)} required scenarios ({checks} checks)"
line += f"; not scored: {extra_ok}/{len(extra)} passed"
if failed:
    line += "; failed: " + ", ".join(failed)
print(line)
EOF
  if [ "$rc" -ne 0 ]; then
    failed=1
    if grep -q '=== SUMMARY ===' "$log"; then
      sed -n '/=== SUMMARY ===/,$p' "$log" >&2
    else
      tail -n 40 "$log" >&2
    fi
  fi
done

if [ "$failed" -ne 0 ]; then
  keep=1
  exit 1
fi
