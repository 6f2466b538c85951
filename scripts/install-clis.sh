#!/usr/bin/env bash
# Install the four agent CLIs that agentbox drives, pinned, into <repo>/.tools/:
#   .tools/npm/          npm prefix: claude, codex, opencode (native binaries ship in the packages)
#   .tools/hermes-venv/  a private venv for hermes-agent (kept apart from agentbox's own deps)
#   .tools/bin/          claude codex opencode hermes (relative symlinks)
# Idempotent: re-running with everything in place only checks versions (a second or so).
# Needs: node >= 18 with npm, python >= 3.11 (override with PYTHON=/path/to/python3.11).
# Env: TOOLS_DIR (default <repo>/.tools), PYTHON, FORCE=1 to reinstall.
set -euo pipefail

CLAUDE_VERSION=2.1.197
CODEX_VERSION=0.171.0
OPENCODE_VERSION=1.18.33
HERMES_VERSION=0.19.0

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
tools="${TOOLS_DIR:-$repo/.tools}"
npm_prefix="$tools/npm"
venv="$tools/hermes-venv"
bin="$tools/bin"
force="${FORCE:-0}"

log() { printf 'install-clis: %s\n' "$*"; }
die() { printf 'install-clis: ERROR: %s\n' "$*" >&2; exit 1; }

mkdir -p "$tools" "$bin"

# ---- npm packages -------------------------------------------------------------------
npm_pkgs=(
  "@anthropic-ai/claude-code@$CLAUDE_VERSION"
  "@openai/codex@$CODEX_VERSION"
  "opencode-ai@$OPENCODE_VERSION"
)

installed_npm_version() {  # $1 = package name -> prints version or nothing
  local pj="$npm_prefix/node_modules/$1/package.json"
  [ -f "$pj" ] || return 0
  node -e 'try{process.stdout.write(require(process.argv[1]).version||"")}catch(e){}' "$pj"
}

need_npm=0
for spec in "${npm_pkgs[@]}"; do
  name="${spec%@*}"; want="${spec##*@}"
  have="$(installed_npm_version "$name")"
  if [ "$force" = 1 ] || [ "$have" != "$want" ]; then
    log "npm: $name ${have:-absent} -> $want"
    need_npm=1
  else
    log "npm: $name $have already installed"
  fi
done

if [ "$need_npm" = 1 ]; then
  command -v npm >/dev/null || die "npm not found (install nodejs + npm)"
  mkdir -p "$npm_prefix"
  # A package.json in the prefix keeps npm from walking up into the repo.
  [ -f "$npm_prefix/package.json" ] || echo '{"name":"agentbox-tools","private":true}' > "$npm_prefix/package.json"
  log "running: npm install --prefix $npm_prefix ${npm_pkgs[*]}"
  # opencode-ai's postinstall runs `opencode --version`, which creates its XDG dirs:
  # keep those out of the real $HOME.
  ih="$tools/.install-home"
  env XDG_CONFIG_HOME="$ih/config" XDG_DATA_HOME="$ih/data" XDG_STATE_HOME="$ih/state" \
      XDG_CACHE_HOME="$ih/cache" OPENCODE_DISABLE_AUTOUPDATE=1 \
      npm install --prefix "$npm_prefix" --no-audit --no-fund --loglevel=error "${npm_pkgs[@]}" \
    || { rm -rf "$ih"; die "npm install failed"; }
  rm -rf "$ih"
fi

# ---- hermes-agent in its own venv ---------------------------------------------------
hermes_have=""
if [ -x "$venv/bin/python" ]; then
  hermes_have="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("hermes-agent"))' 2>/dev/null || true)"
fi
if [ "$force" = 1 ] || [ "$hermes_have" != "$HERMES_VERSION" ] || [ ! -x "$venv/bin/hermes" ]; then
  log "pip: hermes-agent ${hermes_have:-absent} -> $HERMES_VERSION"
  if [ ! -x "$venv/bin/python" ]; then
    py="${PYTHON:-}"
    if [ -z "$py" ]; then
      for c in python3.11 python3.12 python3.13 python3; do
        if command -v "$c" >/dev/null && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
          py="$c"; break
        fi
      done
    fi
    [ -n "$py" ] || die "no python >= 3.11 found (set PYTHON=...)"
    log "creating venv $venv with $("$py" --version 2>&1)"
    if ! "$py" -m venv "$venv"; then
      # Debian's system python needs python3-venv for ensurepip; try to add it when root.
      rm -rf "$venv"
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        log "python -m venv failed; installing python3-venv with apt-get"
        apt-get install -y -q python3-venv >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q python3-venv >/dev/null; } \
          || die "apt-get install python3-venv failed"
        "$py" -m venv "$venv" || die "python -m venv failed even after installing python3-venv"
      else
        die "python -m venv failed (on Debian: apt-get install python3-venv)"
      fi
    fi
  fi
  # -qq: only errors (a site pip.conf may add find-links that warn on every package)
  reinstall=(); [ "$force" = 1 ] && reinstall=(--force-reinstall)
  "$venv/bin/python" -m pip install -qq --disable-pip-version-check "${reinstall[@]}" "hermes-agent==$HERMES_VERSION" \
    || die "pip install hermes-agent==$HERMES_VERSION failed"
else
  log "pip: hermes-agent $hermes_have already installed"
fi

# ---- .tools/bin -----------------------------------------------------------------------
# One link per agent CLI of agentbox.core.tools (tests/core/test_tools.py keeps them equal).
linked=()
link() {  # $1 name, $2 target relative to $bin
  local target="$2" dest="$bin/$1"
  linked+=("$1")
  [ -e "$bin/$target" ] || die "missing $bin/$target after install"
  if [ "$(readlink "$dest" 2>/dev/null || true)" != "$target" ]; then
    ln -sfn "$target" "$dest"
    log "linked $dest -> $target"
  fi
}
link claude   ../npm/node_modules/.bin/claude
link codex    ../npm/node_modules/.bin/codex
link opencode ../npm/node_modules/.bin/opencode
link hermes   ../hermes-venv/bin/hermes

# ---- smoke check: each binary answers --version ---------------------------------------
# Run with a throwaway home (not under /tmp: codex refuses to set up its helpers there):
# even --version writes state (codex ~/.codex/tmp, opencode XDG
# dirs, hermes ~/.hermes and an update check) and we do not want that in the real $HOME.
scratch="$tools/.smoke-home"; rm -rf "$scratch"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/.codex" "$scratch/.hermes" "$scratch/.claude"
# hermes --version checks PyPI for updates unless its 6-hour cache says it is current.
printf '{"ts": %s, "behind": 0, "rev": null, "ver": "%s"}\n' "$(date +%s)" "$HERMES_VERSION" > "$scratch/.hermes/.update_check"
for t in "${linked[@]}"; do
  if ! out="$(env HOME="$scratch" XDG_CONFIG_HOME="$scratch/.config" XDG_DATA_HOME="$scratch/.local/share" \
        XDG_STATE_HOME="$scratch/.local/state" XDG_CACHE_HOME="$scratch/.cache" \
        CODEX_HOME="$scratch/.codex" HERMES_HOME="$scratch/.hermes" CLAUDE_CONFIG_DIR="$scratch/.claude" \
        DISABLE_AUTOUPDATER=1 OPENCODE_DISABLE_AUTOUPDATE=1 \
        timeout 60 "$bin/$t" --version </dev/null 2>&1)"; then
    die "$t --version failed: $out"
  fi
  first="$(printf '%s\n' "$out" | grep -v '^WARNING' | head -n1)"
  log "$t: $first"
done
log "done; put $bin on PATH"
