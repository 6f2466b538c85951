#!/usr/bin/env bash
# The unprivileged half of the sandbox tests: as root, make a throwaway user and a Python
# environment that user can run (the tests in tests/security/ run again as that user,
# because agentbox's sandbox must hold for root and for ordinary users alike).
# Prints nothing and does nothing when not run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || exit 0

user=agentbox-test
base=/var/tmp/agentbox-test-user
id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/sh "$user"

# a Python >= 3.11 the user can execute (the root user's own may live under /root)
py=""
for candidate in /usr/bin/python3 /usr/local/bin/python3 "$(command -v python3 || true)"; do
  [ -n "$candidate" ] && [ -x "$candidate" ] || continue
  if runuser -u "$user" -- "$candidate" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
    py=$candidate; break
  fi
done
if [ -z "$py" ]; then
  apt-get update -qq && apt-get install -y -qq python3 python3-venv >/dev/null
  py=/usr/bin/python3
fi
"$py" -c 'import venv, ensurepip' 2>/dev/null || { apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null; }

# the dependencies only: the tests put a fresh copy of the working tree first on the path
reqs=$("$py" - <<'PY'
import tomllib
data = tomllib.load(open("pyproject.toml", "rb"))["project"]
# agentbox's own extras are not requirements here: as a plain line `agentbox[...]` names another project on PyPI
print("\n".join(r for r in [*data["dependencies"], *data["optional-dependencies"]["test"]]
                if not r.replace("-", "_").lower().startswith("agentbox")))
PY
)
stamp=$(printf '%s\n%s\n' "$py" "$reqs" | sha256sum | cut -c1-16)
if [ ! -f "$base/venv/.stamp-$stamp" ]; then
  rm -rf "$base/venv"
  mkdir -p "$base"
  "$py" -m venv "$base/venv"
  printf '%s\n' "$reqs" > "$base/requirements.txt"
  "$base/venv/bin/pip" install --quiet --upgrade pip
  "$base/venv/bin/pip" install --quiet -r "$base/requirements.txt"
  touch "$base/venv/.stamp-$stamp"
fi
chmod -R a+rX "$base"
echo "setup-test-user: $user can run $base/venv/bin/python"
