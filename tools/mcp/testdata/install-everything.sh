#!/usr/bin/env bash
# Installs @modelcontextprotocol/server-everything, the MCP server the tests of
# package mcp run against, into a cache directory next to Go's build cache
# ($(go env GOCACHE)/noeta-npm), once. The tests look for it there and fail,
# loudly, when it is missing. Set NOETA_MCP_EVERYTHING_VERSION to pin another
# version.
set -euo pipefail

version="${NOETA_MCP_EVERYTHING_VERSION:-2026.8.31}"
prefix="$(go env GOCACHE)/noeta-npm"
pkg="$prefix/node_modules/@modelcontextprotocol/server-everything/package.json"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	echo "install-everything: node and npm are needed for the MCP tests" >&2
	exit 1
fi
if [ -f "$pkg" ] && grep -q "\"version\": \"$version\"" "$pkg"; then
	exit 0
fi
mkdir -p "$prefix"
npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
	"@modelcontextprotocol/server-everything@$version"
