#!/usr/bin/env bash
# Prints the python of interop/fastmcp/.venv, the virtualenv of the FastMCP tasks peer (fastmcp-tasks on pydocket),
# making it with `python3 -m venv` from interop/fastmcp/requirements.txt when it is missing or was made from other
# requirements or another python3 (their hash is kept in the venv). Used by the interop tests, and so by .ci/run.
# Exits 75 when pip could not connect to the package registry, so the tests can tell that from a broken install.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)/fastmcp"
venv="$here/.venv"
wanted="$({ cat "$here/requirements.txt"; python3 -VV; } | sha256sum | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/requirements.sha256" 2>/dev/null)" != "$wanted" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  log="$(mktemp)"
  trap 'rm -f "$log"' EXIT
  # Not -q: pip tells of a registry it cannot connect to only in its warnings.
  if ! "$venv/bin/python" -m pip install --disable-pip-version-check -r "$here/requirements.txt" >"$log" 2>&1; then
    cat "$log" >&2
    rm -rf "$venv"
    if grep -qE "NewConnectionError|ConnectTimeoutError|ReadTimeoutError|ProxyError|Name or service not known|Temporary failure in name resolution|Network is unreachable" "$log"; then
      exit 75
    fi
    exit 1
  fi
  echo "$wanted" >"$venv/requirements.sha256"
fi
echo "$venv/bin/python"
