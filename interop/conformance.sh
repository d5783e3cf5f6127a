#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance, pinned in interop/package.json) against
# askback's fixture server (tests/conformance/server.py): once per spec revision's frozen requirement set, and once
# for the tasks extension's scenarios.
#
#   interop/conformance.sh [RUN...]        (RUN: a revision, or `tasks`; default: 2026-07-28 2025-11-25 tasks)
#
# Starts one `askback serve` (one worker, a fresh SQLite database and state key in a temporary folder, a free port
# on 127.0.0.1), runs `conformance server --requirements REVISION` for each revision, and for `tasks` each of the
# suite's `tasks-*` scenarios (`conformance server --scenario NAME`: extension scenarios, which a requirement set
# runs without scoring), prints one summary line per run, and stops the server. Exits non-zero when any required
# scenario fails, or any `tasks-*` scenario that TASKS_EXPECTED_FAILURES below does not name; the suite's results
# and the server's log are then kept and their folder printed. No expected-failures file: every required scenario
# passes.
#
# Works from a fresh clone: installs the suite (`npm ci`) and Node 22 (interop/node.sh) when missing. Needs npm on
# PATH and askback installed in the Python it finds: $PYTHON, else the active virtualenv's, else ./.venv's, else
# python3. CONFORMANCE_OUT keeps the suite's results in that folder instead.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=(2026-07-28 2025-11-25 tasks)

# The `tasks-*` scenarios allowed to fail, each with the reason; one that passes while listed fails the run too, so
# that the list only shrinks. It is empty: every scenario must pass.
TASKS_EXPECTED_FAILURES=()

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

run_revision() {
  local rev="$1" log rc
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
}

# The tasks extension: every `tasks-*` server scenario the suite lists, one `--scenario` run each (at 2026-07-28,
# the wire the suite runs extension scenarios on). One line: scenarios passed and checks; each failing scenario's
# failed checks follow on stderr.
run_tasks() {
  local names=() name rc=0
  "$suite" list --server >"$scratch/scenarios.txt" 2>&1 || rc=$?
  mapfile -t names < <(sed -n 's/^ *- \(tasks-[a-z0-9-]*\) \[extension\]$/\1/p' "$scratch/scenarios.txt")
  if [ "$rc" -ne 0 ] || [ ${#names[@]} -eq 0 ]; then
    echo "conformance tasks: FAIL the suite lists no tasks-* scenarios"
    cat "$scratch/scenarios.txt" >&2
    failed=1
    return
  fi
  for name in "${names[@]}"; do
    "$suite" server --url "http://127.0.0.1:$port/mcp" --scenario "$name" -o "$out/tasks" \
      >"$scratch/conformance-$name.log" 2>&1 || true
  done
  # A scenario passes when it saved its checks and none of them failed (the suite's SKIPPED, INFO and WARNING
  # checks do not fail it).
  "$py" - "$out/tasks" "${names[@]}" -- "${TASKS_EXPECTED_FAILURES[@]}" <<'EOF' || failed=1
import json, pathlib, re, sys
out, args = pathlib.Path(sys.argv[1]), sys.argv[2:]
names, allowed = args[: args.index("--")], set(args[args.index("--") + 1 :])
checks = {}
for path in sorted(out.glob("server-tasks-*/checks.json")):
    checks[re.sub(r"^server-|-\d{4}-\d\d-\d\dT[\d-]+Z$", "", path.parent.name)] = json.loads(path.read_text())
passed = [n for n in names if n in checks and all(c["status"] != "FAILURE" for c in checks[n])]
failed = [n for n in names if n not in passed]
unexpected = [n for n in failed if n not in allowed]
stale = sorted(n for n in allowed if n in passed or n not in names)
verdict = "FAIL" if unexpected or stale else "PASS"
line = f"conformance tasks: {verdict} {len(passed)}/{len(names)} scenarios ({sum(map(len, checks.values()))} checks)"
if failed:
    line += "; failed: " + ", ".join(f"{n} (expected)" if n in allowed else n for n in failed)
if stale:
    line += "; listed in TASKS_EXPECTED_FAILURES but not failing: " + ", ".join(stale)
print(line)
for name in failed:
    if name not in checks:
        print(f"  {name}: the suite saved no checks (see its log)", file=sys.stderr)
    for check in checks.get(name, []):
        if check["status"] == "FAILURE":
            print(f"  {name} [{check['id']}]: {check.get('errorMessage', '')}", file=sys.stderr)
sys.exit(1 if verdict == "FAIL" else 0)
EOF
}

failed=0
for run in "${runs[@]}"; do
  if [ "$run" = tasks ]; then
    run_tasks
  else
    run_revision "$run"
  fi
done

if [ "$failed" -ne 0 ]; then
  keep=1
  exit 1
fi
