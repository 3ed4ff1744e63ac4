#!/bin/sh
# Rebuilds node/console/assets/vendor/ from npm (`make console-assets`; run from the repository root).
# The versions are exact, pinned in node/console/npm/package.json and its lock file (with integrity
# hashes); `npm ci` installs exactly those. Only the built, minified files the console loads are copied,
# each library's licence beside them (LICENSE-<package>); ATTRIBUTION.md names them all.
set -eu
out=node/console/assets/vendor
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
cp node/console/npm/package.json node/console/npm/package-lock.json "$tmp"/
( cd "$tmp" && npm ci --silent --no-audit --no-fund --ignore-scripts )
m="$tmp/node_modules"
rm -rf "$out"
mkdir -p "$out"
cp "$m/d3-array/dist/d3-array.min.js" "$m/d3-geo/dist/d3-geo.min.js" \
	"$m/topojson-client/dist/topojson-client.min.js" \
	"$m/uplot/dist/uPlot.iife.min.js" "$m/uplot/dist/uPlot.min.css" "$out"/
# Natural Earth 1:110m countries (world-atlas): the map's land and borders
cp "$m/world-atlas/countries-110m.json" "$out"/
for p in d3-array d3-geo topojson-client uplot world-atlas; do
	cp "$m/$p/LICENSE" "$out/LICENSE-$p"
done
# the versions actually installed, for ATTRIBUTION.md and `micra licenses`
for p in d3-array d3-geo topojson-client uplot world-atlas; do
	printf '%s %s\n' "$p" "$(node -p "require('$m/$p/package.json').version")"
done > "$out/VERSIONS"
echo "console assets: $(du -ck "$out"/* | tail -1 | cut -f1) KiB in $out"
