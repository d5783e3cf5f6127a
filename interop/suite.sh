# Sourced by interop/conformance.sh and interop/conformance-client.sh: what both need before they run the official
# conformance suite. Expects `here` (interop/), `root` (the repository), `scratch` (a temporary folder) and `who`
# (the name to print in messages); sets `py` (the Python with askback installed: $PYTHON, else the active
# virtualenv's, else ./.venv's, else python3) and `suite` (the suite's command), installs the suite at the version
# the lockfile pins when it is missing, and puts Node 22 first on PATH.

# npm keeps its cache under $HOME, which CI may leave unset.
export HOME="${HOME:-$scratch/home}"
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false

if [ -n "${PYTHON:-}" ]; then
  py="$PYTHON"
elif [ -n "${VIRTUAL_ENV:-}" ]; then
  py="$VIRTUAL_ENV/bin/python"
elif [ -x "$root/.venv/bin/python" ]; then
  py="$root/.venv/bin/python"
else
  py=python3
fi

# `npm ci` runs before Node 22 is put on PATH, since it replaces interop/node_modules, where interop/node.sh may
# have installed that Node.
installed_version() {
  "$py" - "$here" <<'PY'
import json, pathlib, sys
here = pathlib.Path(sys.argv[1])
pkg = here / "node_modules/@modelcontextprotocol/conformance/package.json"
lock = json.loads((here / "package-lock.json").read_text())
wanted = lock["packages"]["node_modules/@modelcontextprotocol/conformance"]["version"]
have = json.loads(pkg.read_text())["version"] if pkg.exists() else None
print("ok" if have == wanted else f"want {wanted}, have {have}")
PY
}
# One install at a time (test processes run side by side): the Python tests take the same lock (tests/infra.py).
exec 9>>"$here/.install.lock"
flock 9
if [ "$(installed_version)" != ok ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "$who: npm is needed to install the suite (apt-get install npm)" >&2
    exit 2
  fi
  echo "$who: installing the suite (npm ci in interop/)" >&2
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error >&2)
fi
PATH="$("$here/node.sh"):$PATH"
export PATH
flock -u 9
suite="$here/node_modules/.bin/conformance"
