#!/usr/bin/env bash
# Installs what the conformance tests run, into the npm cache directory of
# install-everything.sh ($(go env GOCACHE)/noeta-npm), once:
#   @modelcontextprotocol/conformance, the MCP project's conformance suite
#     (its server scenarios against engine gateway, its client scenarios
#     against package mcp's client);
#   @modelcontextprotocol/inspector, whose CLI mode lists and calls tools
#     through engine gateway;
#   node, Node.js 22 from npm: both need a newer Node than Debian's.
# The tests look for them there and fail, loudly, when they are missing.
set -euo pipefail

conformance="${NOETA_MCP_CONFORMANCE_VERSION:-0.1.16}"
inspector="${NOETA_MCP_INSPECTOR_VERSION:-0.21.2}"
node22="${NOETA_NODE_VERSION:-22.23.3}"
prefix="$(go env GOCACHE)/noeta-npm"
modules="$prefix/node_modules"

if ! command -v npm >/dev/null; then
	echo "install-conformance: npm is needed for the MCP conformance tests" >&2
	exit 1
fi
has() { [ -f "$modules/$1/package.json" ] && grep -q "\"version\": \"$2\"" "$modules/$1/package.json"; }
if has @modelcontextprotocol/conformance "$conformance" && has @modelcontextprotocol/inspector "$inspector" && has node "$node22"; then
	exit 0
fi
mkdir -p "$prefix"
npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
	"@modelcontextprotocol/conformance@$conformance" \
	"@modelcontextprotocol/inspector@$inspector" \
	"node@$node22"
"$modules/node/bin/node" --version
